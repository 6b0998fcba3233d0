#!/bin/bash
# Example: a plan of many versions as a Slurm job array, one shard per array task, then a merge.
#
#   sbatch docs/slurm-sharded-plan.sh          # N tasks, one shard each; then the merge at the end
#
# Each task runs its share of the plan's cells (`--shard K/N`, K = the task's index + 1): the assignment
# depends on the plan alone, so the N tasks together run every cell exactly once, whichever node gets
# which task. Every task writes into its own directory on the shared file system; a resubmitted task
# resumes its shard (finished cells are reused). Memory figures are per node: give each task a whole node
# (--exclusive), or at least one that no other job's memory traffic shares.
#SBATCH --job-name=rssprobe-plan
#SBATCH --array=0-3                 # N = 4 tasks: keep N below in step
#SBATCH --nodes=1
#SBATCH --exclusive
#SBATCH --time=08:00:00
#SBATCH --output=reports/slurm-%A_%a.log

set -euo pipefail
N=4
K=$((SLURM_ARRAY_TASK_ID + 1))
PLAN=${PLAN:-reports/issue7693/plan.toml}
OUT=${OUT:-reports/matrix/issue7693-shards}

export RSSPROBE_CACHE=${RSSPROBE_CACHE:-/tmp/rssprobe-cache-$USER}   # environments and compiled ops, node-local
.venv/bin/rssprobe matrix --plan "$PLAN" --shard "$K/$N" --out "$OUT/shard-$K"

# After every task has ended (sbatch --dependency=afterany:$SLURM_ARRAY_JOB_ID), on any node:
#   .venv/bin/rssprobe merge "$OUT"/shard-* --out reports/matrix/issue7693
#   .venv/bin/rssprobe verdict "$PLAN" --runs reports/matrix/issue7693 \
#       --out reports/issue7693-verdict.md
