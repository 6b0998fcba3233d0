"""The page of reports/issue7693-answer.md (__main__.py: `page` calls write_page): every figure read from a run.

Sources (__main__.py's docstring says which runs): the H200 runs (CUDA, measured), the release sweep (CPU runs,
CUDA predicted), this report's runs (CPU: the fixes' size sweeps and PR #8132 3 vs 3), and a device call's
fixes.json / h2d.json when there is one (the "measured on CUDA" column).
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from rssprobe.analysis import fit, fixes
from rssprobe.analysis.summary import Summary
from rssprobe.store import campaign
from rssprobe.store.rundir import RunDir

from .runsets import ROOT, collect, extract, run_dirs

H200_RUNS = ROOT / "reports" / "gpu-check-h200" / "runs.tar.gz"
H200_JSON = ROOT / "reports" / "gpu-check-h200" / "gpu-check.json"
PINNED_RUNS = ROOT / "reports" / "cuda-pinned" / "runs.tar.gz"
ANSWER_RUNS = ROOT / "reports" / "issue7693-answer" / "runs.tar.gz"
ROLES = (("fp32_master", "fp32 master partition"), ("fp32_grad", "fp32 gradient partition"),
         ("adam_exp_avg", "Adam exp\\_avg"), ("adam_exp_avg_sq", "Adam exp\\_avg\\_sq"),
         ("h2d_staging", "bf16 host-to-device staging buffer"))
PINNED_ROLES = ("fp32_master", "fp32_grad", "h2d_staging")  # pinned with pin_memory true (census, H200)


def _f(v: float | None, digits: int = 2, signed: bool = False) -> str:
    if v is None:
        return "n/a"
    return f"{v:+.{digits}f}" if signed else f"{v:.{digits}f}"


def _pm(fitted: Any, digits: int = 2) -> str:
    return _f(fitted.slope_bytes_per_param, digits) + (
        f" ± {fitted.slope_interval:.{digits}f}" if fitted.slope_interval is not None else "")


def _fits(run_paths: list[Path]) -> dict[str, Any]:
    points = []
    for p in run_paths:
        s = Summary(RunDir(p))
        if s.status == "ok" and s.params:
            points.append((s.params, s.metrics()))
    return {f.figure: f for f in fit.fit_all(points)}


def _diff(a: Path, b: Path) -> dict[str, Any]:
    out = subprocess.run([sys.executable, "-m", "rssprobe", "diff", str(a), str(b), "--format", "json"],
                         capture_output=True, text=True, check=False)
    if out.returncode not in (0, 125):
        raise SystemExit(f"rssprobe diff {a} {b}: {out.stderr.strip()}")
    return json.loads(out.stdout)


def _row(table: dict[str, Any], metric: str) -> dict[str, Any] | None:
    return next((r for rows in table["comparisons"].values() for r in rows if r["metric"] == metric), None)


def releases(root: Path) -> list[dict[str, Any]]:
    """DeepSpeed's releases with their own pin_memory default, one rank (the release sweep's matrix)."""
    d = next(root.rglob("release-ws1"))
    index = campaign.read_index(d, "matrix")
    rows = []
    for cell in campaign.entries(index):
        group = d / campaign.entry_dir(index, cell)
        run = next(p for p in sorted(group.iterdir()) if p.name.startswith("run-"))
        s = Summary(RunDir(run))
        view = s.pinned() or {}
        tot = view.get("totals") or {}
        rows.append({"deepspeed": cell["deepspeed"], "pin": ((view.get("pin_memory") or {}).get("effective") or {})
                     .get("offload_optimizer"), "requested": tot.get("requested_live_bytes_per_param") or 0.0,
                     "held": tot.get("held_predicted_bytes_per_param") or 0.0, "run": run})
    return sorted(rows, key=lambda r: tuple(int(x) for x in r["deepspeed"].split(".")))


def write_page(args: Any, tmp: Path) -> None:
    h200 = extract(H200_RUNS, tmp / "h200") / "runs0"
    pinned = extract(PINNED_RUNS, tmp / "pinned")
    runs = args.runs or extract(ANSWER_RUNS, tmp / "answer")
    text = page(h200, pinned, runs, args.device)
    args.out.write_text(text)
    print(f"wrote {args.out} ({len(text.splitlines())} lines)")


def page(h200: Path, pinned: Path, runs: Path, device: Path | None) -> str:
    gpu = json.loads(H200_JSON.read_text())["environment"]
    where_gpu = f"{gpu['device']}, torch {gpu['torch']}"
    sweep = _fits(run_dirs([h200 / "scale-default"]))
    sweep_runs = [Summary(RunDir(p)) for p in run_dirs([h200 / "scale-default"])]
    sizes = sorted({s.params for s in sweep_runs})
    ds = (sweep_runs[0].manifest.versions or {}).get("deepspeed")
    total, live, slack = sweep["budget.rss_above_baseline"], sweep["budget.live"], sweep["part.shared_memory"]
    glibc = sweep["part.glibc_in_use_not_tensors"]
    fix_runs = [p for p in run_dirs([runs]) if "pr8132" not in str(p)]
    got = collect([Path(p) for p in fix_runs]) if fix_runs else collect([runs])
    cpu_host = got["environment"].get("host") or {}
    where_cpu = f"{cpu_host.get('cpu_count')}-core {cpu_host.get('cpu_model')}, " \
                f"{round((cpu_host.get('mem_total_bytes') or 0) / 2**30)} GiB, no GPU"
    predicted = got["cuda_predicted_host_bytes"]
    ref = fixes.reference().name
    saving = {name: (predicted[ref]["slope"] - p["slope"]) if p and predicted.get(ref) else None
              for name, p in predicted.items()}
    native = fixes.by_name("ds.native-pin")
    after = total.slope_bytes_per_param - (saving.get(native.name) or 0)
    rel = releases(pinned)
    first_default = next((r for r in rel if r["pin"] and r["requested"] > 0), None)
    dev = _device(device)

    out: list[str] = []
    w = out.append
    w("# DeepSpeed #7693: where the 28 B/param of host RAM go, and what to set today")
    w("")
    w(f"**On CUDA, ZeRO-2 with the optimizer offloaded holds {_pm(total)} bytes of host RAM per parameter** "
      f"(measured: {where_gpu}, DeepSpeed {ds}, the default scenario at {len(sizes)} sizes from "
      f"{sizes[0] / 1e6:.1f} M to {sizes[-1] / 1e6:.0f} M parameters). **{_f(live.slope_bytes_per_param)} of it are "
      f"DeepSpeed's buffers as designed; {_f(slack.slope_bytes_per_param)} are torch's pinned-memory rounding**, "
      f"which DeepSpeed {first_default['deepspeed'] if first_default else 'n/a'} (PR #8207: "
      "`offload_optimizer.pin_memory` defaults to true) turned on by default. **Today: set "
      f"`DS_PIN_MEMORY_BACKEND=native`** (DeepSpeed {native.needs[1] if native.needs else ''} or later, with "
      f"`ulimit -l` above each rank's pinned bytes): predicted {_f(after)} B/param, at full copy bandwidth "
      f"({native.bandwidth()} host-to-device on an H200 per DeepSpeed PR #8283). PR #8132 changes no gated figure.")
    w("")
    w("Every figure below is read from a run (the commands are at the end) and says where it comes from: "
      f"**measured (H200)** on CUDA, **measured (CPU)** on a {where_cpu} machine with DeepSpeed's CPU "
      "accelerator, or **predicted** for CUDA from the pin requests recorded on the CPU and torch's caching host "
      "allocator rule (`rssprobe/analysis/pinrule.py`: for the default scenario it predicts from a CPU run's requests "
      f"{_agreement(h200, pinned)} of what the H200's allocator held).")
    w("")
    # -- decomposition
    w("## Where the 28 B/param go")
    w("")
    w(f"Slopes of a size sweep, bytes per parameter, measured (H200): the fixed cost apart (intercept "
      f"{total.fixed_bytes / 2**20:,.0f} MiB, once per process: CUDA's runtime and libraries).")
    w("")
    w("| part | B/param | pinned on CUDA | DeepSpeed attribute |")
    w("|---|---:|---|---|")
    attrs = {"fp32_master": "`single_partition_of_fp32_groups`", "fp32_grad": "its `.grad`",
             "adam_exp_avg": "`optimizer.state`", "adam_exp_avg_sq": "`optimizer.state`",
             "h2d_staging": "`param_buffer_of_bit16_for_cpu_offload_groups`"}
    for role, label in ROLES:
        f = sweep.get(f"role.{role}")
        w(f"| {label} | {_f(f.slope_bytes_per_param if f else None)} | "
          f"{'yes' if role in PINNED_ROLES else 'no'} | {attrs[role]} |")
    pinned_slope = sum(sweep[f"role.{r}"].slope_bytes_per_param for r in PINNED_ROLES if f"role.{r}" in sweep)
    w(f"| = DeepSpeed's host buffers | {_f(live.slope_bytes_per_param)} | {_f(pinned_slope)} of them | census of "
      "live tensors |")
    w(f"| **pinned-memory rounding slack** | **{_f(slack.slope_bytes_per_param)}** | the slack itself | torch's "
      "caching host allocator: each pinned buffer rounded up to a power of two (pytorch #95823) |")
    w(f"| glibc in use, not tensors | {_pm(glibc)} | no | allocator retention |")
    w(f"| **total (RSS above the pre-model baseline)** | **{_pm(total)}** | | |")
    w("")
    w("The default model's partitions sit just above a power of two, the worst case: its three pinned buffers "
      f"({_f(pinned_slope)} B/param) are held in blocks of twice their size. For sizes drawn at random the slack is "
      f"~{1 / math.log(2) - 1:.0%} of the "
      "pinned bytes on average; `rssprobe show` predicts it for any run, and `rssprobe estimate` for any model.")
    w("")
    # -- since when
    w("## Since which release, and why")
    w("")
    w("DeepSpeed's own `pin_memory` default at each release, one rank, the default scenario: pinned bytes "
      "requested (recorded on the CPU) and held on CUDA (predicted), B/param.")
    w("")
    w("| DeepSpeed | pin\\_memory by default | requested | held on CUDA (predicted) | slack (predicted) |")
    w("|---|---|---:|---:|---:|")
    for r in rel:
        w(f"| {r['deepspeed']} | {str(r['pin']).lower()} | {_f(r['requested'])} | {_f(r['held'])} | "
          f"{_f(r['held'] - r['requested'])} |")
    w("")
    w("0.18.2 pinned the fp32 master even with `pin_memory` false; PR #7689 (0.18.3) stopped that; **PR #8207 (0.19.5) "
      "made `offload_optimizer.pin_memory` and `offload_param.pin_memory` default to true**, so the rounding arrives "
      "with the default configuration.")
    w("")
    # -- PR 8132
    w("## What PR #8132 changes")
    w("")
    w(_pr8132(h200, runs))
    w("")
    # -- fixes
    w("## The fixes, what they save, what they cost")
    w("")
    w("Host RAM on CUDA with each fix, per parameter (with the saving) and once per process: the H200's measured "
      "slope and intercept less what the fix saves, predicted from the pin requests of the CPU sweep's baseline "
      "runs. Copy bandwidth is as DeepSpeed PR #8283's authors measured it on an H200; the last column is the "
      "device check's own measurement (RSS slope; fastest H2D copy) once one has run.")
    w("")
    w("| fix | how to set it | host RAM on CUDA (predicted): B/param, saving, fixed | H2D copies (PR #8283, H200) "
      "| measured on CUDA |")
    w("|---|---|---|---|---|")
    for fix in fixes.catalogue():
        s = saving.get(fix.name)
        host = total.slope_bytes_per_param - (s or 0)
        p, r = predicted.get(fix.name), predicted.get(ref)
        fixed = total.fixed_bytes / 2**20 - ((r["fixed_mib"] - p["fixed_mib"]) if p and r else 0)
        label = f"**{_md(fix.label)}**" if fix.recommended else _md(fix.label)
        saved = "" if fix.reference else f" ({_f(-s, signed=True) if s is not None else 'n/a'})"
        w(f"| {label} | {_md(fix.user)} | {_f(host)}{saved}, {fixed:,.0f} MiB | {fix.bandwidth()} "
          f"| {_device_cell(dev, fix.name)} |")
    w("")
    for fix in fixes.catalogue()[1:]:
        w(f"* {_md(fix.label)}: {_md(fix.cost)}. Since {fix.since}." + (f" **Hazard:** {_md(fix.hazard)}."
                                                                         if fix.hazard else ""))
    w("")
    w(_measured_cpu(got))
    w("")
    # -- recommendation
    w("## What to set today")
    w("")
    w(f"1. DeepSpeed {native.needs[1] if native.needs else ''} or later: **`DS_PIN_MEMORY_BACKEND=native`** in "
      "every rank's environment (leave `DS_PIN_MEMORY_REGISTER_DEVICE` at its default, on), and `ulimit -l` of at "
      "least each rank's pinned bytes (fp32 master + fp32 grad + bf16 staging partitions; `rssprobe run ... --patch "
      "ds.native-pin` refuses a smaller limit before training and names the value), or `ulimit -l unlimited`.")
    cached = fixes.by_name("torch.cached-size")
    w(f"2. Where the lock limit cannot be raised, with torch {cached.needs[1] if cached.needs else ''} or later: "
      f"`PYTORCH_CUDA_ALLOC_CONF={cached.alloc_conf}` (the cached-size knob alone; never "
      "`pinned_max_round_threshold_mb` below `pinned_max_cached_size_mb` on a torch without pytorch PR #192722).")
    w("3. Otherwise `\"pin_memory\": false` in `offload_optimizer` saves the same host RAM at pageable-copy "
      f"bandwidth ({fixes.by_name('pin_memory=false').bandwidth()}).")
    w("")
    w("## Evidence")
    w("")
    w("* [reports/issue7693-verdict.md](issue7693-verdict.md): #7693's claims one by one over allocators, ranks, "
      "DeepSpeed and torch releases, with PR #8132 (CPU).")
    w("* [reports/gpu-check.md](gpu-check.md) and `reports/gpu-check-h200/runs.tar.gz`: the H200 runs (the "
      "decomposition and PR #8132 on CUDA).")
    w("* [reports/cuda-pinned.md](cuda-pinned.md) and `reports/cuda-pinned/runs.tar.gz`: the release sweep.")
    w("* `reports/issue7693-answer/runs.tar.gz`: the fixes' CPU size sweeps and PR #8132 on the CPU "
      "(`reports/issue7693-answer/evidence.sh` made them).")
    w("* The device check, prepared: `EVIDENCE=fixes GPU_CHECK_TESTS=tests/gpu/test_fixes_cuda.py "
      "GPU_CHECK_TIMEOUT=60 EVIDENCE_S=330 bash tests/gpu/check.sh` with `.whl` carried; its `fixes.json` and "
      "`h2d.json` go in `reports/issue7693-answer/device/` and fill the last column.")
    w("")
    w(f"Regenerate: `python -m tools.evidence.issue7693_answer page` (generated "
      f"{datetime.now(UTC).strftime('%Y-%m-%d')}).")
    return "\n".join(out) + "\n"


def _md(text: str) -> str:
    """Text of fixes.toml in a table cell: pipes and underscores outside code spans made safe."""
    parts = text.replace("|", "\\|").split("`")
    return "`".join(p if i % 2 else p.replace("_", "\\_").replace("*", "\\*") for i, p in enumerate(parts))


def _pr8132(h200: Path, runs: Path) -> str:
    d = _diff(h200 / "default-baseline", h200 / "default-patched")
    patched = Summary(RunDir(h200 / "default-patched"))
    took = {i["name"]: i["count"] for i in patched.interventions()}
    steady = _row(d, "steady.rss")
    lines = [f"* **On CUDA (measured, H200)**: `rssprobe diff` says **{d['verdict']}** (no gated figure moves; "
             f"steady RSS {_f(steady['delta'], signed=True) if steady else 'n/a'} B/param, one run a side). "
             f"Float-scale fired {took.get('pr8132.float-scale', 0)} times (every step; the scale is a CPU tensor on "
             f"the offload path, so no device sync), malloc-trim {took.get('pr8132.malloc-trim', 0)} time (ZeRO-2 "
             "hands the optimizer one group at a time)."]
    base, patch = (next(runs.rglob(f"pr8132-{k}"), None) for k in ("baseline", "patched"))
    if base is not None and patch is not None:
        c = _diff(base, patch)
        free, trim = _row(c, "budget.glibc_free_retained"), _row(c, "budget.rss_after_trim_above_baseline")
        n = free["n_a"] if free else 0
        lines.append(f"* **On the CPU (measured, {n} vs {n} runs, glibc's defaults)**: **{c['verdict']}**; what it "
                     "does change is "
                     "informative only: glibc's free-but-retained memory at the end "
                     f"{_f(free['delta'], signed=True) if free else 'n/a'} B/param "
                     f"({_word(free)}), "
                     f"RSS after a final trim {_f(trim['delta'], signed=True) if trim else 'n/a'} "
                     f"({_word(trim)}). The verdict report has it per allocator: the trim lowers "
                     "retained memory where glibc keeps some (`MALLOC_ARENA_MAX=2`), nothing elsewhere.")
    return "\n".join(lines)


def _word(row: dict[str, Any] | None) -> str:
    """A comparison's verdict in words ("~": past the threshold, not significant over the repeats)."""
    if row is None:
        return "n/a"
    return {"~": "past the threshold, not significant", "same": "below the threshold"}.get(row["verdict"],
                                                                                              row["verdict"])


def _agreement(h200: Path, pinned: Path) -> str:
    """How close the rule's prediction from the CPU run's requests (cuda-pinned fix-baseline) comes to what the
    H200's caching host allocator held for the same scenario (its last step's held bytes)."""
    events = [json.loads(x) for x in (h200 / "default-baseline" / "events.jsonl").read_text().splitlines()]
    held = [e for e in events if e["event"] == "step"][-1]["cuda"]["pinned_host"]["held"]
    cpu = Summary(RunDir(next(pinned.rglob("fix-baseline"))))
    predicted = ((cpu.pinned() or {}).get("totals") or {}).get("allocator_held_predicted")
    if predicted is None:
        return "n/a"
    return f"{predicted:,} B, within {abs(held - predicted):,} B"


def _measured_cpu(got: dict[str, Any]) -> str:
    runs = [r for e in got["fixes"].values() for r in e["runs"]]
    envs = {json.dumps(r["malloc_env"], sort_keys=True) for r in runs}
    knob = ", ".join(f"`{k}={v}`" for k, v in json.loads(envs.pop()).items()) if len(envs) == 1 else ""
    sizes = sorted({r["params"] for r in runs if r["params"]})
    rows = ["What the CPU measures of each fix: measured (CPU), slopes over "
            f"{', '.join(f'{p / 1e6:.1f}' for p in sizes)} M params (one run a size, "
            f"{max((r['steps'] for r in runs), default=0)} steps"
            + (f", {knob}: glibc's threshold fixed, so identical runs agree within 0.02 B/param" if knob else "")
            + "), B/param. On the CPU accelerator torch's pinning is a no-op, so only the native backend locks "
            "anything, and the CPU accelerator keeps the bf16 model (2 B/param) on the host.", "",
            "| fix | RSS slope | peak in initialize, slope | fixed, MiB | page-locked (VmLck) slope | took effect |",
            "|---|---:|---:|---:|---:|---|"]
    for fix in fixes.catalogue():
        entry = got["fixes"].get(fix.name) or {}
        fits = entry.get("fits") or {}
        rss, locked, peak = fits.get("rss"), fits.get("locked"), fits.get("peak")
        took = entry.get("took_effect") or {}
        said = ", ".join(f"{k} {v}" for k, v in took.items()) or "-"
        if not entry.get("runs"):
            said = "not run"
        rows.append(f"| {_md(fix.label)} | {_f(rss['slope']) if rss else 'n/a'} | "
                    f"{_f(peak['slope']) if peak else 'n/a'} | "
                    f"{_f(rss['fixed_mib'], 0) if rss else 'n/a'} | {_f(locked['slope']) if locked else '0.00'} | "
                    f"{_md(said)} |")
    rows += ["", "A count of 0 means the intervention never took effect in that sweep (pin.register has nothing "
             "to register on the CPU accelerator: the CPU proves nothing about it). The native backend's higher peak "
             "in `deepspeed.initialize` (below the training step's here) is its pinned copy made beside each "
             "pageable source, where torch's pinning on the CPU accelerator returns the source itself; on CUDA "
             "torch's pinning copies the same way, so there it is not a cost of the fix (predicted; the device "
             "check measures it)."]
    native = [r for name in ("ds.native-pin", "ds.native-pin:register=off")
              for r in (got["fixes"].get(name) or {}).get("runs", []) if r["status"] == "ok"]
    off = [r["locked_minus_native_pages"] for r in native if r["locked_minus_native_pages"] is not None]
    if off:
        how = "exactly" if not any(off) else f"within {max(map(abs, off)):,} B"
        steady = all(r["locked_points"] and None not in r["locked_points"]
                     and max(r["locked_points"]) - min(r["locked_points"]) < 1 for r in native)
        when = "the same at init, at every step and at the end" if steady else "at the end census"
        rows += ["", f"**The native backend, measured (CPU):** in all {len(native)} runs VmLck above the baseline "
                 f"equals the native requests' own pages {how} "
                 f"({sum(r['native_requests'] or 0 for r in native)} requests; each page-aligned, so nothing is "
                 f"rounded), {when}: what CUDA's rounding would add is absent."]
    return "\n".join(rows)


def _device(device: Path | None) -> dict[str, Any] | None:
    """A device call's fixes.json, if it is a CUDA one (a CPU run's figures never fill the CUDA column)."""
    path = (device or Path("/nonexistent")) / "fixes.json"
    if not path.is_file():
        return None
    data = json.loads(path.read_text())
    return data if (data.get("environment") or {}).get("accelerator") == "cuda" else None


def _device_cell(dev: dict[str, Any] | None, name: str) -> str:
    if dev is None:
        return "not measured (no GPU lent)"
    entry = dev["fixes"].get(name) or {}
    fits = entry.get("fits") or {}
    rss = fits.get("rss")
    h2d = ((dev.get("h2d") or {}).get("modes") or {}).get(_BENCH_MODE.get(name, ""))
    speed = f"; {max(r['h2d_gbps'] for r in h2d):.0f} GB/s" if isinstance(h2d, list) and h2d else ""
    return f"{_f(rss['slope'])} B/param{speed}" if rss else f"not run{speed}"


_BENCH_MODE = {"baseline": "torch", "ds.native-pin": "native", "ds.native-pin:register=off": "native-unregistered",
               "torch.cached-size": "cached-size", "pin.register": "register", "pin_memory=false": "pageable"}
