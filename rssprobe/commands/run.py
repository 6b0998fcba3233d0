"""rssprobe run: one real ZeRO-2 CPU-offload training process, probed step by step."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import click

from .. import envs, launcher, patchset, scenario, storage
from ..errors import UserError
from .env import python_options, say
from .show import print_summary


def pairs(values: tuple[str, ...], flag: str) -> dict[str, str]:
    out = {}
    for item in values:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise UserError(f"{flag} {item}: expected NAME=VALUE")
        out[key] = value
    return out


@click.command("run")
@click.argument("scenario_ref", metavar="[SCENARIO]", default="default")
@click.option("--steps", type=int, help="Shortcut for --set steps=N.")
@click.option("--world-size", type=int, help="Ranks on this machine (torchrun); shortcut for --set world_size=N.")
@click.option("--set", "overrides", multiple=True, metavar="KEY=VALUE", help="Override a scenario field.")
@click.option("--out", type=click.Path(path_type=Path), help="Run directory (default reports/runs/<time>-...).")
@click.option("--baseline", is_flag=True, help="Apply no patch (the default).")
@click.option("--patched", is_flag=True, help="Apply the scenario's declared patch set (default pr8132).")
@click.option("--patch", "patches", multiple=True, metavar="NAME", help="Apply an intervention (repeatable).")
@click.option("--patch-file", "patch_files", multiple=True, type=click.Path(path_type=Path),
              help="Unified diff against the installed deepspeed/torch, applied to an overlay (repeatable).")
@click.option("--allocator", default="glibc", type=click.Choice(["glibc", "jemalloc", "tcmalloc"]))
@click.option("--malloc-env", multiple=True, metavar="NAME=VALUE", help="glibc knob, e.g. MALLOC_ARENA_MAX=2.")
@click.option("--trim-at-end", is_flag=True, help="malloc_trim(0) after the final census; record what it frees.")
@click.option("--label", help="Name the run (default: baseline, patched or the patch names).")
@click.option("--memray", "use_memray", is_flag=True,
              help="Also capture native stacks with memray, per phase (costs time and RSS of its own).")
@click.option("--repeat", default=1, show_default=True, type=click.IntRange(1),
              help="N fresh worker processes of the same configuration, stored as one run group.")
@python_options
def command(scenario_ref: str, steps: int | None, world_size: int | None, overrides: tuple[str, ...],
            out: Path | None, baseline: bool, patched: bool, patches: tuple[str, ...], patch_files: tuple[Path, ...],
            allocator: str,
            malloc_env: tuple[str, ...], trim_at_end: bool, label: str | None, use_memray: bool, repeat: int,
            env_ref: str | None, python: str | None) -> None:
    """Run SCENARIO (a .toml file or a packaged name; default: default) in a fresh worker."""
    sets = list(overrides) + ([f"steps={steps}"] if steps is not None else [])
    sets += [f"world_size={world_size}"] if world_size is not None else []
    sets += ["probes.trim_at_end=true"] if trim_at_end else []
    req = build_request(scenario_ref, sets, baseline, patched, patches, patch_files, allocator, malloc_env, label,
                        env_ref, python, memray=use_memray, out=out)
    if repeat == 1:
        sys.exit(exit_code(execute(req).status))
    _group, statuses = execute_group(req, repeat)
    sys.exit(max(exit_code(s) for s in statuses))


def build_request(scenario_ref: str, sets: list[str], baseline: bool, patched: bool, patches: tuple[str, ...],
                  patch_files: tuple[Path, ...], allocator: str, malloc_env: tuple[str, ...], label: str | None,
                  env_ref: str | None, python: str | None, memray: bool = False,
                  out: Path | None = None) -> launcher.RunRequest:
    """The run request `run` (and `scale`) make of their options; bad input is a UserError."""
    scen = scenario.load(scenario_ref, sets)
    patch_label, specs = patchset.resolve(scen, baseline, patched, list(patches))
    if patch_files:
        if baseline:
            raise UserError("--baseline applies nothing; it cannot be combined with --patch-file")
        names = "+".join(p.stem for p in patch_files)
        patch_label = names if patch_label == "baseline" else f"{patch_label}+{names}"
    env = pairs(malloc_env, "--malloc-env")
    bad = [k for k in env if not k.startswith("MALLOC_")]
    if bad:
        raise UserError(f"--malloc-env {bad[0]}: only glibc MALLOC_* knobs are accepted")
    worker_python, env_name = envs.resolve_python(env_ref, python, log=say)
    argv = [*sys.argv, "--env", env_name] if env_name and env_name not in sys.argv else list(sys.argv)
    return launcher.RunRequest(scenario=scen, scenario_ref=scenario_ref, label=label or patch_label, patches=specs,
                               allocator=allocator, malloc_env=env, out=out, patch_files=list(patch_files),
                               memray=memray, python=worker_python, command=argv)


def execute(req: launcher.RunRequest, show: bool = True, title: str = "") -> launcher.RunResult:
    """Run with a progress bar, then print the summary."""
    from ..progress import RunProgress

    prepared = launcher.prepare(req)
    with RunProgress(req.scenario.steps, title or f"{req.scenario.name} [{req.label}]",
                     ranks=req.scenario.world_size) as progress:
        result = launcher.run(prepared, progress)
    if show:
        print_summary(result.run, "terminal")
        click.echo(f"run directory: {result.run.path}", err=True)
    return result


def execute_group(req: launcher.RunRequest, repeat: int, show: bool = True,
                  title: str = "") -> tuple[storage.GroupDir, list[str]]:
    """N fresh runs of one configuration into a group directory; stops early on Ctrl-C."""
    group = storage.GroupDir.create(req.out, req.scenario.name, req.label, repeat)
    statuses = []
    for i in range(1, repeat + 1):
        run_title = f"{title or f'{req.scenario.name} [{req.label}]'} {i}/{repeat}"
        result = execute(dataclasses.replace(req, out=group.member(i)), show=False, title=run_title)
        statuses.append(result.status)
        if result.status == "interrupted":
            break
    if show:
        print_summary(group, "terminal")
        click.echo(f"group directory: {group.path}", err=True)
    return group, statuses


def exit_code(status: str) -> int:
    return {"ok": 0, "interrupted": 130}.get(status, 1)
