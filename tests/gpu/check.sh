#!/usr/bin/env bash
# The GPU check, sized for ONE device call (make gpu-check). On a bare machine with a CUDA torch and no
# network: installs what is missing from wheels carried in .whl/ (see README, "GPU check"), then runs
# tests/gpu (known answers on the device) and tests/test_cudaprobe.py (the CPU-side parsing) under a
# timeout. Writes gpu-check.log and gpu-check.json (every measured figure) to $OUT, or reports/gpu-check;
# on a device also the evidence runs' reports (diff-tiny.md, diff-default.md, show-default-baseline.md,
# scale-default.md) and every run directory (runs.tar.gz): 7 files, within what a device call brings back.
# Exit status: pytest's (5 = nothing ran), 124 = timed out, 3 = a package missing and no wheel for it,
# 4 = no CUDA device (the CPU parts passed, tests/gpu skipped: nothing verified on a GPU).
# EVIDENCE=fixes (reports/issue7693-answer.md, issue 30): evidence_fixes below; EVIDENCE=pinned (reports/cuda-pinned.md, issue 22): GPU_CHECK_TESTS=tests/gpu/test_pinned_cuda.py and, after
# them, evidence_pinned below instead of the check's own evidence; DeepSpeed releases' wheels in .whl/releases/
# (not installed with the rest: one is put first on the path per release run).
set -uo pipefail
cd "$(dirname "$0")/../.."
PY=${PYTHON:-python3}
OUT=${OUT:-reports/gpu-check}
mkdir -p "$OUT"
LOG=$OUT/gpu-check.log
TMPRUNS=${TMPRUNS:-/tmp/rssprobe-gpu-check}
export RSSPROBE_GPU_JSON=$OUT/gpu-check.json PYTHONUNBUFFERED=1

main() {
    echo "== gpu-check $(date -u +%FT%TZ) on $(uname -n), $(nproc) CPUs"
    nvidia-smi -L 2>&1 || echo "nvidia-smi: not available"
    "$PY" -c "import sys, torch; print('python', sys.version.split()[0], '| torch', torch.__version__, \
'| CUDA', torch.version.cuda, '| device', torch.cuda.get_device_name(0) if torch.cuda.is_available() else None)" \
        || return 3
    # DeepSpeed and rssprobe's own pure-Python needs that the machine's image lacks
    missing=$("$PY" - <<'PY'
import importlib.util
need = ["deepspeed", "hjson", "pydantic", "psutil", "click", "rich", "pandas", "pyarrow", "packaging", "scipy",
        "matplotlib", "ninja", "einops", "msgpack", "cpuinfo", "tqdm", "pytest"]
print(" ".join(n for n in need if importlib.util.find_spec(n) is None))
PY
)
    if [ -n "$missing" ]; then
        echo "missing here: $missing"
        if ! ls .whl/*.whl >/dev/null 2>&1; then
            echo "no .whl/ folder with wheels: prepare it as README 'GPU check' says, and carry it"; return 3
        fi
        "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
            --target /tmp/rssprobe-site .whl/*.whl || return 3
        export PYTHONPATH=/tmp/rssprobe-site${PYTHONPATH:+:$PYTHONPATH}
        echo "installed from .whl/: $(cd .whl && ls *.whl | tr '\n' ' ')"
    fi
    export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}  # this checkout's rssprobe, for the workers too
    "$PY" -c "import deepspeed, rssprobe; print('deepspeed', deepspeed.__version__, '| rssprobe from', rssprobe.__file__)" \
        || return 3
    rm -rf "$TMPRUNS"
    timeout "${GPU_CHECK_TIMEOUT:-480}" "$PY" -m pytest -q -rs -p no:cacheprovider -s --basetemp "$TMPRUNS" \
        ${GPU_CHECK_TESTS:-tests/gpu tests/test_cudaprobe.py}
    local rc=$?
    if ! "$PY" -c "import torch, sys; sys.exit(not torch.cuda.is_available())"; then
        echo "no CUDA device: tests/gpu were skipped, the CUDA path is NOT verified by this run"
        [ "$rc" -ne 0 ] && return $rc
        return 4
    fi
    case "${EVIDENCE:-check}" in
        pinned) evidence_pinned ;;
        fixes) evidence_fixes ;;
        *) evidence ;;
    esac
    return $rc
}

# Issue 30 on a device (reports/issue7693-answer.md): each pinning mode's host-to-device bandwidth and held bytes
# (tests/gpu/h2d_bench.py), then the default scenario at two sizes (FIX_LAYERS, default 2 and 8 layers: 8.4 M and
# 33.6 M params, the H200 sweep's first two) under each fix of rssprobe/data/fixes.toml, size by size so that
# every fix has its first size before any has its second, while time is left (EVIDENCE_S, default 330 s); then
# fixes.json (python -m tools.evidence.issue7693_answer collect) for the answer page's "measured on CUDA" column.
# One call: EVIDENCE=fixes GPU_CHECK_TESTS=tests/gpu/test_fixes_cuda.py GPU_CHECK_TIMEOUT=60 bash tests/gpu/check.sh
evidence_fixes() {
    local deadline=$((SECONDS + ${EVIDENCE_S:-330})) runs=$TMPRUNS/runs0 rs=("$PY" -m rssprobe) left
    local answer=("$PY" -m tools.evidence.issue7693_answer)
    mkdir -p "$runs"
    ulimit -l unlimited 2>/dev/null || ulimit -l "$(ulimit -H -l)" 2>/dev/null  # the native backend mlocks
    echo "lock limit: $(ulimit -l) KiB; CapEff $(grep CapEff /proc/self/status | cut -f2)"
    timeout 90 "$PY" tests/gpu/h2d_bench.py --out "$OUT/h2d.json" >"$runs/h2d.log" 2>&1
    echo "h2d bench: exit $? ($SECONDS s into the check)"
    for layers in ${FIX_LAYERS:-2 8}; do
        for fix in baseline ds.native-pin torch.cached-size pin_memory=false pin.register ds.native-pin:register=off; do
            left=$((deadline - SECONDS)); [ "$left" -gt 30 ] || { echo "no time left for $fix at $layers layers"; break 2; }
            local name; name=$("${answer[@]}" options --slug "$fix")
            # shellcheck disable=SC2046  # the fix's options, word-split on purpose
            timeout "$left" "${rs[@]}" run default --steps 4 --set "model.layers=$layers" \
                $("${answer[@]}" options "$fix") --out "$runs/fix-$name-l$layers" >"$runs/fix-$name-l$layers.log" 2>&1
            echo "$fix, $layers layers: exit $? ($SECONDS s into the check); $(tail -1 "$runs/fix-$name-l$layers.log")"
        done
    done
    "${answer[@]}" collect "$runs" --h2d "$OUT/h2d.json" --out "$OUT/fixes.json" && echo "fixes.json written"
    tar czf "$OUT/runs.tar.gz" -C "$TMPRUNS" --exclude='checkpoints' runs0 && ls -la "$OUT"
}

# Issue 22 on a device, in priority order while time is left (EVIDENCE_S, default 340 s): the default scenario's
# size sweep baseline / pin.register / the torch knob (refused, in one line, by a torch without it); the step
# time of pin.register against the baseline, in alternated pairs; the pin table measured beside the prediction
# of the same runs; then DeepSpeed 0.18.2 ... 0.19.8 with DeepSpeed's own pin_memory default.
evidence_pinned() {
    local deadline=$((SECONDS + ${EVIDENCE_S:-340})) runs=$TMPRUNS/runs0 rs=("$PY" -m rssprobe) left
    local tables=("$PY" -m tools.evidence.cuda_pinned) sizes=${SCALE_PARAMS:-8e6,33e6,134e6}
    mkdir -p "$runs"
    for what in baseline register knob; do
        local extra=()
        [ "$what" = register ] && extra=(--patch pin.register)
        [ "$what" = knob ] && extra=(--torch-alloc-conf pinned_max_round_threshold_mb:1)
        left=$((deadline - SECONDS)); [ "$left" -gt 40 ] || { echo "no time left for the $what sweep"; break; }
        timeout "$left" "${rs[@]}" scale default --params "$sizes" --steps 4 "${extra[@]}" --out "$runs/scale-$what" \
            --format markdown >"$OUT/scale-$what.md" 2>"$runs/scale-$what.log"
        echo "scale $what: exit $? ($SECONDS s into the check); $(tail -1 "$runs/scale-$what.log")"
    done
    local pair=()
    for i in 1 2 3; do  # A B, B A, A B: a drift of the machine favours neither
        left=$((deadline - SECONDS)); [ "$left" -gt 40 ] || { echo "no time left for pair $i"; break; }
        local order="baseline register"; [ "$i" = 2 ] && order="register baseline"
        for what in $order; do
            local extra=(); [ "$what" = register ] && extra=(--patch pin.register)
            timeout "$((deadline - SECONDS))" "${rs[@]}" run default --steps 12 "${extra[@]}" \
                --out "$runs/pair$i-$what" >"$runs/pair$i-$what.log" 2>&1
        done
        pair+=("$runs/pair$i-baseline" "$runs/pair$i-register")
    done
    [ "${#pair[@]}" -gt 0 ] && "${tables[@]}" pairs "${pair[@]}" >"$OUT/step-time-register.md" 2>&1
    "${tables[@]}" runs $(find "$runs" -name manifest.json -printf '%h\n' | sort) >"$OUT/pinned-compare.md" 2>&1
    for v in 0.18.2 0.18.3 0.19.4 0.19.5 0.19.8; do
        left=$((deadline - SECONDS)); [ "$left" -gt 60 ] || { echo "no time left for DeepSpeed $v"; break; }
        local wheel; wheel=$(ls .whl/releases/deepspeed-"$v"-*.whl 2>/dev/null | head -1)
        [ -n "$wheel" ] || { echo "no wheel for DeepSpeed $v in .whl/releases/"; continue; }
        "$PY" -m pip install -q --no-index --no-deps --no-compile --target "/tmp/ds-$v" "$wheel" || continue
        PYTHONPATH=/tmp/ds-$v:$PYTHONPATH timeout "$left" "${rs[@]}" run default --steps 4 \
            --set zero.pin_memory=default --out "$runs/release-$v" >"$runs/release-$v.log" 2>&1
        echo "DeepSpeed $v: exit $? ($SECONDS s into the check)"
    done
    "${tables[@]}" runs $(ls -d "$runs"/release-* 2>/dev/null) >"$OUT/pinned-releases.md" 2>&1
    tar czf "$OUT/runs.tar.gz" -C "$TMPRUNS" --exclude='checkpoints' runs0 && ls -la "$OUT"
}

# The runs behind the check, as reports a reviewer reads: the tests' tiny runs shown and compared, and, while
# time is left (EVIDENCE_S, default 200 s), the default scenario baseline vs PR #8132 on this device and
# its size sweep.
evidence() {
    local deadline=$((SECONDS + ${EVIDENCE_S:-200})) runs=$TMPRUNS/runs0 rs=("$PY" -m rssprobe)
    [ -d "$runs/cuda-baseline" ] && [ -d "$runs/cuda-pr8132" ] || { echo "no CUDA runs to show"; return; }
    for label in baseline pr8132; do
        "${rs[@]}" show "$runs/cuda-$label" --format markdown >"$runs/show-cuda-$label.md" 2>&1
    done
    "${rs[@]}" diff "$runs/cuda-baseline" "$runs/cuda-pr8132" --format markdown >"$OUT/diff-tiny.md" 2>&1
    echo "tiny diff written (exit $?)"
    for label in baseline patched; do
        local left=$((deadline - SECONDS))
        [ "$left" -gt 30 ] || { echo "no time left for the default scenario ($label)"; break; }
        timeout "$left" "${rs[@]}" run default "--$label" --out "$runs/default-$label" >"$runs/default-$label.log" 2>&1
        echo "default $label: exit $? ($((SECONDS)) s into the check)"
    done
    if [ -f "$runs/default-patched/manifest.json" ]; then
        "${rs[@]}" show "$runs/default-baseline" --format markdown >"$OUT/show-default-baseline.md" 2>&1
        "${rs[@]}" diff "$runs/default-baseline" "$runs/default-patched" --format markdown >"$OUT/diff-default.md" 2>&1
        echo "default diff written (exit $?)"
    fi
    # fixed cost (CUDA context, libraries) apart from the per-parameter slope, on this device
    local left=$((deadline - SECONDS))
    if [ "$left" -gt 60 ]; then
        timeout "$left" "${rs[@]}" scale default --params "${SCALE_PARAMS:-8e6,33e6,134e6}" --steps 6 \
            --out "$runs/scale-default" --format markdown >"$OUT/scale-default.md" 2>"$runs/scale-default.log"
        echo "default scale: exit $? ($((SECONDS)) s into the check)"
    else
        echo "no time left for the scale"
    fi
    tar czf "$OUT/runs.tar.gz" -C "$TMPRUNS" --exclude='checkpoints' runs0 && ls -la "$OUT"
}

main 2>&1 | tee "$LOG"
rc=${PIPESTATUS[0]}
echo "== gpu-check exit $rc; log $LOG; figures $RSSPROBE_GPU_JSON" | tee -a "$LOG"
exit "$rc"
