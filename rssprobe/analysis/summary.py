"""A run's figures in bytes per parameter: phases, the live-buffer budget, code sites.

Everything is computed from the run directory's files. Memory is always taken above the
run's own pre-model baseline (RSS after imports, process-group set-up and op loading),
since import costs differ between versions by tens of MiB and are not per-parameter.
"""

from __future__ import annotations

import functools
import math
from statistics import fmean
from typing import Any, cast

from ..contract.files import NATIVE
from ..contract.glibc import glibc_in_use
from ..contract.interventions import INTERVENTIONS, parse
from ..contract.names import partitioned_roles
from ..contract.status import Status
from ..contract.workerscenario import DEFAULT_ZERO_STAGE
from ..errors import UserError
from ..store import judgement
from ..store.judgement import DAMAGED, INCOMPLETE, MISSING, Events
from ..store.rundir import RunDir, read_native
from . import answers, inrun, metrics, modelinfo, pinned, saves, stats
from .hostsplit import split as host_device_split
from .metrics import short_name
from .results import RunSummary

SITE_PHASES = metrics.SITE_PHASES
ELEMENT_BYTES = {"bf16": 2, "fp16": 2, "fp32": 4}  # a scenario precision's bytes per element


def _free(mi: dict[str, int] | None) -> int | None:
    return None if mi is None else mi["fordblks"]


def _window_mean(got: list[dict[str, Any]], n: int, key: str) -> float | None:
    """Mean per window; windows in which the site did not run count as 0."""
    values = [g[key] for g in got]
    if any(v is None for v in values):
        return None
    return sum(values) / n


def _sub(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else a - b


def _seconds(value: Any) -> float | None:
    """A duration read from disk: a finite number >= 0, else None (absent in runs made before it was recorded)."""
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value >= 0
    return float(value) if ok else None


# the roles the optimizer keeps per parameter it trains (a fine-tune's frozen ones have none of them)
OPTIMIZER_ROLES = ("fp32_master", "fp32_grad", "adam_exp_avg", "adam_exp_avg_sq", "h2d_staging", "grad_partitions")


class Summary:
    """Derived view of one run; `as_dict()` is the JSON form every reporter and diff reads."""

    def __init__(self, run: RunDir, rank: int = 0, of: Summary | None = None) -> None:
        """`of`: the summary of another rank of the same run, whose manifest, judgement and events read are
        shared (each rank's events read once: a reader linear in the ranks, not quadratic)."""
        self.run, self.rank = run, rank
        self._read: dict[int, Events] = of._read if of is not None else {}
        self._ranks: dict[int, Summary] = of._ranks if of is not None else {}
        self._ranks[rank] = self
        self.manifest = of.manifest if of is not None else run.manifest()
        self.events = self._events(rank).events
        # an ok the events do not back is "incomplete", with the reason (rssprobe.store.judgement)
        self.status, self.error, self.gaps = (of.status, of.error, of.gaps) if of is not None else \
            judgement.judged(self.manifest, self._events, run.steps_problem)
        self.by_kind: dict[str, list[dict[str, Any]]] = {}
        for e in self.events:
            self.by_kind.setdefault(e["event"], []).append(e)
        model = self._first("model")
        self.params: int | None = model["params"] if model else None
        self.trainable_params: int | None = model.get("trainable_params") if model else None
        partition = self._first("partition")
        self.partition_params: int | None = partition["params"] if partition else None
        # DeepSpeed's estimate is absolute host memory for a whole node; a rank's share is shown
        estimate = model.get("estimator_cpu_bytes") if model else None
        self.estimator = None if estimate is None else estimate / (model.get("estimator_ranks_per_node") or 1)
        phases = {e["name"]: e for e in self.by_kind.get("phase", [])}
        self.phase_events = phases
        self.baseline = phases.get("pre_model")
        self.steps = self.by_kind.get("step", [])
        self.census = {e["at"]: e for e in self.by_kind.get("census", [])}

    def _events(self, rank: int) -> Events:
        if rank not in self._read:
            self._read[rank] = self.run.read_events(rank)
        return self._read[rank]

    def of_rank(self, rank: int) -> Summary:
        """The summary of another rank of this run (made once, sharing what this one read)."""
        return self._ranks.get(rank) or Summary(self.run, rank, of=self)

    def _first(self, kind: str) -> dict[str, Any] | None:
        return self.by_kind.get(kind, [None])[0]

    def bpp(self, value: float | None) -> float | None:
        if value is None or not self.params:
            return None
        return value / self.params

    # ---- phases -------------------------------------------------------------------------
    def _point(self, events: list[dict[str, Any]]) -> dict[str, float | None]:
        """RSS/peak/glibc above baseline for one event, or averaged (peak: max) over several."""
        base = self.baseline
        if not events or base is None:
            return {}

        def mean(values: list[float | None]) -> float | None:
            return None if any(v is None for v in values) else fmean(values)  # type: ignore[arg-type]

        out = {
            "rss": self.bpp(mean([e["rss"] - base["rss"] for e in events])),
            "peak": self.bpp(max(e["peak"] for e in events) - base["rss"]),
            "glibc_in_use": self.bpp(mean([_sub(glibc_in_use(e["mallinfo"]), glibc_in_use(base["mallinfo"]))
                                           for e in events])),
            "glibc_free": self.bpp(mean([_sub(_free(e["mallinfo"]), _free(base["mallinfo"])) for e in events])),
        }
        # VmLck (mlock'ed pages: DeepSpeed's native pinned backend), where the worker read it: at every step of a
        # run that locks memory; absent otherwise (runs before it was read, runs that lock nothing)
        if "locked" in base and all("locked" in e for e in events):
            out["locked"] = self.bpp(mean([e["locked"] - base["locked"] for e in events]))
        return out

    def phases(self) -> dict[str, dict[str, float | None]]:
        init = self.by_kind.get("init", [])
        return {
            "init": self._point(init),
            "first_step": self._point(self.steps[:1]),
            "steady": self._point(self.steps[1:]),
            "end": self._point(self.steps[-1:]),
        }

    # ---- budget -------------------------------------------------------------------------
    def budget(self, at: str) -> dict[str, Any] | None:
        census, base_census = self.census.get(at), self.census.get("pre_model")
        if census is None or base_census is None or self.baseline is None:
            return None
        base_roles = base_census["roles"]
        roles = {}
        allocated = {}
        for name, r in census["roles"].items():
            before = base_roles.get(name, {"resident": 0, "allocated": 0})
            roles[name] = self.bpp(r["resident"] - before["resident"])
            allocated[name] = self.bpp(r["allocated"] - before["allocated"])
        live = census["resident"] - base_census["resident"]
        parts = self._parts(census, base_census)
        # with a memory-map partition, RSS is read where the parts were (after the census's own
        # reads, which may let glibc trim its heap top); without one, when the census began
        above = parts["parts_rss_above_baseline_bytes"] if parts else census["rss"] - self.baseline["rss"]
        out = {
            "at": at,
            "roles": dict(sorted(roles.items(), key=lambda kv: -(kv[1] or 0))),
            "roles_allocated": allocated,
            "live_bytes_per_param": self.bpp(live),
            "rss_above_baseline_bytes_per_param": self.bpp(above),
            "unexplained_bytes_per_param": self.bpp(above - live),
            "glibc_free_retained_bytes_per_param": self.bpp(_sub(_free(census["mallinfo"]),
                                                                 _free(self.baseline["mallinfo"]))),
            "estimator_bytes_per_param": self.bpp(self.estimator),
        }
        trainable = self.trainable_params
        if trainable and self.params and trainable < self.params:  # a fine-tune: the optimizer's roles per trained one
            out["roles_per_trainable_param"] = {name: v * self.params / trainable for name, v in roles.items()
                                                if name in OPTIMIZER_ROLES and v is not None}
        out.update(parts)
        out.update(self.census_time(census))
        out["imported_since_baseline"] = self.imported_since_baseline(at)
        out.update(host_device_split(census, base_census, self.bpp))  # pinned/pageable; device apart
        trim = self._first("trim_at_end")
        if at == "end" and trim is not None:
            # under jemalloc/tcmalloc malloc_trim is not glibc's to call (its answer is None): not available, not 0
            answer = trim.get("released_any")
            out["malloc_trim_released_bytes_per_param"] = None if answer is None \
                else self.bpp(trim["before"]["rss"] - trim["after"]["rss"])
            out["rss_after_trim_above_baseline_bytes_per_param"] = self.bpp(trim["after"]["rss"] - self.baseline["rss"])
        return out

    @staticmethod
    def census_time(census: dict[str, Any]) -> dict[str, Any]:
        """What one census point cost: the whole census and its memory-map partition (seconds; None in runs
        made before it was recorded), and the RSS the partition named, which its cost grows with."""
        memmap = census.get("memmap") if isinstance(census.get("memmap"), dict) else {}
        rss = memmap.get("mappings_rss")
        return {"census_time_s": _seconds(census.get("census_time_s")),
                "partition_time_s": _seconds(memmap.get("time_s")),
                "partition_rss_bytes": rss if isinstance(rss, int) and not isinstance(rss, bool) and rss >= 0
                else None}

    def census_times(self) -> list[dict[str, Any]]:
        """census_time() of every census point, the pre-model one included, in the order they were taken."""
        return [{"at": e["at"], **self.census_time(e)} for e in self.by_kind.get("census", [])]

    def imported_since_baseline(self, at: str) -> dict[str, int] | None:
        """Modules imported between the pre-model census and census `at`, by package ("total": their number;
        None in runs made before censuses recorded it). Their objects are a fixed cost, not per parameter."""
        out: dict[str, int] = {}
        for event in self.by_kind.get("census", []):
            if event["at"] != "pre_model":
                if event.get("imported") is None:
                    return None
                for package, n in event["imported"].items():
                    out[package] = out.get(package, 0) + n
            if event["at"] == at:
                break
        return dict(sorted(out.items(), key=lambda kv: (kv[0] != "total", kv[0] == "other", -kv[1])))

    def _parts(self, census: dict[str, Any], base: dict[str, Any]) -> dict[str, Any]:
        """RSS above the pre-model baseline, named part by part (memory-map partition).

        The parts add up to the mappings' RSS at each point; what the RSS counter read just
        after them differs from their sum by is 'not attributed', shown, never hidden.
        """
        now, then = census.get("memmap"), base.get("memmap")
        if not now or not then:
            return {}
        names = sorted(set(now["parts"]) | set(then["parts"]),  # ties by name: the same run shows alike every time
                       key=lambda n: (-(now["parts"].get(n, 0) - then["parts"].get(n, 0)), n))
        parts = {}
        for name in names:
            delta = now["parts"].get(name, 0) - then["parts"].get(name, 0)
            parts[name] = {"bytes": delta, "bytes_per_param": self.bpp(delta)}
        above = now["rss_after"] - then["rss_after"]
        rest = above - sum(p["bytes"] for p in parts.values())
        counts = {f"{k}_added": census[k] - base[k] for k in ("python_objects", "python_modules")
                  if k in census and k in base}
        return {"parts": parts, "parts_rss_above_baseline_bytes": above, "not_attributed_bytes": rest, **counts,
                "not_attributed_bytes_per_param": self.bpp(rest), "memmap_notes": now.get("notes", [])}

    # ---- sites --------------------------------------------------------------------------
    def sites(self) -> list[dict[str, Any]]:
        windows = {"init": [e["sites"] for e in self.by_kind.get("init", [])],
                   "first_step": [e["sites"] for e in self.steps[:1]],
                   "steady": [e["sites"] for e in self.steps[1:]]}
        rows = []
        for phase in SITE_PHASES:
            per_window = windows[phase]
            names = sorted({s for w in per_window for s in w})
            n = len(per_window)
            for site in names:
                got = [w[site] for w in per_window if site in w]
                avg = functools.partial(_window_mean, got, n)
                rows.append({
                    "site": site, "name": short_name(site), "phase": phase,
                    "calls": sum(g["calls"] for g in got) / n,
                    "retained_bytes_per_param": self.bpp(avg("retained")),
                    "exclusive_bytes_per_param": self.bpp(avg("retained_excl")),
                    "peak_bytes_per_param": self.bpp(max(g.get("peak_above_entry", 0) for g in got)),
                    "glibc_in_use_bytes_per_param": self.bpp(avg("inuse")),
                    "glibc_free_bytes_per_param": self.bpp(avg("free")),
                    # of the in-use bytes, glibc's mmapped chunks (mapped whole, touched or not); runs before
                    # the split was recorded: None
                    "glibc_mmapped_bytes_per_param": self.bpp(avg("mmapped"))
                    if all("mmapped" in g for g in got) else None,
                })
        rows.sort(key=lambda r: (SITE_PHASES.index(r["phase"]), -abs(r["retained_bytes_per_param"] or 0)))
        return rows

    def site_status(self) -> dict[str, str]:
        e = self._first("sites")
        return e["installed"] if e else {}

    def sites_first_step_only(self) -> list[str]:
        """Sites measured on the first step only (declared per-parameter sites); runs before them: none."""
        e = self._first("sites")
        declared = list(e.get("first_step_only") or []) if e else []
        if not declared:
            return []
        # only those this run called: ZeRO-1/2's per-parameter sites are installed at ZeRO-3 too, never called
        called = {r["site"] for r in self.sites() if r.get("calls")}
        return [p for p in declared if p in called]

    def sites_steady(self) -> str:
        """'light' (from step 2 on no glibc reads at sites, per-parameter sites pass through) or 'full'
        (every call, every figure; store/upgrade.py says so for runs made before the choice existed)."""
        e = self._first("sites")
        return (e.get("steady") if e else None) or "full"

    # ---- interventions ------------------------------------------------------------------
    def interventions(self) -> list[dict[str, Any]]:
        effects = self.manifest.effects or {}
        out = []
        for spec in self.manifest.patches or []:
            name, _options = parse(spec)
            entry = INTERVENTIONS.get(name)
            effect = effects.get(name, {})
            count = effect.get(entry.counter, 0) if entry else 0
            out.append({"name": name, "spec": spec, "counter": entry.counter if entry else None,
                        "count": count, "took_effect": bool(count), "effects": effect})
        return out

    def never_took_effect(self) -> list[str]:
        return [i["name"] for i in self.interventions() if not i["took_effect"]]

    # ---- all of it ----------------------------------------------------------------------
    def metrics(self) -> dict[str, float]:
        """Flat name -> bytes/param, the vocabulary of diff, gate and bisect (e.g. 'init.rss')."""
        out: dict[str, float] = {}
        for phase, figures in self.phases().items():
            for key, value in figures.items():
                if value is not None:
                    out[f"{phase}.{key}"] = value
        if self.steps:
            peaks = [e["peak"] for e in [*self.by_kind.get("init", []), *self.steps]]
            value = self.bpp(max(peaks) - self.baseline["rss"]) if self.baseline else None
            if value is not None:
                out["peak"] = value
        budget = self.budget("end")
        if budget:
            for key in ("live", "rss_above_baseline", "unexplained", "glibc_free_retained",
                        "malloc_trim_released", "rss_after_trim_above_baseline"):
                value = budget.get(f"{key}_bytes_per_param")
                if value is not None:
                    out[f"budget.{key}"] = value
            for role, value in budget["roles"].items():
                if value is not None:
                    out[f"role.{role}"] = value
            for name, part in budget.get("parts", {}).items():
                key = metrics.part_key(name)  # a label the contract does not declare has no figure
                if key is not None and part["bytes_per_param"] is not None:
                    out[key] = part["bytes_per_param"]
            if budget.get("not_attributed_bytes_per_param") is not None:
                out["budget.not_attributed"] = budget["not_attributed_bytes_per_param"]
        out.update(self.zero3_gathered_metrics())
        node = self.node() if self.rank == 0 else None
        for point, figures in (node or {}).get("points", {}).items():
            for key in ("rss", "pss"):
                if figures[f"{key}_bytes_per_param"] is not None:
                    out[f"node.{point}.{key}"] = figures[f"{key}_bytes_per_param"]
        if node and node["peak_bytes_per_param"] is not None:
            out["node.peak"] = node["peak_bytes_per_param"]
        if node and node.get("model_peak_bytes_per_param") is not None:
            out["node.model_peak"] = node["model_peak_bytes_per_param"]
        for key, value in (self.load() or {}).get("figures", {}).items():
            if value is not None:
                out[f"load.{key}"] = value
        for row in self.sites():
            for key in ("retained", "peak"):
                value = row[f"{key}_bytes_per_param"]
                if value is not None:
                    out[f"site.{row['name']}.{row['phase']}.{key}"] = value
        out.update(inrun.metrics(self.inrun_events(), self.growth()))
        out.update(pinned.metrics(self.pinned()))
        out.update(saves.metrics(self.saves()))
        if self.rank == 0 and self.manifest.world_size > 1 and "save" in self.by_kind:
            out.update(self.node_saves())
        return metrics.registered(out)

    # ---- the save phase (rssprobe.analysis.saves) ----------------------------------------
    def saves(self) -> dict[str, Any] | None:
        return saves.summarize(self.events, self.baseline["rss"] if self.baseline else None, self.params)

    def node_saves(self) -> dict[str, float]:
        """Every rank's save figures summed (node.save.*); none when a rank's events are missing."""
        world = self.manifest.world_size
        if any(not self._events(r).events for r in range(world)):
            return {}
        return saves.node([saves.metrics(self.of_rank(r).saves()) for r in range(world)])

    def pinned(self) -> dict[str, Any] | None:
        """DeepSpeed's pin requests by role and site, CUDA's holding predicted (and on CUDA measured)."""
        return pinned.summarize(self.by_kind.get("pins", []), self.manifest, self.steps[-1] if self.steps else None,
                                self.census.get("end"), self.params, base_census=self.census.get("pre_model"))

    # ---- ZeRO stage ----------------------------------------------------------------------
    def zero(self) -> dict[str, Any]:
        """The ZeRO stage and offloads the run used (its manifest's scenario; store/upgrade.py gives runs made
        before stages 1 and 3 were accepted their stage 2 with the optimizer offloaded)."""
        scen = self.manifest.scenario or {}
        z = scen.get("zero") or {}
        if (scen.get("model") or {}).get("kind") == "script" and not z:
            # a script's stage is its engine's: one that ended before deepspeed.initialize has none to show
            return {"stage": None, "offload_optimizer": None, "offload_param": None}
        return {"stage": z.get("stage", DEFAULT_ZERO_STAGE), "offload_optimizer": z.get("offload_optimizer", "cpu"),
                "offload_param": z.get("offload_param")}

    def zero3_gathered(self) -> dict[str, Any] | None:
        """ZeRO-3: parameters gathered and not released after backward and after the optimizer step, in the
        first and the last step (DeepSpeed's own ds_status: a count, deterministic beside the RSS figures)."""
        points = {}
        for name, step in (("first_step", self.steps[:1]), ("last_step", self.steps[-1:])):
            if step and step[0].get("gathered"):
                for at, counts in step[0]["gathered"].items():
                    if counts is not None:
                        points[f"{name}.{at}"] = {**counts, "fraction": counts["params"] / counts["of_params"]
                                                  if counts["of_params"] else None}
        return points or None

    def zero3_gathered_metrics(self) -> dict[str, float]:
        """ZeRO-3: the 16-bit weights left gathered in the last step, bytes per parameter of the model (gathered
        parameters x element size / parameters). A count, not an RSS reading: identical across repeats, so the
        gate decides on it at once (a release that stops releasing, DeepSpeed #7116, moves it)."""
        last = (self.steps[-1].get("gathered") or {}) if self.steps else {}
        size = ELEMENT_BYTES.get((self.manifest.scenario or {}).get("precision", "bf16"), 2)
        out = {}
        for at in ("after_backward", "after_step"):
            counts = last.get(at)
            if counts and counts.get("of_params"):
                out[f"zero3.gathered_{at}"] = counts["params"] * size / counts["of_params"]
        return out

    # ---- in-run events and growth (rssprobe.analysis.inrun) -----------------------------
    def inrun_events(self) -> dict[str, dict[str, Any]]:
        return inrun.events(self.by_kind, self.params)

    def growth(self) -> dict[str, Any] | None:
        return inrun.growth(self.steps, self.params)

    def as_dict(self) -> RunSummary:
        out = self._as_dict()
        return cast(RunSummary, {"answer": answers.run(out), **out})

    def _as_dict(self) -> dict[str, Any]:
        m = self.manifest
        scen = m.scenario or {}
        return {
            "run": self.run.id, "path": str(self.run.path), "label": m.label, "status": self.status,
            "error": self.error, "exit_after_end": m.exit_after_end if self.status == Status.OK else None,
            "scenario": scen.get("name"), "zero": self.zero(),
            "zero3_gathered": self.zero3_gathered(),
            "steps_done": len(self.steps), "steps_requested": scen.get("steps")
            or (scen.get("script") or {}).get("stop_after") or len(self.steps),
            "script": modelinfo.script(self.by_kind, m),
            "params": self.params, "model": modelinfo.describe(self.by_kind, m),
            "versions": m.versions, "allocator": m.allocator,
            "malloc_env": m.malloc_env,
            "glibc_malloc": (self.phase_events.get("process_start") or {}).get("glibc"),
            "accelerator": m.accelerator, "cuda": self._cuda_note(),
            "baseline_rss_bytes": self.baseline["rss"] if self.baseline else None,
            "phases": self.phases(),
            "budget": self.budget("end"),
            "budgets": [b for at in ("after_load", "after_init", "after_first_step", "end")
                        if (b := self.budget(at))],
            "census_times": self.census_times(),
            "sites": self.sites(), "site_status": self.site_status(),
            "sites_first_step_only": self.sites_first_step_only(), "sites_steady": self.sites_steady(),
            "interventions": self.interventions(), "never_took_effect": self.never_took_effect(),
            "metrics": self.metrics(),
            "events": self.inrun_events(), "growth": self.growth(), "pinned": self.pinned(),
            "step_events": {str(k): v for k, v in inrun.step_marks(self.by_kind).items()},
            "native": self.native() if self.rank == 0 else None, "memray": bool(m.memray),
            "world_size": m.world_size, "rank": self.rank, "partition_params": self.partition_params,
            "ranks": self.per_rank() if self.rank == 0 and m.world_size > 1 else None,
            "node": self.node() if self.rank == 0 else None,
            "load": self.load(), "saves": self.saves(),
            "mean_step_time_s": fmean(e["time_s"] for e in self.steps[1:]) if len(self.steps) > 1 else None,
        }

    def per_rank(self) -> list[dict[str, Any]]:
        """Each rank's headline figures per parameter of the whole model; the partitioned roles (each rank
        holds its share only) also per parameter of the rank's partition."""
        partitioned = {f"role.{name}" for name in partitioned_roles(self.zero()["stage"])}
        rows = []
        for rank in range(self.manifest.world_size):
            state = (self.manifest.ranks or {}).get(str(rank), {})
            status = INCOMPLETE if rank in self.gaps else state.get("status")
            error = self.gaps.get(rank, state.get("error"))
            if not self._events(rank).events:  # nothing to summarize (a rank's events missing): no figure
                rows.append({"rank": rank, "status": status, "error": error, "steps_done": 0,
                             "partition_params": None, "metrics": {}, "metrics_per_partition_param": None})
                continue
            other = self.of_rank(rank)
            metrics = other.metrics()
            ratio = (other.params / other.partition_params) if other.params and other.partition_params else None
            rows.append({"rank": rank, "status": status, "error": error,
                         "steps_done": len(other.steps), "partition_params": other.partition_params,
                         "metrics": metrics,
                         "metrics_per_partition_param": {k: v * ratio for k, v in metrics.items()
                                                         if k in partitioned} if ratio else None})
        return rows

    def node(self) -> dict[str, Any] | None:
        """A multi-rank run's node: every rank's RSS and PSS summed at init, after the first step and at
        the end (absolute bytes: the node's host memory is what runs out), and the peak of the sum that
        the orchestrator sampled. PSS shares each shared page among its users, so it does not count
        libtorch's code or shared buffers once per rank as the RSS sum does."""
        world = self.manifest.world_size
        if world < 2:
            return None
        # a rank without events has no point: then no point has every rank (nothing summed), and none is built
        ranks = [] if any(not self._events(r).events for r in range(world)) else \
            [self.of_rank(rank) for rank in range(world)]
        points: dict[str, dict[str, Any]] = {}
        for name, pick in (("init", lambda s: s._first("init")),
                           ("first_step", lambda s: s.steps[0] if s.steps else None),
                           ("end", lambda s: s.steps[-1] if s.steps else None)):
            events = [pick(s) for s in ranks]
            if not events or any(e is None for e in events):
                continue  # a rank that never got there: no node figure for this point
            rss = sum(e["rss"] for e in events)
            pss = sum(e["smaps"]["pss"] for e in events) if all((e.get("smaps") or {}).get("pss") for e in events) \
                else None
            points[name] = {"rss_bytes": rss, "pss_bytes": pss, "rss_bytes_per_param": self.bpp(rss),
                            "pss_bytes_per_param": self.bpp(pss)}
        sampled = self.manifest.node or {}
        peak = sampled.get("peak_rss_bytes")
        end = points.get("end", {})
        return {"ranks": world, "points": points, "rss_bytes": end.get("rss_bytes"), "pss_bytes": end.get("pss_bytes"),
                "peak_rss_bytes": peak, "peak_bytes_per_param": self.bpp(peak),
                "peak_samples": sampled.get("samples"), "peak_interval_s": sampled.get("interval_s"),
                # while the ranks built or loaded their model (run/nodewatch.py): absolute bytes and per parameter
                "model_peak_rss_bytes": sampled.get("model_peak_rss_bytes"),
                "model_peak_bytes_per_param": self.bpp(sampled.get("model_peak_rss_bytes")),
                "model_peak_samples": sampled.get("model_samples")}

    def load(self) -> dict[str, Any] | None:
        """The model's load from its checkpoint (worker/loading.py), above the pre-model baseline: its exact peak,
        RSS after it split anonymous / file-backed / shared, and what this rank holds (the whole model or its
        partition), per parameter of the whole model. None when the model was built, not loaded."""
        e = self._first("load")
        if e is None or not self.baseline:
            return None
        base, smaps, base_smaps = self.baseline["rss"], e.get("smaps") or {}, self.baseline.get("smaps") or {}

        def above(key: str) -> float | None:
            return self.bpp(smaps[key] - base_smaps[key]) if key in smaps and key in base_smaps else None

        figures = {"peak": self.bpp(e["peak"] - base), "rss": self.bpp(e["rss"] - base),
                   "anon": above("anonymous"), "file": above("file_backed"), "shmem": above("pss_shmem"),
                   "whole": self.bpp(e["whole_bytes"]),
                   "partition": self.bpp(e["partition_bytes"])}
        return {"how": e["how"], "time_s": e["time_s"], "zero_init": e["zero_init"], "holds": e["holds"],
                "checkpoint": e.get("checkpoint"), "peak_bytes": e["peak"] - base, "rss_bytes": e["rss"] - base,
                "whole_bytes": e["whole_bytes"], "partition_bytes": e["partition_bytes"], "figures": figures}

    def native(self) -> dict[str, Any] | None:
        """Top native allocation sites per phase (--memray runs), sizes also in bytes per parameter."""
        path = self.run.path / NATIVE
        if not path.exists():
            return None
        data = read_native(path)
        for kinds in data.values():
            for rows in kinds.values():
                for row in rows:
                    row["bytes_per_param"] = self.bpp(row["bytes"])
        return data

    def _cuda_note(self) -> str:
        last = self.steps[-1] if self.steps else None
        if last is None or last.get("cuda") is None:
            return "not available: no CUDA device in this process"
        return "measured"


def unreadable(run: RunDir, why: str) -> dict[str, Any]:
    """What a summary says of a member run that cannot be read (missing, damaged): its status and why, no
    figures, so that a group, a side or a sweep names it and counts it as not finished instead of failing whole."""
    status = MISSING if not run.path.is_dir() else DAMAGED
    return {"answer": [f"Run {run.id} cannot be read: {why}."],
            "run": run.id, "path": str(run.path), "label": None, "status": status, "error": why,
            "exit_after_end": None, "scenario": None, "zero": {}, "zero3_gathered": None, "steps_done": 0,
            "steps_requested": None, "script": None, "params": None, "model": None, "versions": None,
            "allocator": None, "malloc_env": None, "glibc_malloc": None, "accelerator": None, "cuda": None,
            "baseline_rss_bytes": None, "phases": {}, "budget": None, "budgets": [], "census_times": [],
            "sites": [], "site_status": {}, "sites_first_step_only": [], "sites_steady": None,
            "interventions": [], "never_took_effect": [], "metrics": {}, "events": {}, "growth": None,
            "pinned": None, "step_events": {}, "native": None, "memray": False, "world_size": 1, "rank": 0,
            "partition_params": None, "ranks": None, "node": None, "mean_step_time_s": None, "load": None,
            "saves": None}


def summarise(run: RunDir) -> dict[str, Any]:
    """A member run's summary (Summary.as_dict()), or, when its files cannot be read, what unreadable() says."""
    if not run.path.is_dir():
        return unreadable(run, f"{run.id} is missing (deleted, or never run)")
    try:
        return Summary(run).as_dict()
    except UserError as e:
        return unreadable(run, str(e))


def across(summaries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A group's headline figures and parts of RSS across its finished repeats: mean, sd, min, max."""
    ok = [s for s in summaries if s["status"] == Status.OK]
    parts = sorted({m for s in ok for m in s["metrics"] if m.startswith("part.")},
                   key=lambda m: (-max(abs(s["metrics"].get(m, 0)) for s in ok), m))
    rows = []
    for figure in (*metrics.HEADLINE, *parts):
        values = [s["metrics"][figure] for s in ok if figure in s["metrics"]]
        if values:
            mean, sd = stats.mean_sd(values)
            rows.append({"figure": figure, "mean": mean, "sd": sd, "min": min(values), "max": max(values),
                         "n": len(values)})
    return rows
