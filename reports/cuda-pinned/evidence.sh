#!/bin/bash
# The CPU evidence of reports/cuda-pinned.md: DeepSpeed's pin requests recorded on this CPU machine, CUDA's
# pinned holding predicted from them. Every run is real (torch 2.13.0 CPU, the DeepSpeed of its cell).
#   OUT=/tmp/pinev bash reports/cuda-pinned/evidence.sh      (~40 min on 2 shared cores, envs already built)
set -u
OUT=${OUT:-reports/cuda-pinned/runs}
RSSPROBE=${RSSPROBE:-python -m rssprobe}
VERSIONS=${VERSIONS:-0.18.2,0.18.3,0.19.4,0.19.5,0.19.8}
COMMON=(--set zero.pin_memory=default --set probes.memmap=false --steps 2 --repeat 1)
# 1. the release sweep: DeepSpeed's own pin_memory default, default scenario, at 1, 2 and 8 ranks
for ws in 1 2 8; do
  $RSSPROBE matrix default --torch 2.13.0 --deepspeed "$VERSIONS" "${COMMON[@]}" --set world_size=$ws \
    --out "$OUT/release-ws$ws" --format markdown > "$OUT/release-ws$ws.md" 2> "$OUT/release-ws$ws.log"
done
# 2. the two fixes on the default scenario (DeepSpeed 0.19.8): what each predicts for CUDA, and that the
#    CPU run's gated figures do not move (a baseline beside them, the same steps)
for what in baseline "pin.register" "knob"; do
  case $what in
    baseline) extra=() ;;
    pin.register) extra=(--patch pin.register) ;;
    knob) extra=(--torch-alloc-conf pinned_max_round_threshold_mb:1) ;;
  esac
  $RSSPROBE run default --steps 2 --set probes.memmap=false "${extra[@]}" --out "$OUT/fix-$what" \
    > "$OUT/fix-$what.log" 2>&1
  $RSSPROBE show "$OUT/fix-$what" --format markdown > "$OUT/fix-$what.md"
done
# 3. ZeRO-3 with the parameters offloaded: a pin request per parameter partition, then the flat buffers
$RSSPROBE run default --steps 1 --set zero.stage=3 --set 'zero.offload_param="cpu"' --set probes.memmap=false \
  --out "$OUT/zero3-default" > "$OUT/zero3-default.log" 2>&1
# the report's tables, from the runs
python -m tools.evidence.cuda_pinned releases "$OUT"/release-ws1 "$OUT"/release-ws2 "$OUT"/release-ws8 \
  > reports/cuda-pinned/releases.md
python -m tools.evidence.cuda_pinned runs "$OUT"/fix-baseline "$OUT"/fix-pin.register "$OUT"/fix-knob \
  > reports/cuda-pinned/fixes.md
