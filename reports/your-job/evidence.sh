#!/usr/bin/env bash
# The evidence of reports/your-job.md (issue 31), one run at a time under `nice -n 10`; rerunning skips what
# finished. Then: python -m tools.evidence.your_job $OUT > reports/your-job.md
#   OUT=/tmp/your-job bash reports/your-job/evidence.sh
#
# Third-party scripts are not copied into this repository: section 4 takes transformers' run_clm.py from RUN_CLM (a
# downloaded copy) or TRANSFORMERS_SRC (a checkout); without one, those rows are skipped and say so.
set -euo pipefail
OUT=${OUT:?set OUT}
RSSPROBE=${RSSPROBE:-python -m rssprobe}
NICE=(nice -n 10)
FIXED=(--malloc-env MALLOC_MMAP_THRESHOLD_=65536)
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
HF_ARGS=(--model_type llama --hidden_size 256 --intermediate_size 704 --layers 2 --heads 4 --kv_heads 2
         --vocab_size 4096 --seq_len 16)
SMALL=(--set model.hf.hidden_size=256 --set model.hf.intermediate_size=704 --set model.hf.num_hidden_layers=2
       --set model.hf.num_attention_heads=4 --set model.hf.vocab_size=4096 --set model.seq_len=16)
LINEAR_ARGS=(--deepspeed_config "$ROOT/examples/ds_config_linear.json" --steps 2 --width 512)
mkdir -p "$OUT/runs"

run() {  # run NAME ARGS...: one `rssprobe run` into $OUT/runs/NAME unless it finished before
  local name=$1; shift
  [[ -f $OUT/runs/$name/manifest.json ]] && grep -q '"status": "ok"' "$OUT/runs/$name/manifest.json" && return 0
  rm -rf "$OUT/runs/$name"
  # --out first: after a `--` it would be the script's or the launcher's argument
  "${NICE[@]}" $RSSPROBE run --out "$OUT/runs/$name" "$@" > "$OUT/runs/$name.log" 2>&1 || echo "$name: failed (see $OUT/runs/$name.log)"
}

# 1. Script runs as exact as scenarios: a ZeRO-3 script and the scenario of the same model and config
run z3-script --script "$ROOT/examples/train_hf.py" --steps 2 "${FIXED[@]}" -- "${HF_ARGS[@]}" \
    --deepspeed_config "$ROOT/examples/ds_config_hf_zero3.json" --steps 3
run z3-scenario llama-small-zero3 --steps 2 "${SMALL[@]}" "${FIXED[@]}"
run aa-1 --script "$ROOT/examples/train_hf.py" --trim-at-end -- "${HF_ARGS[@]}" --steps 2 \
    --deepspeed_config "$ROOT/examples/ds_config_linear.json"
run aa-2 --script "$ROOT/examples/train_hf.py" --trim-at-end -- "${HF_ARGS[@]}" --steps 2 \
    --deepspeed_config "$ROOT/examples/ds_config_linear.json"
run trainer-ga2 --script "$ROOT/tests/data/scripts/train_trainer.py" "${FIXED[@]}" -- --out "$OUT/trainer-output" \
    --grad_accum 2 --max_steps 3
# a script's fixed and per-parameter cost apart: its own --layers option swept
[[ -f $OUT/scale-linear/scale.json ]] || "${NICE[@]}" $RSSPROBE scale --script "$ROOT/examples/train_linear.py" \
    --size-arg layers=2,4,8 "${FIXED[@]}" --out "$OUT/scale-linear" --format json -- "${LINEAR_ARGS[@]}" \
    > "$OUT/scale-linear.json" 2> "$OUT/scale-linear.log" || echo "scale-linear: see $OUT/scale-linear.log"

# 2. Each launcher: the same script at 2 ranks
run launch-torchrun "${FIXED[@]}" -- torchrun --nproc-per-node 2 --master-port 29631 "$ROOT/examples/train_linear.py" \
    "${LINEAR_ARGS[@]}"
run launch-deepspeed "${FIXED[@]}" -- deepspeed --num_gpus 2 --master_port 29632 "$ROOT/examples/train_linear.py" \
    "${LINEAR_ARGS[@]}"
run launch-accelerate "${FIXED[@]}" -- accelerate launch --multi_gpu --num_processes 2 --main_process_port 29633 \
    "$ROOT/examples/train_linear.py" "${LINEAR_ARGS[@]}"
run launch-python "${FIXED[@]}" -- python "$ROOT/examples/train_linear.py" "${LINEAR_ARGS[@]}"

# 3. Loading a checkpoint: FAI-RL #68's order at ZeRO-3, 1, 2 and 4 ranks (llama-small-zero3, 25.2 M params)
for ranks in 1 2 4; do
  for order in before after; do
    run "load-z3-${ranks}r-$order" llama-small-zero3 --world-size "$ranks" --steps 1 --set 'model.load="checkpoint"' \
        --set "model.from_pretrained.hf_ds_config=\"$order\"" "${FIXED[@]}"
    run "load-z3bf-${ranks}r-$order" llama-small-zero3 --world-size "$ranks" --steps 1 \
        --set 'model.load="checkpoint"' --set 'model.from_pretrained.torch_dtype="bf16"' \
        --set "model.from_pretrained.hf_ds_config=\"$order\"" "${FIXED[@]}"
  done
done
# safetensors against .bin, loaded against built (ZeRO-2, 1 rank)
run load-built llama-small --steps 2 --trim-at-end "${SMALL[@]}" "${FIXED[@]}"
for format in safetensors bin; do
  run "load-$format" llama-small --steps 2 --trim-at-end "${SMALL[@]}" --set 'model.load="checkpoint"' \
      --set "model.from_pretrained.format=\"$format\"" "${FIXED[@]}"
done
run load-bf16-on-disk llama-small --steps 2 --trim-at-end "${SMALL[@]}" --set 'model.load="checkpoint"' \
    --set 'model.from_pretrained.dtype_on_disk="bf16"' "${FIXED[@]}"

# transformers #47514 small: the smallest Qwen3-MoE at ZeRO-3, 2 ranks, zero.Init during the load or not; then the
# same load across the transformers releases the registry offers around the report (4.51.3 bounded, 5.13.0 not),
# one environment each (matrix: resumable; bisect --transformers would search between them)
MOE=$ROOT/reports/your-job/qwen3-moe-tiny.toml
for order in before after; do
  run "moe-z3-2r-$order" "$MOE" --world-size 2 --set "model.from_pretrained.hf_ds_config=\"$order\"" "${FIXED[@]}"
done
if [[ ${RELEASES:-1} == 1 ]]; then
  "${NICE[@]}" $RSSPROBE matrix "$MOE" --set world_size=2 --transformers 4.51.3,5.13.0,5.24.0 --repeat 1 \
      --out "$OUT/moe-releases" > "$OUT/moe-releases.log" 2>&1 || echo "moe-releases: see $OUT/moe-releases.log"
  # which release moved the load's peak: the last of each minor between 4.51.3 (bounded in #47514) and 5.13.0
  "${NICE[@]}" $RSSPROBE bisect "$MOE" --set world_size=2 --metric load.peak --out "$OUT/moe-bisect" --transformers \
      4.51.3,4.52.4,4.53.3,4.54.1,4.55.4,4.56.2,4.57.6,5.0.0,5.1.0,5.2.0,5.3.0,5.4.0,5.5.4,5.6.2,5.7.0,5.8.1,5.9.0,\
5.10.4,5.11.0,5.12.1,5.13.0 > "$OUT/moe-bisect.log" 2>&1 || echo "moe-bisect: see $OUT/moe-bisect.log"
fi

# 4. Third-party scripts, never copied here. transformers' run_clm.py (HF Trainer), unmodified, offline: RUN_CLM
# names a copy of examples/pytorch/language-modeling/run_clm.py (e.g. `curl -LO https://raw.githubusercontent.com/
# huggingface/transformers/main/examples/pytorch/language-modeling/run_clm.py`), or TRANSFORMERS_SRC a checkout.
# It needs `pip install datasets evaluate`; prepare.py makes its tokenizer, training text and DeepSpeed configs.
CLM=${RUN_CLM:-${TRANSFORMERS_SRC:+$TRANSFORMERS_SRC/examples/pytorch/language-modeling/run_clm.py}}
if [[ -n $CLM && -f $CLM ]]; then
  I=$OUT/run_clm-inputs
  [[ -f $I/ds_zero3.json ]] || python "$ROOT/reports/your-job/run_clm/prepare.py" "$I" > /dev/null
  export HF_HUB_OFFLINE=1 HF_DATASETS_CACHE=$OUT/hf-datasets
  CLM_ARGS=(--model_type llama --config_overrides "hidden_size=256,intermediate_size=704,num_hidden_layers=2,\
num_attention_heads=4,num_key_value_heads=2,vocab_size=4096,max_position_embeddings=512" --tokenizer_name "$I/tokenizer"
            --train_file "$I/train.txt" --do_train --max_steps 4 --per_device_train_batch_size 2 --block_size 16
            --bf16 --use_cpu --report_to none --save_strategy no --logging_steps 1 --disable_tqdm true)
  for stage in 2 3; do
    run "clm-z$stage" --script "$CLM" -- "${CLM_ARGS[@]}" --deepspeed "$I/ds_zero$stage.json" \
        --output_dir "$OUT/clm-out/z$stage"
  done
  run clm-z3-ga2 --script "$CLM" -- "${CLM_ARGS[@]}" --deepspeed "$I/ds_zero3.json" --gradient_accumulation_steps 2 \
      --output_dir "$OUT/clm-out/z3-ga2"
  run clm-z2-2r --script "$CLM" --world-size 2 -- "${CLM_ARGS[@]}" --deepspeed "$I/ds_zero2.json" \
      --output_dir "$OUT/clm-out/z2-2r"
  run clm-z2-torchrun -- torchrun --nproc-per-node 2 --master-port 29634 "$CLM" "${CLM_ARGS[@]}" \
      --deepspeed "$I/ds_zero2.json" --output_dir "$OUT/clm-out/z2-torchrun"
  run clm-z2-deepspeed -- deepspeed --num_gpus 2 --master_port 29638 "$CLM" "${CLM_ARGS[@]}" \
      --deepspeed "$I/ds_zero2.json" --output_dir "$OUT/clm-out/z2-deepspeed"
  run clm-z2-accelerate -- accelerate launch --multi_gpu --num_processes 2 --main_process_port 29639 "$CLM" \
      "${CLM_ARGS[@]}" --deepspeed "$I/ds_zero2.json" --output_dir "$OUT/clm-out/z2-accelerate"
  # the same ZeRO-3 run under the code before issue 31's fixes (2f7e902), from a worktree of this repository
  BEFORE=$OUT/before-src
  [[ -d $BEFORE ]] || git -C "$ROOT" worktree add --detach "$BEFORE" 2f7e902 > /dev/null
  [[ -f $OUT/runs/clm-z3-before/manifest.json ]] || (cd "$BEFORE" && PYTHONPATH=$BEFORE "${NICE[@]}" \
      python -m rssprobe run --out "$OUT/runs/clm-z3-before" --script "$CLM" -- "${CLM_ARGS[@]}" \
      --deepspeed "$I/ds_zero3.json" --output_dir "$OUT/clm-out/z3-before" > "$OUT/runs/clm-z3-before.log" 2>&1) \
      || echo "clm-z3-before: failed (see $OUT/runs/clm-z3-before.log)"
else
  echo "skipped: set RUN_CLM to a copy of transformers' run_clm.py (or TRANSFORMERS_SRC to a checkout)"
fi
# 5. DeepSpeedExamples' training/HelloDeepSpeed/train_bert_ds.py (its own ZeRO-1 config, optimizer offloaded),
# unmodified, offline: HELLO_DS names a copy (e.g. `curl -LO https://raw.githubusercontent.com/deepspeedai/
# DeepSpeedExamples/master/training/HelloDeepSpeed/train_bert_ds.py`), or DSE_SRC a checkout. It needs
# `pip install datasets fire loguru pytz sh==1.14.2 tensorboard` (sh as its requirements.txt pins it: sh 2 returns a str
# where the script reads .stdout); prepare.py makes the wikitext stand-in and its tokenizer.
HDS=${HELLO_DS:-${DSE_SRC:+$DSE_SRC/training/HelloDeepSpeed/train_bert_ds.py}}
if [[ -n $HDS && -f $HDS ]]; then
  H=$OUT/hello_ds-inputs
  [[ -f $H/tokenizer/tokenizer.json ]] || python "$ROOT/reports/your-job/hello_ds/prepare.py" "$H" > /dev/null
  export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 HF_DATASETS_CACHE=$H/datasets
  mkdir -p "$OUT/hds-out"
  HDS_ARGS=(--tokenizer "$H/tokenizer" --num_iterations 4 --log_every 1 --checkpoint_every 1000 --max_seq_length 128)
  run hds-z1 --script "$HDS" -- "${HDS_ARGS[@]}" --checkpoint_dir "$OUT/hds-out/z1"
  run hds-z1-2r --script "$HDS" --world-size 2 -- "${HDS_ARGS[@]}" --checkpoint_dir "$OUT/hds-out/z1-2r"
  run hds-z1-torchrun -- torchrun --nproc-per-node 2 --master-port 29635 "$HDS" "${HDS_ARGS[@]}" \
      --checkpoint_dir "$OUT/hds-out/z1-torchrun"
  run hds-z1-deepspeed -- deepspeed --num_gpus 2 --master_port 29636 "$HDS" "${HDS_ARGS[@]}" \
      --checkpoint_dir "$OUT/hds-out/z1-deepspeed"
  run hds-z1-accelerate -- accelerate launch --multi_gpu --num_processes 2 --main_process_port 29637 "$HDS" \
      "${HDS_ARGS[@]}" --checkpoint_dir "$OUT/hds-out/z1-accelerate"
  BEFORE=$OUT/before-src
  [[ -d $BEFORE ]] || git -C "$ROOT" worktree add --detach "$BEFORE" 2f7e902 > /dev/null
  [[ -f $OUT/runs/hds-z1-before/manifest.json ]] || (cd "$BEFORE" && PYTHONPATH=$BEFORE "${NICE[@]}" \
      python -m rssprobe run --out "$OUT/runs/hds-z1-before" --script "$HDS" -- "${HDS_ARGS[@]}" \
      --checkpoint_dir "$OUT/hds-out/z1-before" > "$OUT/runs/hds-z1-before.log" 2>&1) \
      || echo "hds-z1-before: failed (see $OUT/runs/hds-z1-before.log)"
else
  echo "skipped: set HELLO_DS to a copy of DeepSpeedExamples' train_bert_ds.py (or DSE_SRC to a checkout)"
fi
# 6. Issue 42: TRL's SFTTrainer, PEFT LoRA, an accelerate loop and a Trainer job's saves, in another virtualenv
# (TP_VENV: reports/your-job/finetune/evidence.sh says what it holds)
if [[ -n ${TP_VENV:-} ]]; then
  # rssprobe's own interpreter by its path: PATH's `python` is TP_VENV's there (RSSPROBE_OWN: another command)
  OUT=$OUT RSSPROBE=${RSSPROBE_OWN:-${RSSPROBE/#python /$(command -v python) }} \
      bash "$ROOT/reports/your-job/finetune/evidence.sh"
else
  echo "skipped: set TP_VENV to a virtualenv with trl, peft and datasets (reports/your-job/finetune/evidence.sh)"
fi
