#!/usr/bin/env bash
# The evidence of reports/estimate.md: for each row, `rssprobe estimate` (its calibration run on first use, into
# $OUT/calibrations) and the measured runs of the same target, one at a time. Rerunning reuses what finished.
#   OUT=/tmp/estimate-evidence bash reports/estimate/evidence.sh
set -euo pipefail
OUT=${OUT:?set OUT}
RSSPROBE=${RSSPROBE:-python -m rssprobe}
export RSSPROBE_ESTIMATE=$OUT/calibrations
FIXED=(--malloc-env MALLOC_MMAP_THRESHOLD_=65536)
mkdir -p "$OUT/estimates" "$OUT/runs"

row() {  # row NAME REPEAT_MEASURED ESTIMATE_ARGS... -- RUN_ARGS...
  local name=$1 repeat=$2; shift 2
  local est=() run=()
  while [[ $1 != -- ]]; do est+=("$1"); shift; done; shift
  run=("$@")
  [[ -s $OUT/estimates/$name.json ]] || $RSSPROBE estimate "${est[@]}" --format json > "$OUT/estimates/$name.json"
  [[ -d $OUT/runs/$name ]] || $RSSPROBE run "${run[@]}" --repeat "$repeat" --out "$OUT/runs/$name" > /dev/null
}

row default-2r-fixed 2 default --ranks-per-node 2 "${FIXED[@]}" -- default --world-size 2 "${FIXED[@]}"
row llama-fixed 2 llama-small --ranks-per-node 1 "${FIXED[@]}" -- llama-small "${FIXED[@]}"
row issue7693-cpu-fixed 2 issue7693-cpu --ranks-per-node 1 "${FIXED[@]}" -- issue7693-cpu "${FIXED[@]}"
row default-2r 3 default --ranks-per-node 2 --repeat 2 -- default --world-size 2
row llama 3 llama-small --ranks-per-node 1 --repeat 2 -- llama-small
row llama-6l 2 llama-small --params 3.36e7 --ranks-per-node 1 --repeat 2 -- llama-small --set model.params=3.36e7
row llama-zero3-2r 2 llama-small-zero3 --ranks-per-node 2 --repeat 2 -- llama-small-zero3 --world-size 2
row issue7693-cpu 3 issue7693-cpu --ranks-per-node 1 --repeat 2 -- issue7693-cpu
row llama-zero3-2r-fixed 2 llama-small-zero3 --ranks-per-node 2 "${FIXED[@]}" -- llama-small-zero3 --world-size 2 "${FIXED[@]}"
# the same 2-rank ZeRO-3 runs, estimated from a calibration made at 2 ranks (ZeRO-3's gathers are a 2-rank cost)
[[ -e $OUT/runs/llama-zero3-2r-cal2 ]] || ln -s llama-zero3-2r "$OUT/runs/llama-zero3-2r-cal2"
row llama-zero3-2r-cal2 2 llama-small-zero3 --ranks-per-node 2 --repeat 2 --calibration-ranks 2 -- unused
# the same measured runs, estimated from calibrations with the target's step count (--calibration-steps: a
# steady mean over as many steps as the run it estimates); ZeRO-3 also at 2 ranks
for pair in default-2r:default-2r llama:llama llama-zero3-2r:llama-zero3-2r llama-zero3-2r-cal2:llama-zero3-2r \
            issue7693-cpu:issue7693-cpu; do
  [[ -e $OUT/runs/${pair%%:*}-steps ]] || ln -s "${pair##*:}" "$OUT/runs/${pair%%:*}-steps"
done
row default-2r-steps 3 default --ranks-per-node 2 --repeat 2 --calibration-steps 12 -- unused
row llama-steps 3 llama-small --ranks-per-node 1 --repeat 2 --calibration-steps 12 -- unused
row llama-zero3-2r-steps 2 llama-small-zero3 --ranks-per-node 2 --repeat 2 --calibration-steps 12 -- unused
row llama-zero3-2r-cal2-steps 2 llama-small-zero3 --ranks-per-node 2 --repeat 2 --calibration-ranks 2 \
    --calibration-steps 12 -- unused
row issue7693-cpu-steps 3 issue7693-cpu --ranks-per-node 1 --repeat 2 --calibration-steps 10 -- unused
