"""`--help` teaches: every command shows examples that are real invocations of itself, every option says what it
does, and an option shared by several commands is declared once (commands/common_args.py), so it means the same
everywhere. Read through click itself (in-process): no test here starts a worker."""

from __future__ import annotations

import click
import pytest
from click.testing import CliRunner

from rssprobe.cli import COMMANDS, main

# options several commands take that are declared once in common_args: same name, same help everywhere (the
# matrix's --patch/--allocator are axes, a list of alternatives, and say so)
SHARED = ("--format", "--set", "--threshold", "--alpha", "--python", "--env", "--torch-alloc-conf", "--all",
          "--allocator", "--patch", "--repeat")
AXES = {("matrix", "--patch"), ("matrix", "--allocator"), ("patches", "--all")}


def commands() -> list[tuple[str, click.Command]]:
    ctx = click.Context(main)
    out = []
    for name in COMMANDS:
        cmd = main.get_command(ctx, name)
        assert cmd is not None
        out.append((name, cmd))
        if isinstance(cmd, click.Group):
            out += [(f"{name} {sub}", cmd.get_command(ctx, sub)) for sub in cmd.list_commands(ctx)]
    return out


@pytest.mark.parametrize("name", COMMANDS)
def test_every_command_shows_examples_of_itself(name: str) -> None:
    shown = CliRunner().invoke(main, [*name.split(), "--help"], terminal_width=120)
    assert shown.exit_code == 0, shown.output
    examples = shown.output.split("Examples:", 1)
    assert len(examples) == 2, f"rssprobe {name} --help has no examples"
    lines = [line.strip() for line in examples[1].splitlines() if line.strip()]
    assert lines and all(line.startswith(f"rssprobe {name}") for line in lines), lines


def test_every_option_has_help() -> None:
    missing = [f"{name} {p.opts[0]}" for name, cmd in commands() for p in cmd.params
               if isinstance(p, click.Option) and not p.hidden and not (p.help or "").strip()]
    assert not missing, f"options without help: {missing}"


# the part of a shared option's help that says what it is; the rest may say who applies it or what one
# configuration is in that command (--repeat: "per cell", "per probe and round")
MEANING = {"--patch": lambda h: h[h.index("an intervention or a set"):], "--repeat": lambda h: h.split(" (")[0],
           "--python": lambda h: h.split(":")[0].removesuffix("."),
           # estimate predicts under it what run/scale/gate/matrix give their worker: the same setting of torch's
           "--torch-alloc-conf": lambda h: h.split(" ")[0]}


def test_shared_options_mean_the_same_everywhere() -> None:
    seen: dict[str, dict[str, str]] = {}
    for name, cmd in commands():
        for p in cmd.params:
            if isinstance(p, click.Option) and p.opts[0] in SHARED and (name, p.opts[0]) not in AXES:
                seen.setdefault(p.opts[0], {})[name] = MEANING.get(p.opts[0], lambda h: h)(p.help or "")
    assert set(seen) == set(SHARED)
    for option, helps in seen.items():
        assert len(set(helps.values())) == 1, f"{option} means different things: {helps}"


def test_the_top_level_help_matches_the_readme() -> None:
    shown = CliRunner().invoke(main, ["--help"], terminal_width=120).output
    assert "stages 1-3" in shown and "rssprobe diff runs/base runs/pr8132" in shown
