#!/usr/bin/env bash
# reports/field/saves: does host RSS climb save after save? 2 CPU ranks, a 79 M Llama, 24 steps, HF Trainer at
# ZeRO-2 with the optimizer offloaded: with a checkpoint every 2 steps (12 saves, then the final save_model) and,
# as the control, none during training; the pair twice, alternating. Each rank's RSS log lands here
# (saves-REPEAT-RANK.json, control-REPEAT-RANK.json).
# OUT: where the Trainer writes (default a temp dir). Run from the repository root:
#   bash reports/field/saves/evidence.sh; python -m tools.evidence.field page > reports/field.md
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
out="${OUT:-$(mktemp -d)}"
for rep in 1 2; do
  for run in saves control; do
    every=2; [ "$run" = control ] && every=1000
    PYTHONWARNINGS=ignore .venv/bin/torchrun --nproc_per_node 2 "$here/climb.py" --out "$out/$run-$rep" \
      --steps 24 --every "$every"
    for r in 0 1; do cp "$out/$run-$rep/rss-$r.json" "$here/$run-$rep-$r.json"; done
    rm -rf "$out/$run-$rep"/checkpoint-*
  done
done
