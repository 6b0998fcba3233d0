"""rssprobe gate: a noise-aware CI regression gate with `git bisect run` exit codes.

  gate --reference REF --candidate CAND          compare stored runs or groups
  gate SCENARIO --run [--patch ...|--patched]    run baseline and candidate groups, then compare
  gate SCENARIO --limits LIMITS.toml             run a group, check absolute ceilings (B/param)
Exit: 0 pass, 1 regression, 125 undecided (or "~"), 2 usage error (rssprobe.verdicts).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path

import click

from ..analysis.metrics import GATED
from ..errors import UserError
from ..reporters import gate as published
from ..reporters import junit
from ..store import outputs
from ..workflows import gate
from . import common_args
from .common_args import format_option, malloc_env_option


@click.command("gate", epilog=common_args.examples(
    "rssprobe gate default --run --repeat 3 --patch-file pr.diff --junit gate.xml",
    "rssprobe gate --reference runs/base --candidate runs/pr8132",
    "rssprobe gate default --limits docs/limits-example.toml"))
@common_args.script_options
@click.option("--scenario", "scenario_opt", metavar="SCENARIO", help="Same as the SCENARIO argument.")
@click.option("--reference", help="Reference run or group (path, id, 'latest').")
@click.option("--candidate", help="Candidate run or group.")
@click.option("--run", "do_run", is_flag=True, help="Run SCENARIO baseline (reference) and candidate groups.")
@click.option("--limits", type=click.Path(path_type=Path), help="TOML of ceilings: [limits] 'steady.rss' = 30.0")
@common_args.repeat_option(3, "per side with --run")
@click.option("--allow-undecided", is_flag=True,
              help="Run even when --repeat cannot reach significance at --alpha (the verdict can only be undecided).")
@click.option("--patched", is_flag=True, help="Candidate applies the scenario's patch set (default with --run).")
@common_args.patch_option("The candidate applies")
@click.option("--patch-file", "patch_files", multiple=True, type=click.Path(path_type=Path),
              help="Candidate applies this unified diff in an overlay (repeatable).")
@common_args.set_option
@malloc_env_option("glibc knob for the runs gate starts.")
@common_args.alloc_conf_option
@click.option("--metric", "metrics", multiple=True, metavar="PATTERN",
              help=f"Figures that decide (glob; default {', '.join(GATED)}).")
@common_args.threshold_option()
@common_args.alpha_option()
@click.option("--junit", "junit_file", type=click.Path(path_type=Path), help="Write JUnit XML here.")
@format_option(["terminal", "markdown", "json"])
@common_args.all_option
@click.option("--force", is_flag=True, help="Compare runs of different scenarios.")
@common_args.allow_different_scripts_option
def command(args: tuple[str, ...], script: Path | None, scenario_opt: str | None, reference: str | None,
            candidate: str | None, do_run: bool, limits: Path | None, repeat: int, patched: bool,
            patches: tuple[str, ...], patch_files: tuple[Path, ...], overrides: tuple[str, ...],
            malloc_env: tuple[str, ...], metrics: tuple[str, ...], threshold: float, alpha: float,
            junit_file: Path | None, fmt: str, force: bool, allow_different_scripts: bool,
            torch_alloc_conf: str | None, allow_undecided: bool, show_all: bool) -> None:
    """Decide pass / regression / undecided; exit 0 / 1 / 125 (SCENARIO may be --script PATH -- ARGS)."""
    spec = common_args.scenario_spec(args, script, overrides, default=scenario_opt,
                                     torch_alloc_conf=torch_alloc_conf)
    if scenario_opt and spec and scenario_opt != spec.ref:
        raise UserError(f"gate: two scenarios given ({spec.ref}, {scenario_opt})")
    result = gate.gate(gate.GateRequest(
        spec=spec, reference=reference, candidate=candidate, run=do_run,
        limits=limits, patched=patched, metrics=metrics,
        options=common_args.run_options(patches=patches, patch_files=patch_files, malloc_env=malloc_env, repeat=repeat),
        threshold=threshold, alpha=alpha, junit_file=junit_file, force=force,
        allow_different_scripts=allow_different_scripts, allow_undecided=allow_undecided))
    summary = published.show(result.kind, result.data, fmt, show_all)
    publish(summary, result.cases, junit_file)
    sys.exit(result.exit_code)


def _optional(write: Callable[[], None]) -> None:
    """An optional output: one that cannot be written (refused by store/outputs.py: over or inside an input, a
    FIFO, a device, a directory; or the system's error: a full disk) is one warning line; the verdict's exit
    code stands (a PASS that ended in a traceback would read as a regression to CI and to `git bisect run`)."""
    try:
        write()
    except UserError as e:
        click.echo(f"rssprobe: warning: {e}; not written: the verdict and its exit code stand", err=True)


def publish(summary: str, cases: list[tuple[str, str, str]], junit_file: Path | None) -> None:
    """The markdown verdict appended to $GITHUB_STEP_SUMMARY when that is set (GitHub Actions' job summary), and
    the JUnit file (--junit, checked before the gate decided anything: workflows/gate.check_writable)."""
    target = os.environ.get("GITHUB_STEP_SUMMARY")
    if target:
        _optional(lambda: outputs.append_file(Path(target), summary + "\n", "$GITHUB_STEP_SUMMARY"))
    if junit_file:
        _optional(lambda: outputs.write_file(junit_file, junit.render("rssprobe.gate", cases), "--junit"))
