#!/usr/bin/env bash
# The projections of reports/estimate.md: host RAM per node on CUDA for runs nobody here can make, calibrated on the
# H200 size sweep (reports/gpu-check-h200/runs.tar.gz, runs0/scale-default); torch's default pinned rounding and
# pin.register. No training: shapes are built on the meta device.
#   OUT=/tmp/estimate-projections bash reports/estimate/projections.sh
set -euo pipefail
OUT=${OUT:?set OUT}
RSSPROBE=${RSSPROBE:-python -m rssprobe}
mkdir -p "$OUT/h200" "$OUT/projections"
[[ -d $OUT/h200/runs0 ]] || tar xzf reports/gpu-check-h200/runs.tar.gz -C "$OUT/h200"
H200=$OUT/h200/runs0/scale-default
Z3=(--set zero.stage=3 --set 'zero.offload_param="cpu"')
project() {  # project NAME ARGS...
  local name=$1; shift
  for fix in default register; do
    local extra=(); [[ $fix == register ]] && extra=(--patch pin.register)
    $RSSPROBE estimate "$@" "${extra[@]}" --accelerator cuda --calibration "$H200" --format json \
      > "$OUT/projections/$name--$fix.json"
  done
}
project issue7693-z2-r1 issue7693 --ranks-per-node 1
project issue7693-z2-r8 issue7693 --ranks-per-node 8
project llama7b-z2-r8 reports/estimate/llama-7b.toml --ranks-per-node 8
project llama7b-z3-r8 reports/estimate/llama-7b.toml "${Z3[@]}" --ranks-per-node 8
project llama70b-z2-r8 reports/estimate/llama-70b.toml --ranks-per-node 8
project llama70b-z3-r8 reports/estimate/llama-70b.toml "${Z3[@]}" --ranks-per-node 8
