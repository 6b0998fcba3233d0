"""rssprobe gate: a noise-aware CI regression gate with `git bisect run` exit codes.

  gate --reference REF --candidate CAND          compare stored runs or groups
  gate SCENARIO --run [--patch ...|--patched]    run baseline and candidate groups, then compare
  gate SCENARIO --limits LIMITS.toml             run a group, check absolute ceilings (B/param)
Exit: 0 pass, 1 regression, 125 undecided, 2 usage error.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import click

from .. import interleave, launcher, patchset, scenario
from ..analysis import stats
from ..analysis.compare import GATED, Side, compare
from ..analysis.gate import EXIT, check_limits, load_limits
from ..errors import UserError
from ..reporters import diffviews, junit, markdown, views
from .diff import render
from .run import execute, execute_group, pairs
from .show import emit


def _group(scen: scenario.Scenario, ref: str, label: str, specs: list[str], repeat: int,
           malloc_env: dict[str, str], patch_files: tuple[Path, ...] = ()) -> Side:
    req = launcher.RunRequest(scenario=scen, scenario_ref=ref, label=label, patches=specs, malloc_env=malloc_env,
                              patch_files=list(patch_files))
    group, _statuses = execute_group(req, repeat, show=False)
    return Side.load(str(group.path))


def _interleaved(scen: scenario.Scenario, ref: str, sides: list[tuple[str, list[str], tuple[Path, ...]]],
                 repeat: int, malloc_env: dict[str, str]) -> list[Side]:
    """The sides' run groups measured alternately, run by run (drift must not pass for a difference)."""
    reqs = [launcher.RunRequest(scenario=scen, scenario_ref=ref, label=label, patches=specs, malloc_env=malloc_env,
                                patch_files=list(files)) for label, specs, files in sides]
    done = interleave.run_groups(reqs, repeat, lambda req, title: execute(req, show=False, title=title))
    return [Side.load(str(group.path)) for group, _statuses in done]


def _publish(markdown_text: str) -> None:
    summary = os.environ.get("GITHUB_STEP_SUMMARY")
    if summary:
        with open(summary, "a") as f:
            f.write(markdown_text + "\n")


@click.command("gate")
@click.argument("scenario_ref", metavar="[SCENARIO]", required=False)
@click.option("--scenario", "scenario_opt", metavar="SCENARIO", help="Same as the SCENARIO argument.")
@click.option("--reference", help="Reference run or group (path, id, 'latest').")
@click.option("--candidate", help="Candidate run or group.")
@click.option("--run", "do_run", is_flag=True, help="Run SCENARIO baseline (reference) and candidate groups.")
@click.option("--limits", type=click.Path(path_type=Path), help="TOML of ceilings: [limits] 'steady.rss' = 30.0")
@click.option("--repeat", default=3, show_default=True, type=click.IntRange(1), help="Runs per side with --run.")
@click.option("--patched", is_flag=True, help="Candidate applies the scenario's patch set (default with --run).")
@click.option("--patch", "patches", multiple=True, metavar="NAME", help="Candidate applies these interventions.")
@click.option("--patch-file", "patch_files", multiple=True, type=click.Path(path_type=Path),
              help="Candidate applies this unified diff in an overlay (repeatable).")
@click.option("--set", "overrides", multiple=True, metavar="KEY=VALUE", help="Override a scenario field.")
@click.option("--malloc-env", multiple=True, metavar="NAME=VALUE", help="glibc knob for the runs gate starts.")
@click.option("--metric", "metrics", multiple=True, metavar="PATTERN",
              help=f"Figures that decide (glob; default {', '.join(GATED)}).")
@click.option("--threshold", default=stats.THRESHOLD, show_default=True, type=float)
@click.option("--alpha", default=stats.ALPHA, show_default=True, type=float)
@click.option("--junit", "junit_file", type=click.Path(path_type=Path), help="Write JUnit XML here.")
@click.option("--format", "fmt", type=click.Choice(["terminal", "markdown", "json"]), default="terminal")
@click.option("--force", is_flag=True, help="Compare runs of different scenarios.")
def command(scenario_ref: str | None, scenario_opt: str | None, reference: str | None, candidate: str | None,
            do_run: bool, limits: Path | None, repeat: int, patched: bool, patches: tuple[str, ...],
            patch_files: tuple[Path, ...], overrides: tuple[str, ...],
            malloc_env: tuple[str, ...], metrics: tuple[str, ...], threshold: float, alpha: float,
            junit_file: Path | None, fmt: str, force: bool) -> None:
    """Decide pass / regression / undecided; exit 0 / 1 / 125."""
    if scenario_opt and scenario_ref and scenario_opt != scenario_ref:
        raise UserError(f"gate: two scenarios given ({scenario_ref}, {scenario_opt})")
    scenario_ref = scenario_ref or scenario_opt
    env = pairs(malloc_env, "--malloc-env")
    # runs started by the gate end with malloc_trim(0): RSS after it is a low-noise figure
    sets = [*overrides, "probes.trim_at_end=true"]
    if limits is not None:
        ceilings = load_limits(limits)
        if candidate:
            side = Side.load(candidate)
        elif scenario_ref:
            scen = scenario.load(scenario_ref, sets)
            label, specs = patchset.resolve(scen, not (patched or patches), patched, list(patches))
            side = _group(scen, scenario_ref, label, specs, repeat, env, patch_files)
        else:
            raise UserError("gate --limits needs a SCENARIO to run or a --candidate run")
        verdict, checks, problems = check_limits(side, ceilings)
        table = views.Table(f"Ceilings from {limits} (bytes per parameter)", ["figure", "limit", "values", "verdict"],
                            [[c.metric, f"{c.limit:.2f}", ", ".join(f"{v:.2f}" for v in c.values) or "n/a",
                              c.verdict] for c in checks])
        lines = [f"gate {side.name} against {limits}: verdict {verdict.upper()}", *[f"WARNING: {p}" for p in problems]]
        data = {"verdict": verdict, "problems": problems, "checks": [c.as_dict() for c in checks]}
        emit(fmt, data, lines, [table], alarm=verdict != "pass")
        _publish(markdown.render(lines, [table]))
        cases = [(c.metric, c.verdict, c.reason) for c in checks]
    else:
        if reference and candidate:
            a, b = Side.load(reference), Side.load(candidate)
        elif do_run and scenario_ref:
            scen = scenario.load(scenario_ref, sets)
            use_set = patched or not (patches or patch_files)  # default candidate: the scenario's patch set
            label, specs = patchset.resolve(scen, False, use_set, list(patches))
            if patch_files:
                label = "+".join([*([label] if specs else []), *(p.stem for p in patch_files)])
            a, b = _interleaved(scen, scenario_ref, [("baseline", [], ()), (label, specs, patch_files)], repeat, env)
        else:
            raise UserError("gate needs --reference and --candidate, or SCENARIO --run, or --limits FILE")
        result = compare(a, b, threshold, alpha, force, tuple(metrics) or GATED).as_dict()
        render(result, fmt)
        verdict = result["verdict"]
        _publish(diffviews.verdict_paragraph(result) + "\n\n"
                 + markdown.render(diffviews.header_lines(result), diffviews.tables(result)))
        cases = [(c["metric"], c["verdict"], c["reason"]) for group in result["comparisons"].values() for c in group]
        cases += [(f"problem {i + 1}", "undecided", p) for i, p in enumerate(result["problems"])]
    if junit_file:
        junit.write(junit_file, "rssprobe.gate", cases)
    sys.exit(EXIT[verdict])
