#!/usr/bin/env bash
# The projections and field anchors of reports/estimate.md: host RAM per node on CUDA for runs nobody here can make,
# estimated from the packaged H200 calibration (rssprobe/data/calibrations/h200-default.json, the default for
# --gpus-per-node); torch's default pinned rounding and pin.register. No training: shapes are built on the meta
# device.
#   OUT=/tmp/estimate-projections bash reports/estimate/projections.sh
#   python -m tools.evidence.estimate projections $OUT; python -m tools.evidence.estimate field $OUT
set -euo pipefail
OUT=${OUT:?set OUT}
RSSPROBE=${RSSPROBE:-python -m rssprobe}
FIELD=reports/estimate/field
mkdir -p "$OUT/projections" "$OUT/field"
project() {  # project NAME ARGS...
  local name=$1; shift
  for fix in default register; do
    local extra=(); [[ $fix == register ]] && extra=(--patch pin.register)
    [[ -s $OUT/projections/$name--$fix.json ]] ||
      $RSSPROBE estimate "$@" "${extra[@]}" --format json > "$OUT/projections/$name--$fix.json"
  done
}
project issue7693-z2-g1 issue7693 --gpus-per-node 1
project issue7693-z2-g8 issue7693 --gpus-per-node 8
project llama-2-7b-z2-g8 --model llama-2-7b --gpus-per-node 8
project llama-2-7b-z3-g8 --model llama-2-7b --gpus-per-node 8 --stage 3
project llama-2-70b-z2-g8 --model llama-2-70b --gpus-per-node 8
project llama-2-70b-z3-g8 --model llama-2-70b --gpus-per-node 8 --stage 3
project llama-3-70b-z3-g8x4 --model llama-3-70b --gpus-per-node 8 --nodes 4 --stage 3
# field anchors: configurations users published with the host RAM they had (reports/estimate.md says where)
field() {  # field NAME ARGS...
  local name=$1; shift
  [[ -s $OUT/field/$name.json ]] || $RSSPROBE estimate "$@" --format json > "$OUT/field/$name.json"
}
field ds3448-llama-33b-z3-g8 --hf-config $FIELD/llama-33b/config.json --gpus-per-node 8 --stage 3 --node-ram 600G
field lf6755-qwen2.5-32b-z3-g1 --hf-config $FIELD/qwen2.5-32b/config.json --gpus-per-node 1 --stage 3 --node-ram 744G
field zero-infinity-70b-z3-g16 --model llama-2-70b --gpus-per-node 16 --stage 3 --node-ram 1.5T
