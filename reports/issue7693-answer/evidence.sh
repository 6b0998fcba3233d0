#!/bin/bash
# The CPU runs behind reports/issue7693-answer.md: the default scenario's size sweep (8.4, 16.8 and 33.6 M params:
# 2, 4 and 8 layers of 2048 x 2048; 4 steps; one run a size) under each fix of rssprobe/data/fixes.toml, each a
# `rssprobe scale` (resumable: rerun it and finished sizes are reused; shardable: --shard K/N); PR #8132 3 vs 3;
# then the page.
#   OUT=/tmp/answer-runs nice -n 10 bash reports/issue7693-answer/evidence.sh
# Every run is real (torch 2.13.0 CPU build, DeepSpeed 0.19.8, this machine's CPU accelerator). The native backend
# mlocks for real here: its runs need `ulimit -l` above each rank's pinned bytes (or CAP_IPC_LOCK).
set -u
cd "$(dirname "$0")/../.."
OUT=${OUT:-reports/issue7693-answer/runs}
PY=${PY:-$( [ -x .venv/bin/python ] && echo .venv/bin/python || echo python )}
RSSPROBE=${RSSPROBE:-$PY -m rssprobe}
PARAMS=${PARAMS:-8392704,16785408,33570816}
# glibc's dynamic mmap threshold makes identical runs retain +-4 B/param of RSS (README, "Noise"): fixed here, so
# that the fixes' RSS slopes differ only by what the fix does (identical runs then agree within 0.02 B/param)
STEADY=(--malloc-env MALLOC_MMAP_THRESHOLD_=65536)
mkdir -p "$OUT"
for fix in baseline ds.native-pin ds.native-pin:register=off torch.cached-size pin.register pin_memory=false; do
  name=$($PY -m tools.evidence.issue7693_answer options --slug "$fix")
  # shellcheck disable=SC2046  # the fix's options, word-split on purpose
  $RSSPROBE scale default --params "$PARAMS" --steps 4 --set probes.memmap=false "${STEADY[@]}" \
    $($PY -m tools.evidence.issue7693_answer options "$fix") --out "$OUT/fix-$name" --format markdown \
    > "$OUT/fix-$name.md" 2> "$OUT/fix-$name.log"
  echo "$fix: exit $? ($(tail -1 "$OUT/fix-$name.log"))"
done
# PR #8132 on this CPU: 3 vs 3 default runs (12 steps, a final malloc_trim probe), as `make demo` makes them: with
# glibc as users have it (its dynamic threshold), where the trim has something to return
for side in baseline patched; do
  [ -f "$OUT/pr8132-$side/group.json" ] || $RSSPROBE run default --"$side" --repeat 3 --trim-at-end \
    --set probes.memmap=false --out "$OUT/pr8132-$side" > "$OUT/pr8132-$side.log" 2>&1
  echo "PR #8132 $side: exit $?"
done
# the committed evidence: the scale directories (run files only), then the page from them
tar czf reports/issue7693-answer/runs.tar.gz -C "$OUT" --exclude='*.log' --exclude='*.md' --exclude='checkpoints' .
$PY -m tools.evidence.issue7693_answer page
