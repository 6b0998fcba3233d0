"""The gate workflow for CI: get the two sides (stored, or run now), or one side and ceilings, and decide.

Returns the decision (GateResult): its verdict, the data every format shows, and one JUnit case per
decided figure; the command publishes it (reporters/gate.py: the report, JUnit, $GITHUB_STEP_SUMMARY).
The exit code is the verdict's, from rssprobe.verdicts (`git bisect run`'s reading).
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .. import kinds, verdicts
from ..analysis import answers, metrics, stats, sweep
from ..analysis.compare import Side, check_limits, check_metrics, compare
from ..analysis.metrics import GATED
from ..config import overlay, patchsets, scenario
from ..config.limits import load_limits
from ..config.runoptions import RunOptions
from ..config.scenariospec import ScenarioSpec
from ..errors import UserError
from ..run import group as groups
from ..run import launch, request
from ..store import campaign, outputs


@dataclass
class GateRequest:
    spec: ScenarioSpec | None = None  # the scenario a gate --run (or --limits without --candidate) runs
    reference: str | None = None
    candidate: str | None = None
    run: bool = False
    limits: Path | None = None
    options: RunOptions = field(default_factory=lambda: RunOptions(repeat=3))  # the runs of --run and --limits
    patched: bool = False
    metrics: tuple[str, ...] = ()
    threshold: float = stats.THRESHOLD
    alpha: float = stats.ALPHA
    junit_file: Path | None = None
    force: bool = False
    allow_different_scripts: bool = False
    allow_undecided: bool = False  # run even when the repeat count can never reach significance at alpha


@dataclass
class GateResult:
    """kind: a result kind (rssprobe/kinds.py): limits (one side against ceilings), comparison (two runs or
    groups), sweep comparison (two size sweeps)."""

    kind: str
    verdict: str
    data: dict[str, Any]
    cases: list[tuple[str, str, str]]  # (name, verdict, reason): one JUnit test case each

    @property
    def exit_code(self) -> int:
        return verdicts.exit_code(self.verdict)


def _side(g: GateRequest, spec: ScenarioSpec, scen: scenario.Scenario, label: str, specs: list[str],
          patch_files: list[Path]) -> launch.RunRequest:
    """One side's request: the gate's options with this side's patches and diffs (the command line it records is
    the gate's)."""
    return request.make(spec, request.varied(g.options, patches=specs, patch_files=tuple(patch_files)), scen=scen,
                        label=label, argv=list(sys.argv))


def _preflight(scen: scenario.Scenario, reqs: list[launch.RunRequest], patch_files: list[Path]) -> None:
    """Every side's per-run preflight (run/request.check_all: sites, alloc conf, the native pin's lock limit, ...)
    before the first side runs for minutes."""
    request.check_scenarios([scen])
    overlay.read_diffs(patch_files)
    request.check_all(reqs)


def _against_limits(g: GateRequest, spec: ScenarioSpec | None) -> GateResult:
    assert g.limits is not None
    ceilings = load_limits(g.limits)
    if g.candidate:
        side = Side.load(g.candidate)
        check_metrics(f"{g.limits}:", list(ceilings), [side])  # misspelt is unknown, not "not measured" (undecided)
    elif spec is not None:
        scen = spec.load()
        for metric in ceilings:  # before minutes of training, not after
            metrics.check(f"{g.limits}:", metric, scen)
        asked, files = list(g.options.patches), list(g.options.patch_files)
        label, specs = patchsets.resolve(scen, not (g.patched or asked), g.patched, asked)
        req = _side(g, spec, scen, label, specs, files)
        _preflight(scen, [req], files)
        group, _statuses = groups.run_group(req, g.options.runs)
        side = Side.load(str(group.path))
    else:
        raise UserError("gate --limits needs a SCENARIO to run or a --candidate run")
    verdict, checks, problems = check_limits(side, ceilings)
    data = {"verdict": verdict, "problems": problems, "checks": [c.as_dict() for c in checks], "side": side.name,
            "limits": str(g.limits)}
    data = {"answer": answers.limits(data), **data}
    return GateResult(kinds.LIMITS.name, verdict, data, [(c.metric, c.verdict, c.reason) for c in checks])


def _problems(result: dict[str, Any]) -> list[tuple[str, str, str]]:
    return [(f"problem {i + 1}", verdicts.UNDECIDED, p) for i, p in enumerate(result["problems"])]


def _sweeps(g: GateRequest) -> GateResult:
    """Two size sweeps: the slope and the fixed part of each figure decide apart."""
    assert g.reference and g.candidate
    result = sweep.compare(g.reference, g.candidate, g.metrics or GATED, g.threshold, force=g.force).as_dict()
    cases = [(f"{c['figure']} {part}", c[part]["verdict"], c[part]["reason"])
             for c in result["comparisons"] for part in ("slope", "fixed")]
    return GateResult(kinds.SWEEP_COMPARISON.name, result["verdict"], result, cases + _problems(result))


def _against_reference(g: GateRequest, spec: ScenarioSpec | None) -> GateResult:
    if g.reference and g.candidate and any((k := kinds.campaign(campaign.kind_of(Path(ref)))) and k.compared
                                           for ref in (g.reference, g.candidate)):
        return _sweeps(g)
    if g.reference and g.candidate:
        a, b = Side.load(g.reference), Side.load(g.candidate)
        check_metrics("--metric", g.metrics, [a, b])
    elif g.run and spec is not None:
        scen = spec.load()
        for pattern in g.metrics:  # before minutes of training, not after
            metrics.check("--metric", pattern, scen)
        asked, diffs = list(g.options.patches), list(g.options.patch_files)
        use_set = g.patched or not (asked or diffs)  # default candidate: the scenario's patch set
        label, specs = patchsets.resolve(scen, False, use_set, asked)
        if diffs:
            label = "+".join([*([label] if specs else []), *(p.stem for p in diffs)])
        reqs = [_side(g, spec, scen, name, patches, files)
                for name, patches, files in ((patchsets.BASELINE, [], []), (label, specs, diffs))]
        _preflight(scen, reqs, diffs)  # both sides, before the baseline runs for minutes
        # measured alternately, run by run: drift of the machine must not pass for a difference
        (base, _), (cand, _) = groups.run_groups(reqs, g.options.runs)
        a, b = Side.load(str(base.path)), Side.load(str(cand.path))
    else:
        raise UserError("gate needs --reference and --candidate, or SCENARIO --run, or --limits FILE")
    result = compare(a, b, g.threshold, g.alpha, g.force, g.metrics or GATED, g.allow_different_scripts).as_dict()
    # the gate's own answer: its word and exit code first (only gated figures decide), then diff's lead
    result["answer"] = answers.comparison({k: v for k, v in result.items() if k != "answer"}, gate_first=True)
    cases = [_case(c) for group in result["comparisons"].values() for c in group]
    return GateResult(kinds.COMPARISON.name, result["verdict"], result, cases + _problems(result))


def _case(c: dict[str, Any]) -> tuple[str, str, str]:
    """A figure's JUnit case (name, verdict, message). A gated figure's verdict is its own. A figure that does not
    decide never fails the suite, as it never moves the gate's exit code: it is named informative, and a
    significant move of it passes with its direction in the message (an A/A gate that passed once showed 11 JUnit
    failures, all informative figures)."""
    if c["gated"]:
        return c["metric"], c["verdict"], c["reason"]
    moved = c["verdict"] in verdicts.MOVED
    return (f"{c['metric']} (informative)", verdicts.PASS if moved else c["verdict"],
            f"{verdicts.INFORMATIVE[c['verdict']]}: {c['reason']}" if moved else c["reason"])


def check_writable(path: Path, flag: str) -> None:
    """A file the gate writes at the end must be writable before anything is decided or run (else the
    verdict is printed and then lost in a traceback): not over or inside an input, not a FIFO, a device or a
    directory (store/outputs.py), in a writable directory."""
    outputs.check_file(path, flag)
    parent = next((p for p in path.absolute().parents if p.exists()), None)
    if parent is not None and not parent.is_dir():
        raise UserError(f"{flag} {path}: {parent} is not a directory")
    if parent is not None and not os.access(parent, os.W_OK):
        raise UserError(f"{flag} {path}: {parent} is not writable")


def check_decidable(repeat: int, alpha: float) -> None:
    """A gate that runs N vs N repeats whose exact permutation test can never reach p <= alpha can only say
    "undecided" (exit 125): refused before any run, with the repeat count that can decide."""
    if stats.smallest_p(repeat, repeat) > alpha:
        need = stats.least_repeats(alpha)
        raise UserError(f"gate --repeat {repeat}: {repeat} vs {repeat} runs can never be significant at alpha {alpha} "
                        f"(the smallest p of the exact permutation test is {stats.smallest_p(repeat, repeat):.3f}); "
                        f"use --repeat {need} or more, or --allow-undecided to run anyway")


def note_inputs(g: GateRequest) -> None:
    """What the gate reads, named before anything is written (store/outputs.py: nothing lands over or in them)."""
    for given in (g.reference, g.candidate, g.spec.ref if g.spec else None, g.limits, *g.options.patch_files):
        if given is not None and os.path.exists(given):
            outputs.note(given)


def gate(g: GateRequest) -> GateResult:
    """Decide pass / regression / undecided."""
    note_inputs(g)
    if g.junit_file is not None:
        check_writable(g.junit_file, "--junit")
    if g.run and g.limits is None and not g.allow_undecided:
        check_decidable(g.options.runs, g.alpha)
    spec = g.spec.with_(trim_at_end=True) if g.spec else None
    return _against_limits(g, spec) if g.limits is not None else _against_reference(g, spec)
