"""Synthetic run directories with known answers, for tests that read runs but must not train.

The files have the same shape as a real run's (manifest.json, events.jsonl with every event
kind the worker writes, optionally steps.parquet), but every memory figure is chosen here in
bytes per parameter above the pre-model baseline, so a test can assert the exact figure a
report must show (e.g. a step RSS of baseline + 10 x params must read 10.00).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rssprobe.analysis.tables import steps_frame

PARAMS = 1_000_000
BASELINE_RSS = 200 * 2**20
# the pre_model mallinfo2; glibc figures are taken above these, not above RSS
BASE_MALLINFO = {"arena": 60_000_000, "hblkhd": 4_000_000, "uordblks": 50_000_000, "fordblks": 2_000_000,
                 "keepcost": 100_000}
INIT_ROLES = {"fp32_master": 4.0, "fp32_grad": 4.0, "bit16_params": 2.0}  # B/param after deepspeed.initialize
STEP_ROLES = {**INIT_ROLES, "adam_exp_avg": 4.0, "adam_exp_avg_sq": 4.0}  # after the first optimizer step
SITE = "deepspeed.ops.adam.cpu_adam.DeepSpeedCPUAdam.step"


@dataclass(frozen=True)
class Step:
    """One step's figures in B/param above the baseline (RSS, exact peak, glibc in use, glibc free-retained)."""

    rss: float = 10.0
    peak: float = 12.0
    in_use: float = 6.0
    free: float = 1.0


@dataclass
class FakeRun:
    """What to write; the defaults are a finished, unpatched glibc run of three steps at 10 B/param."""

    run_id: str = "fake"
    label: str = "baseline"
    scenario: str = "tiny"
    params: int = PARAMS
    baseline_rss: int = BASELINE_RSS
    steps: list[Step] = field(default_factory=lambda: [Step(), Step(), Step()])
    steps_requested: int | None = None  # default: len(steps)
    init: Step = field(default_factory=lambda: Step(rss=8.0, peak=9.0, in_use=5.0, free=0.5))
    glibc: bool = True  # False: another allocator, mallinfo2 None everywhere
    status: str = "ok"  # anything else: the worker died after the last step, no 'end' census or event
    error: str | None = None
    patches: list[str] = field(default_factory=list)
    effects: dict[str, dict[str, Any]] = field(default_factory=dict)
    write_parquet: bool = True


def _bytes(run: FakeRun, bpp: float) -> int:
    return int(run.baseline_rss + bpp * run.params)


def _mallinfo(run: FakeRun, in_use: float, free: float) -> dict[str, int] | None:
    if not run.glibc:
        return None
    b = BASE_MALLINFO
    extra = int(in_use * run.params)
    return {"arena": b["arena"] + extra, "hblkhd": b["hblkhd"] + extra // 2,
            "uordblks": b["uordblks"] + extra - extra // 2, "fordblks": b["fordblks"] + int(free * run.params),
            "keepcost": b["keepcost"]}


def _smaps(rss: int) -> dict[str, int]:
    return {"rss": rss, "pss": rss - 4096, "pss_anon": rss // 2, "pss_file": rss // 2 - 4096, "pss_shmem": 0,
            "private_clean": 0, "private_dirty": rss // 2, "anonymous": rss // 2, "swap": 0, "uss": rss - 8192,
            "file_backed": rss // 2}


def _census(run: FakeRun, t: float, at: str, rss: int, roles: dict[str, float], mallinfo: dict[str, int] | None
            ) -> dict[str, Any]:
    out = {name: {"allocated": int(v * run.params), "resident": int(v * run.params), "storages": 1}
           for name, v in roles.items()}
    total = sum(r["resident"] for r in out.values())
    return {"event": "census", "t": t, "at": at, "rss": rss, "mallinfo": mallinfo, "roles": out,
            "allocated": total, "resident": total}


def _probe(run: FakeRun, s: Step) -> dict[str, Any]:
    rss = _bytes(run, s.rss)
    return {"rss": rss, "mallinfo": _mallinfo(run, s.in_use, s.free), "smaps": _smaps(rss), "cuda": None}


def events(run: FakeRun) -> list[dict[str, Any]]:
    """The event stream a real worker would have written for these figures."""
    t = 1_795_974_544.0
    base_mi = _mallinfo(run, 0.0, 0.0)
    glibc_status = ({"available": True, "reason": "glibc malloc", "version": "2.36"} if run.glibc
                    else {"available": False, "reason": "not glibc malloc (LD_PRELOAD jemalloc)", "version": None})
    base = {"rss": run.baseline_rss, "mallinfo": base_mi, "smaps": _smaps(run.baseline_rss)}
    out: list[dict[str, Any]] = [
        {"event": "phase", "t": t, "name": "process_start", "rss": 17_000_000, "mallinfo": base_mi,
         "smaps": _smaps(17_000_000), "glibc": glibc_status, "hwm_reset": True},
        {"event": "hello", "t": t + 1, "pid": 4242, "versions": {"python": "3.11.7", "torch": "2.13.0+cpu",
         "deepspeed": "0.19.8", "glibc": "2.36" if run.glibc else None}, "accelerator": "cpu",
         "cuda_available": False},
        {"event": "phase", "t": t + 2, "name": "after_imports", **base, "cuda": None},
        {"event": "phase", "t": t + 3, "name": "ops_loaded", **base, "cuda": None},
        _census(run, t + 4, "pre_model", run.baseline_rss, {}, base_mi),
        {"event": "phase", "t": t + 5, "name": "pre_model", **base, "cuda": None},
        {"event": "model", "t": t + 6, "params": run.params, "param_groups": 1,
         "estimator_cpu_bytes": 24 * run.params},
        {"event": "phase", "t": t + 7, "name": "after_model", **_probe(run, Step(2.0, 2.0, 0.0, 0.0))},
        {"event": "sites", "t": t + 8, "installed": {"deepspeed.initialize": "ok", SITE: "ok"}},
        {"event": "init", "t": t + 9, "time_s": 3.0, "peak": _bytes(run, run.init.peak),
         "entry_rss": _bytes(run, 2.0),
         "sites": {"deepspeed.initialize": _site(run, run.init.rss - 2.0, run.init.in_use)},
         "calls": [], "effects": {}, **_probe(run, run.init)},
        _census(run, t + 10, "after_init", _bytes(run, run.init.rss), INIT_ROLES,
                _mallinfo(run, run.init.in_use, run.init.free)),
    ]
    prev = run.init
    for i, s in enumerate(run.steps, start=1):
        rss = _bytes(run, s.rss)
        out.append({"event": "step", "t": t + 10 + i, "step": i, "time_s": 0.02, "peak": _bytes(run, s.peak),
                    "entry_rss": _bytes(run, prev.rss),
                    "parts": {p: {"peak": _bytes(run, s.peak), "rss": rss} for p in ("forward", "backward",
                                                                                     "optimizer")},
                    "sites": {SITE: _site(run, s.rss - prev.rss, s.in_use - prev.in_use)},
                    "calls": [], "effects": run.effects, "loss": 0.001, **_probe(run, s)})
        if i == 1:
            out.append(_census(run, t + 10.5 + i, "after_first_step", rss, STEP_ROLES,
                               _mallinfo(run, s.in_use, s.free)))
        prev = s
    if run.status == "ok":
        out.append(_census(run, t + 50, "end", _bytes(run, prev.rss), STEP_ROLES, _mallinfo(run, prev.in_use,
                                                                                            prev.free)))
        out.append({"event": "end", "t": t + 51, "status": "ok", "effects": run.effects})
    elif run.error:
        out.append({"event": "error", "t": t + 50, "message": run.error, "traceback": f"Traceback...\n{run.error}\n"})
    return out


def _site(run: FakeRun, retained_bpp: float, in_use_bpp: float) -> dict[str, int]:
    retained = int(retained_bpp * run.params)
    return {"calls": 1, "retained": retained, "retained_excl": retained, "peak_above_entry": max(retained, 0),
            "inuse": int(in_use_bpp * run.params), "free": 0, "mmapped": 0, "child_calls": 0}


def manifest(run: FakeRun, path: Path) -> dict[str, Any]:
    steps = run.steps_requested or len(run.steps)
    return {
        "id": run.run_id, "label": run.label, "status": run.status, "started": "2026-11-29T17:49:04+00:00",
        "scenario_ref": run.scenario,
        "scenario": {"name": run.scenario, "description": "synthetic", "precision": "bf16", "steps": steps,
                     "micro_batch": 2, "grad_accum_steps": 1, "seed": 0, "world_size": 1, "timeout_s": 900.0,
                     "model": {"params": None, "layers": 4, "width": 768, "param_groups": 1},
                     "zero": {"stage": 2, "offload_optimizer": "cpu", "pin_memory": True},
                     "optimizer": {"type": "AdamW", "lr": 0.0001},
                     "probes": {"sites": "default", "extra_sites": [], "trace_sites": [], "census": True,
                                "smaps": True, "trim_at_end": False},
                     "patches": {}},
        "deepspeed_config": {"train_micro_batch_size_per_gpu": 2, "zero_optimization": {"stage": 2}},
        "command": ["rssprobe", "run", run.scenario, "--out", str(path)],
        "python": "/usr/bin/python3",
        "host": {"kernel": "6.0", "machine": "x86_64", "cpu_model": "test", "cpu_count": 2,
                 "mem_total_bytes": 2**34, "libc": "glibc-2.36", "rssprobe_revision": None},
        "allocator": "glibc" if run.glibc else "jemalloc",
        "ld_preload": None if run.glibc else "/usr/lib/libjemalloc.so.2",
        "malloc_env": {}, "patches": run.patches, "patch_files": [], "torch_extensions_dir": "/tmp/ext",
        "error": run.error, "exit_code": 0 if run.status == "ok" else 1, "ended": "2026-11-29T17:49:13+00:00",
        "versions": {"python": "3.11.7", "torch": "2.13.0+cpu", "deepspeed": "0.19.8",
                     "glibc": "2.36" if run.glibc else None},
        "accelerator": "cpu", "params": run.params, "steps_done": len(run.steps), "effects": run.effects,
        "log_tail": None if run.status == "ok" else run.error,
    }


def make_run(root: Path, run: FakeRun | None = None, **fields: Any) -> Path:
    """Write a run directory under root (named after run_id) and return its path.

    `make_run(tmp_path, run_id="a", status="failed", error="boom")` is the usual call; fields
    are FakeRun's.
    """
    run = run or FakeRun(**fields)
    path = root / run.run_id
    path.mkdir(parents=True)
    stream = events(run)
    (path / "manifest.json").write_text(json.dumps(manifest(run, path), indent=2) + "\n")
    (path / "events.jsonl").write_text("".join(json.dumps(e, separators=(",", ":")) + "\n" for e in stream))
    if run.write_parquet:
        steps_frame(stream).to_parquet(path / "steps.parquet", index=False)
    return path
