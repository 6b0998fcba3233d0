#!/usr/bin/env bash
# Issue 42's evidence: TRL's SFTTrainer, PEFT LoRA and an accelerate loop (the scripts beside this file), and the
# save phase of a Trainer job, each run once under `nice -n 10`; rerunning skips what finished. Called by
# reports/your-job/evidence.sh when TP_VENV is set, or alone:
#   OUT=/tmp/your-job TP_VENV=/work/tp-venv RSSPROBE="$PWD/.venv/bin/python -m rssprobe" \
#       bash reports/your-job/finetune/evidence.sh
# TP_VENV is a virtualenv with trl, peft and datasets beside the torch, DeepSpeed, transformers and accelerate
# versions rssprobe's own has (never installed into rssprobe's): `python3.11 -m venv $TP_VENV`, then
# `$TP_VENV/bin/pip install torch==2.13.0 deepspeed==0.19.8 transformers==5.24.0 accelerate==1.16.0 ninja trl peft
# datasets`. The ranks run in it (`--python`, and its launchers first on PATH); RSSPROBE must name rssprobe's own
# interpreter, as PATH's `python` is then the other environment's.
set -euo pipefail
OUT=${OUT:?set OUT}
TP=${TP_VENV:?set TP_VENV}
RSSPROBE=${RSSPROBE:?set RSSPROBE to rssprobe\'s own interpreter, e.g. \"\$PWD/.venv/bin/python -m rssprobe\"}
NICE=(nice -n 10)
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../../.." && pwd)
I=$OUT/finetune-inputs
mkdir -p "$OUT/runs" "$OUT/finetune-out"
export PATH=$TP/bin:$PATH HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 HF_DATASETS_CACHE=$OUT/hf-datasets-finetune
[[ -f $I/model/model.safetensors ]] || "$TP/bin/python" "$HERE/prepare.py" "$I" > /dev/null 2>&1

run() {  # run NAME ARGS...: one `rssprobe run` in TP_VENV into $OUT/runs/NAME unless it finished before
  local name=$1; shift
  [[ -f $OUT/runs/$name/manifest.json ]] && grep -q '"status": "ok"' "$OUT/runs/$name/manifest.json" && return 0
  rm -rf "$OUT/runs/$name"
  "${NICE[@]}" $RSSPROBE run --python "$TP/bin/python" --out "$OUT/runs/$name" "$@" > "$OUT/runs/$name.log" 2>&1 \
      || echo "$name: failed (see $OUT/runs/$name.log)"
}
ACC=(accelerate launch --multi_gpu --num_processes 2)
TR=(torchrun --nproc-per-node 2)
SFT=$HERE/sft.py
LOOP=$HERE/loop.py

# TRL SFTTrainer, ZeRO-2, optimizer offloaded: 1 rank, then 2 ranks under accelerate launch and torchrun
run sft-z2-1r-torchrun -- torchrun --nproc-per-node 1 --master-port 29701 "$SFT" --inputs "$I" \
    --out "$OUT/finetune-out/sft-z2-1r-torchrun"
run sft-z2-1r-accelerate -- accelerate launch --num_processes 1 --main_process_port 29709 "$SFT" --inputs "$I" \
    --out "$OUT/finetune-out/sft-z2-1r-accelerate"
run sft-z2-2r-accelerate -- "${ACC[@]}" --main_process_port 29702 "$SFT" --inputs "$I" \
    --out "$OUT/finetune-out/sft-z2-2r-accelerate"
run sft-z2-2r-torchrun -- "${TR[@]}" --master-port 29703 "$SFT" --inputs "$I" --out "$OUT/finetune-out/sft-z2-2r-torchrun"
# PEFT LoRA (through SFTTrainer's peft_config) at ZeRO-3, 2 ranks; and at ZeRO-2, 1 rank (the frozen weights' role)
run lora-z3-2r-accelerate -- "${ACC[@]}" --main_process_port 29704 "$SFT" --inputs "$I" --stage 3 --lora \
    --out "$OUT/finetune-out/lora-z3-2r-accelerate"
run lora-z3-2r-torchrun -- "${TR[@]}" --master-port 29705 "$SFT" --inputs "$I" --stage 3 --lora \
    --out "$OUT/finetune-out/lora-z3-2r-torchrun"
run lora-z2-1r-torchrun -- torchrun --nproc-per-node 1 --master-port 29710 "$SFT" --inputs "$I" --stage 2 --lora \
    --out "$OUT/finetune-out/lora-z2-1r-torchrun"
# an accelerate custom loop loading with from_pretrained (DeepSpeedPlugin: ZeRO-2, optimizer offloaded), 2 ranks
run loop-z2-2r-accelerate -- "${ACC[@]}" --main_process_port 29706 "$LOOP" --inputs "$I"
run loop-z2-2r-torchrun -- "${TR[@]}" --master-port 29707 "$LOOP" --inputs "$I"
# the save phase of a Trainer job (a checkpoint during training, then the final save_model), ZeRO-2 and ZeRO-3,
# 2 ranks, glibc's mmap threshold fixed (64 KiB) so a freed clone's pages go back at once, as the tests run it
for stage in 2 3; do
  run "trainer-save-z$stage" --script "$ROOT/tests/data/scripts/train_trainer_save.py" --world-size 2 \
      --malloc-env MALLOC_MMAP_THRESHOLD_=65536 -- --out "$OUT/finetune-out/trainer-save-z$stage" --stage "$stage"
done
# the scenario's ZeRO-3 16-bit save (tiny, 2 ranks): what rank 0 keeps after it, and what the collector frees
run save-scenario-z3 tiny --steps 2 --world-size 2 --set zero.stage=3 --set 'save.at_end=["model_16bit"]' \
    --malloc-env MALLOC_MMAP_THRESHOLD_=65536
