#!/usr/bin/env bash
# A node's rank count, measured (issue 41, item 5): the default scenario (16.8 M params, ZeRO-2, optimizer
# offloaded, 6 steps) at 4 and 8 CPU ranks per node, estimated from a 1-rank and from a 2-rank calibration (the
# scenario's shape at 1, 2 and 3 layers, 12 steps, made by `rssprobe estimate` on first use), and measured 3 times
# in fresh processes; with glibc's mmap threshold fixed ("fixed") and as users have it ("own"; the 8-rank node also
# from a calibration made at 8 ranks, to tell the rank count from the rest). One run at a time;
# rerunning reuses what finished. Then `python -m tools.evidence.estimate ranks $OUT` prints the table.
#   OUT=/tmp/ranks nice -n 10 bash reports/estimate/ranks.sh
set -euo pipefail
OUT=${OUT:?set OUT}
RSSPROBE=${RSSPROBE:-python -m rssprobe}
export RSSPROBE_ESTIMATE=$OUT/calibrations
TARGET=(default --set steps=6)
mkdir -p "$OUT/estimates" "$OUT/runs"

knobs() {  # knobs fixed|own: the glibc knobs of that kind
  [[ $1 == fixed ]] && echo --malloc-env MALLOC_MMAP_THRESHOLD_=65536 || true
}

calibration() {  # calibration KIND CAL_RANKS: the scale directory of that calibration (made on first use)
  # shellcheck disable=SC2046
  $RSSPROBE estimate "${TARGET[@]}" --ranks-per-node 2 --accelerator cpu --calibration-ranks "$2" $(knobs "$1") \
    --format json | python -c 'import json, sys; print(json.load(sys.stdin)["calibration"]["path"])'
}

for kind in fixed own; do
  for cal in 1 2; do
    dir=$(calibration "$kind" "$cal")
    for ranks in 4 8; do
      est=$OUT/estimates/default-${ranks}r-$kind-cal$cal.json
      # shellcheck disable=SC2046
      [[ -s $est ]] || $RSSPROBE estimate "${TARGET[@]}" --ranks-per-node "$ranks" --accelerator cpu $(knobs "$kind") \
        --calibration "$dir" --format json > "$est"
    done
  done
  if [[ $kind == own ]]; then  # and the 8-rank node from a calibration at 8 ranks (what the note advises)
    dir=$(calibration own 8)
    est=$OUT/estimates/default-8r-own-cal8.json
    # shellcheck disable=SC2046
    [[ -s $est ]] || $RSSPROBE estimate "${TARGET[@]}" --ranks-per-node 8 --accelerator cpu --calibration "$dir" \
      --format json > "$est"
  fi
  for ranks in 4 8; do
    run=$OUT/runs/default-${ranks}r-$kind
    # shellcheck disable=SC2046
    [[ -d $run ]] || $RSSPROBE run "${TARGET[@]}" --world-size "$ranks" $(knobs "$kind") --repeat 3 --out "$run" \
      > /dev/null
  done
done
