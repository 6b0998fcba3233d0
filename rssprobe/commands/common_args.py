"""Options shared by several commands, declared once (as asv's commands/common_args.py).

Each decorator adds its options; the parse helpers turn their raw values into what the
library takes, raising UserError (one line, exit 2) on bad input.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from ..analysis import stats
from ..config import sizes
from ..config.allocators import ALLOCATORS
from ..config.runoptions import RunOptions
from ..config.scenariospec import ScenarioSpec
from ..config.script import split_command
from ..contract.glibc import STEADY_MALLOC_ENV
from ..errors import UserError, did_you_mean
from ..reporters.output import FORMATS

F = Callable[..., Any]


def examples(*lines: str) -> str:
    """A command's epilog: its examples, kept line by line by click (the \\b marker)."""
    return "\b\nExamples:\n" + "\n".join(f"  {line}" for line in lines)


class FiniteRange(click.FloatRange):
    """A FloatRange that also refuses nan and infinities (nan passes every comparison unseen)."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        number = super().convert(value, param, ctx)
        if not math.isfinite(number):
            self.fail(f"{value!r} is not a finite number.", param, ctx)
        return number


class Parsed(click.ParamType):
    """A value read by one of config/sizes.py's parsers (the one parser of sizes), its ValueError as click's usage
    error (one line, exit 2)."""

    def __init__(self, name: str, parse: Callable[[str], Any]) -> None:
        self.name, self.parse = name, parse

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if not isinstance(value, str):
            return value
        try:
            return self.parse(value)
        except ValueError as e:
            self.fail(str(e), param, ctx)


def param_count() -> Parsed:
    """A parameter count as people write it: 7B, 1.3B, 350M, 70e9."""
    return Parsed("count", sizes.count)


def param_counts() -> Parsed:
    """A list of parameter counts: 1e8,200M,0.4B."""
    return Parsed("counts", sizes.counts)


def byte_size() -> Parsed:
    """An amount of memory: 512G, 1.5TiB, 2TB."""
    return Parsed("size", sizes.nbytes)


# The statistics options diff, gate and bisect share: a value out of range would change the
# verdict silently (a negative threshold makes every change a regression, alpha 0 nothing one).
THRESHOLD = FiniteRange(min=0)
ALPHA = FiniteRange(min=0, max=1, min_open=True, max_open=True)


def threshold_option(help: str = "Smallest change that counts, in bytes per parameter.") -> Callable[[F], F]:
    return click.option("--threshold", default=stats.THRESHOLD, show_default=True, type=THRESHOLD, help=help)


def alpha_option(help: str = "Significance level of the one-sided exact permutation test between the repeats."
                 ) -> Callable[[F], F]:
    return click.option("--alpha", default=stats.ALPHA, show_default=True, type=ALPHA, help=help)


def allocator_option(f: F) -> F:
    """--allocator NAME: the malloc a worker runs with (config/allocators.py owns the names)."""
    return click.option("--allocator", default="glibc", show_default=True, type=click.Choice(list(ALLOCATORS)),
                        help="The worker's malloc: glibc, or jemalloc / tcmalloc preloaded (Debian's "
                             + " / ".join(pkg for pkg, _lib in filter(None, ALLOCATORS.values())) + ").")(f)


def python_options(f: F) -> F:
    f = click.option("--python", "python", metavar="PATH",
                     help="The worker's Python (must have torch and deepspeed installed).")(f)
    return click.option("--env", "env_ref", metavar="SPEC|NAME",
                        help="Run in an isolated environment: a name from `rssprobe env list`, or a spec such as "
                             "'torch==2.13.0 deepspeed==0.19.8' (built on first use).")(f)


def pip_flags(f: F) -> F:
    f = click.option("--index-url", help="Passed to pip when an environment is built.")(f)
    return click.option("--find-links", "find_links", multiple=True, metavar="DIR",
                        help="Passed to pip when an environment is built (repeatable).")(f)


def pip_options(find_links: tuple[str, ...], index_url: str | None) -> tuple[str, ...]:
    """--find-links and --index-url as the pip arguments an environment is built with."""
    out: list[str] = []
    for d in find_links:
        out += ["--find-links", d]
    if index_url:
        out += ["--index-url", index_url]
    return tuple(out)


class Choice(click.Choice):
    """click's Choice with "did you mean" for a mistyped value (`--format md` -> markdown)."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        try:
            return super().convert(value, param, ctx)
        except click.BadParameter as e:
            hint = did_you_mean(str(value), [str(c) for c in self.choices])
            if not hint:
                raise
            self.fail(f"{e.message.rstrip('.')}{hint}", param, ctx)


def format_option(choices: list[str] | None = None) -> Callable[[F], F]:
    return click.option("--format", "fmt", type=Choice(choices or FORMATS), default="terminal",
                        show_default=True, help="Output format: the same answer and figures in each (markdown: "
                        "ready to paste into a GitHub review; json: every figure, for scripts).")


STEADY_HELP = ("glibc knob for every run (default " + " ".join(f"{k}={v}" for k, v in STEADY_MALLOC_ENV.items())
               + ": a fixed mmap threshold).")


def malloc_env_option(help: str = "glibc knob, e.g. MALLOC_ARENA_MAX=2 (repeatable).") -> Callable[[F], F]:
    return click.option("--malloc-env", multiple=True, metavar="NAME=VALUE", help=help)


def set_option(f: F) -> F:
    return click.option("--set", "overrides", multiple=True, metavar="KEY=VALUE",
                        help="Override a scenario field, e.g. --set zero.stage=3 (repeatable; a TOML value).")(f)


def scenario_sets(f: F) -> F:
    f = set_option(f)
    return click.option("--steps", type=int, help="Optimizer steps per run (a script: stop it after N).")(f)


def shard_option(f: F) -> F:
    return click.option("--shard", metavar="K/N", help="Run only the K-th of N shares of the campaign's groups (a "
                        "stable assignment: machines 1..N together run each group once); join the shards' "
                        "directories with `rssprobe merge`.")(f)


def alloc_conf_option(f: F) -> F:
    return click.option("--torch-alloc-conf", "torch_alloc_conf", metavar="KEY:VALUE,...",
                        help="PYTORCH_CUDA_ALLOC_CONF for the worker, e.g. pinned_max_round_threshold_mb:64 (checked "
                             "against the worker's torch before any run; stored in the manifest); shortcut for "
                             "--set torch_alloc_conf=...")(f)


def all_option(f: F) -> F:
    """--all: every table, not only the answer and the key figures (markdown folds them instead)."""
    return click.option("--all", "show_all", is_flag=True,
                        help="Show every table (by default: the answer, the key figures and what differs).")(f)


def repeat_option(default: int | None, each: str) -> Callable[[F], F]:
    """--repeat N: fresh worker processes of each configuration a command runs, the same meaning everywhere;
    `each` says what a configuration is for this command (and, with no fixed default, what the default is)."""
    return click.option("--repeat", default=default, show_default=default is not None, type=click.IntRange(1),
                        help=f"Fresh worker processes of each configuration ({each})"
                             + ("; 3 vs 3 is the least that can be significant at alpha 0.05." if default else "."))


def patch_option(who: str = "Apply") -> Callable[[F], F]:
    """--patch NAME[:OPTIONS]: an intervention or a set, applied together with the others given."""
    return click.option("--patch", "patches", multiple=True, metavar="NAME",
                        help=f"{who} an intervention or a set, e.g. pr8132 (repeatable: all are applied together; "
                             "`rssprobe patches` lists them).")


def fresh_option(f: F) -> F:
    return click.option("--fresh", is_flag=True, help="Start over: discard the runs a previous invocation left.")(f)


def pairs(values: tuple[str, ...], flag: str) -> dict[str, str]:
    out = {}
    for item in values:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise UserError(f"{flag} {item}: expected NAME=VALUE")
        out[key] = value
    return out


def run_options(*, patches: tuple[str, ...] = (), patch_files: tuple[Path, ...] = (), allocator: str = "glibc",
                malloc_env: tuple[str, ...] = (), malloc_default: dict[str, str] | None = None,
                repeat: int | None = 1, env_ref: str | None = None, python: str | None = None) -> RunOptions:
    """The run options as the command line gave them, in the one bundle every request carries (the glibc knobs
    checked here: a bad one is one line before anything runs)."""
    return RunOptions(patches=tuple(patches), patch_files=tuple(patch_files), allocator=allocator,
                      malloc_env=_knobs(malloc_env, malloc_default), repeat=repeat, env_ref=env_ref,
                      python=python)


def _knobs(values: tuple[str, ...], default: dict[str, str] | None = None) -> dict[str, str]:
    """--malloc-env NAME=VALUE pairs (glibc MALLOC_* knobs only); `default` when none is given."""
    env = pairs(values, "--malloc-env")
    bad = [k for k in env if not k.startswith("MALLOC_")]
    if bad:
        raise UserError(f"--malloc-env {bad[0]}: only glibc MALLOC_* knobs are accepted")
    for key, value in env.items():  # glibc reads every MALLOC_* knob as a number and ignores anything else
        if not value.strip().isdigit():
            raise UserError(f"--malloc-env {key}={value}: glibc takes a non-negative integer here")
    return env if values else dict(default or {})


def split(values: str | None) -> list[str]:
    """'a, b,c' -> ['a', 'b', 'c']."""
    return [v.strip() for v in (values or "").split(",") if v.strip()]


def configuration_options(f: F) -> F:
    """What one run configuration is, as `run` and `scale` take it: scenario fields, patches,
    allocator and glibc knobs, label, repeats and the worker's Python."""
    for option in reversed([
        click.option("--world-size", type=int,
                     help="Ranks on this machine (torchrun); shortcut for --set world_size=N."),
        click.option("--baseline", is_flag=True, help="Apply no patch (the default)."),
        click.option("--patched", is_flag=True, help="Apply the scenario's declared patch set (default pr8132)."),
        patch_option(),
        click.option("--patch-file", "patch_files", multiple=True, type=click.Path(path_type=Path),
                     help="Unified diff against the installed deepspeed/torch, applied to an overlay (repeatable)."),
        allocator_option,
        malloc_env_option(),
        click.option("--label", help="Name the run (default: baseline, patched or the patch names)."),
        repeat_option(1, "stored as one run group"),
    ]):
        f = option(f)
    return python_options(scenario_sets(alloc_conf_option(f)))


def script_options(f: F) -> F:
    """--script PATH, and the script's arguments after `--` (the command's positional arguments)."""
    f = click.argument("args", nargs=-1, type=click.UNPROCESSED, metavar="[SCENARIO] [-- SCRIPT_ARGS...]")(f)
    return click.option("--script", type=click.Path(path_type=Path, dir_okay=True, exists=False), metavar="PATH",
                        help="Run a DeepSpeed training script instead of a scenario (its arguments after --).")(f)


ARGV = "rssprobe.argv"  # the context's record of the command's words as typed (cli.Group.invoke sets it)


def _typed() -> list[str] | None:
    """The command's words as typed (where `--` stood), from the context; None in a library call."""
    ctx = click.get_current_context(silent=True)
    return ctx.meta.get(ARGV) if ctx is not None else None


def _before_dash(args: tuple[str, ...], argv: list[str] | None) -> list[str]:
    """The positional words given before `--` (click joins both sides into one tuple); none when the command
    line is not known (a library call)."""
    if argv is None:
        return []
    after = len(argv) - argv.index("--") - 1 if "--" in argv else 0
    return list(args[: max(len(args) - after, 0)])


def launch_command(args: tuple[str, ...], script: Path | None, argv: list[str]) -> list[str] | None:
    """The user's own launch command (`rssprobe run -- deepspeed --num_gpus 2 train.py ARGS`): the words after a
    `--` that nothing but options stands before, when the first is not itself a .py script; else None."""
    if script is not None or "--" not in argv or not args:
        return None
    after = argv[argv.index("--") + 1:]
    if list(after) != list(args) or after[0].endswith(".py"):
        return None  # [SCENARIO] -- ..., or train.py -- ARGS: not a launcher's command line
    return list(after)


def scenario_spec(args: tuple[str, ...], script: Path | None, overrides: tuple[str, ...] = (),
                  default: str | None = "default", argv: list[str] | None = None, launcher: bool = False,
                  **options: Any) -> ScenarioSpec | None:
    """The ScenarioSpec of [SCENARIO] or --script PATH [-- ARGS], the --set words and the typed `options`
    (config/scenariospec.py: steps, world_size, torch_alloc_conf, trim_at_end; None: not given); None when no
    scenario is named and there is no default. A script is a scenario reference ending in .py whose arguments
    are the spec's script_args. With `launcher` (run), `-- LAUNCHER ... train.py ARGS` is the user's own launch command
    (script_command). A word before `--` beside a script is refused: it would silently become the script's first
    argument. `argv`: the words as typed, where a library call knows them (else the context's, which
    cli.Group.invoke records)."""
    ref, script_args, command = _scenario_or_script(args, script, default, argv, launcher)
    if ref is None:
        return None
    return ScenarioSpec(ref, tuple(overrides), script_args=script_args, script_command=command,
                        **{k: v for k, v in options.items() if v is not None and v is not False})


def _scenario_or_script(args: tuple[str, ...], script: Path | None, default: str | None, argv: list[str] | None,
                        launcher: bool) -> tuple[str | None, tuple[str, ...] | None, tuple[str, ...] | None]:
    """(scenario reference, the script's arguments, the user's launch command) of the words given."""
    argv = argv if argv is not None else _typed()
    command = launch_command(args, script, argv) if launcher and argv is not None else None
    if command is not None:
        path, script_args = split_command(command)
        return path, tuple(script_args), tuple(command)
    before = _before_dash(args, argv)
    if script is None and args and args[0].endswith(".py"):  # rssprobe run train.py -- ARGS: the same
        script, args, before = Path(args[0]), args[1:], before[1:]
    if script is not None and before:
        what = "a scenario" if len(before) == 1 and not before[0].startswith("-") else "words"
        raise UserError(f"{' '.join(before)!r} beside the script {script}: {what} before `--` (a script is its own "
                        "scenario; its arguments follow `--`: rssprobe run --script PATH -- ARGS)")
    if script is not None:
        ref = str(script)
        if not ref.endswith(".py"):
            raise UserError(f"--script {script}: a training script is a .py file")
        return ref, tuple(args) if args else None, None
    if len(args) > 1:
        raise UserError(f"unexpected arguments {' '.join(args[1:])!r}: a script's arguments follow "
                        "--script PATH --")
    return (args[0] if args else default), None, None


def allow_different_scripts_option(f: F) -> F:
    """--allow-different-scripts (diff, gate): compare script runs of another path or a changed file."""
    return click.option("--allow-different-scripts", is_flag=True,
                        help="Compare script runs of two different scripts (another path, or the file changed).")(f)
