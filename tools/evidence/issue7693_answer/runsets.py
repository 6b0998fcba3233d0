"""The runs behind reports/issue7693-answer.md: the committed run sets extracted, the fixes' runs collected into
figures, and each fix's rssprobe options (__main__.py is the command line; page.py writes the page from these)."""

from __future__ import annotations

import json
import re
import tarfile
from pathlib import Path
from statistics import fmean
from typing import Any

from rssprobe.analysis import fit, fixes
from rssprobe.analysis.pinned import request_ops
from rssprobe.analysis.summary import Summary
from rssprobe.store.rundir import RunDir

ROOT = Path(__file__).resolve().parents[3]
HERE = ROOT / "reports" / "issue7693-answer"  # the page's runs (runs.tar.gz) and a device call's results (device/)
RSS = "budget.rss_above_baseline"  # RSS at the end census above the pre-model baseline (the H200 slope's figure)


# ---- runs -> figures -------------------------------------------------------------------------------------------
def run_dirs(roots: list[Path]) -> list[Path]:
    """Every run directory under `roots` (a manifest beside its events), in name order."""
    found = {p.parent for root in roots for p in Path(root).rglob("manifest.json")
             if (p.parent / "events.jsonl").exists() and "checkpoints" not in p.parts}
    return sorted(found)


def fix_of(s: Summary) -> fixes.Fix:
    m = s.manifest
    scenario = m.scenario or {}
    return fixes.of_run(list(m.patches or []), scenario.get("torch_alloc_conf"),
                        (scenario.get("zero") or {}).get("pin_memory"))


def _slope(points: list[tuple[int, float]]) -> dict[str, Any] | None:
    """bytes = fixed + slope x params over (params, bytes) points (analysis/fit.py); None under 2 sizes."""
    got = fit.fit("x", [p for p, _v in points], [v for _p, v in points])
    return None if got is None else {"slope": got.slope_bytes_per_param, "slope_interval": got.slope_interval,
                                     "fixed_mib": got.fixed_bytes / 2**20,
                                     "fixed_interval_mib": None if got.fixed_interval is None
                                     else got.fixed_interval / 2**20, "sizes": got.sizes, "runs": got.n}


def collect(roots: list[Path], h2d: Path | None = None) -> dict[str, Any]:
    """Per fix: its runs (size, status, RSS and VmLck above the baseline, live buffers, pinned figures, step
    time, how often its intervention took effect) and the fits over size; for every fix, what CUDA would hold
    for the reference runs' pin requests (predicted); the H2D bench where given."""
    per_fix: dict[str, dict[str, Any]] = {f.name: {"runs": []} for f in fixes.catalogue()}
    env: dict[str, Any] = {}
    for path in run_dirs(roots):
        root = next(Path(r) for r in roots if Path(r) in path.parents or Path(r) == path)
        s = Summary(RunDir(path))
        d = s.as_dict()
        fix = fix_of(s)
        metrics = d["metrics"]
        view = d["pinned"] or {}
        tot = view.get("totals") or {}
        env = env or {"accelerator": d["accelerator"], "versions": d["versions"],
                      "host": (s.manifest.host or {})}
        ops = request_ops([r for e in s.by_kind.get("pins", []) for r in e["requests"]],
                          [f for e in s.by_kind.get("pins", []) for f in e["freed"]])
        per_fix[fix.name]["runs"].append({
            "run": str(path.relative_to(root.parent)), "status": d["status"],
            "params": d["params"], "accelerator": d["accelerator"], "versions": d["versions"],
            "malloc_env": d["malloc_env"] or {}, "steps": d["steps_done"],
            "rss": metrics.get(RSS), "peak": metrics.get("init.peak"), "live": metrics.get("budget.live"),
            "locked": metrics.get("pinned.locked"),
            "pinned_requested": metrics.get("pinned.requested"), "pinned_held_predicted": metrics.get(
                "pinned.held_predicted"), "pinned_held_measured": metrics.get("pinned.held"),
            # VmLck above the baseline at init, after the first step, steady (mean), last step (bytes)
            "locked_points": [None if metrics.get(f"{p}.locked") is None else metrics[f"{p}.locked"] * d["params"]
                              for p in ("init", "first_step", "steady", "end")],
            "locked_minus_native_pages": view.get("locked_minus_native_pages"), "native_requests": view.get(
                "via_native"), "requests": tot.get("requests"), "step_time_s": d["mean_step_time_s"],
            "interventions": [{k: i[k] for k in ("name", "count", "took_effect", "effects")}
                              for i in d["interventions"]],
            # CUDA's holding of these very requests under every fix (predicted; meaningful for the reference runs)
            "fixes_predicted": {r["name"]: r["host_predicted"] for r in fixes.compare(
                ops, (d["versions"] or {}).get("torch"), view.get("alloc_conf"), d["params"],
                (tot.get("held_predicted") or 0))} if ops else None,
        })
    for entry in per_fix.values():
        ok = [r for r in entry["runs"] if r["status"] == "ok" and r["params"]]
        entry["fits"] = {key: _slope([(r["params"], r[key] * r["params"]) for r in ok if r[key] is not None])
                         for key in ("rss", "peak", "live", "locked", "pinned_requested", "pinned_held_predicted",
                                     "pinned_held_measured")}
        times = [r["step_time_s"] for r in ok if r["step_time_s"]]
        entry["step_time_s"] = fmean(times) if times else None
        counts: dict[str, int] = {}
        for r in ok:  # how often each intervention took effect, over the fix's runs (0: it never did)
            for i in r["interventions"]:
                counts[i["name"]] = counts.get(i["name"], 0) + i["count"]
        entry["took_effect"] = counts
    reference = [r for r in per_fix[fixes.reference().name]["runs"] if r["status"] == "ok" and r["fixes_predicted"]]
    predicted = {}
    for fix in fixes.catalogue():
        predicted[fix.name] = _slope([(r["params"], r["fixes_predicted"][fix.name]) for r in reference])
    out = {"environment": env, "fixes": per_fix, "cuda_predicted_host_bytes": predicted}
    if h2d is not None and h2d.exists():
        out["h2d"] = json.loads(h2d.read_text())
    return out


# ---- what a fix runs as ----------------------------------------------------------------------------------------
def options(name: str) -> list[str]:
    """The rssprobe options that run fix `name` (fixes.toml's patch, set or alloc_conf); none for the reference."""
    fix = fixes.by_name(name)
    if fix.patch:
        return ["--patch", fix.patch]
    if fix.set:
        return ["--set", fix.set]
    if fix.alloc_conf:
        return ["--torch-alloc-conf", fix.alloc_conf]
    return []


def slug(name: str) -> str:
    return re.sub(r"[^a-z0-9.]+", "-", name.lower()).strip("-")


def extract(tarball: Path, into: Path) -> Path:
    """A committed runs.tar.gz, extracted (data filter: no links out, no absolute paths)."""
    into.mkdir(parents=True, exist_ok=True)
    with tarfile.open(tarball) as tar:
        tar.extractall(into, filter="data")
    return into

