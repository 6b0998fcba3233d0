"""The command line: parses arguments and hands them to the library; nothing else lives here."""

from __future__ import annotations

import importlib
import sys
from typing import Any

import click

from . import __version__
from .errors import UserError, did_you_mean, one_line
from .run import lifeline
from .store import claim, outputs

# Every command, by the module under commands/ that defines it: a command's module is imported only when that
# command runs (or help lists them), so `rssprobe show` does not pay for matrix's or bisect's imports.
COMMANDS = ("bisect", "collect", "diff", "doctor", "env", "estimate", "gate", "matrix", "merge", "patches",
            "prepare", "report", "run", "scale", "show", "verdict")


class Group(click.Group):
    """Turns UserError, and click's usage errors, into one line on stderr and exit code 2, never a traceback.

    SIGTERM (CI cancel or time-out) takes Ctrl-C's path; the exit code is then 143, not 130. Commands load
    lazily (click's documented LazyGroup pattern).
    """

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *COMMANDS})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in COMMANDS and cmd_name not in self.commands:
            self.add_command(importlib.import_module(f".commands.{cmd_name}", __package__).command, cmd_name)
        return super().get_command(ctx, cmd_name)

    def resolve_command(self, ctx: click.Context, args: list[str]) -> Any:
        """click's, with "did you mean" for a mistyped command (`shwo` -> show)."""
        try:
            return super().resolve_command(ctx, args)
        except click.UsageError as e:
            name = args[0] if args else ""
            hint = did_you_mean(name, self.list_commands(ctx)) if name and not name.startswith("-") else ""
            if hint and self.get_command(ctx, name) is None:
                raise click.UsageError(f"No such command '{name}'{hint}.", ctx) from e
            raise

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """Each command with its whole first sentence (click cuts summaries at the terminal's width with '...')."""
        rows = []
        for name in self.list_commands(ctx):
            cmd = self.get_command(ctx, name)
            if cmd is not None and not cmd.hidden:
                rows.append((name, summary(cmd, name)))
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)

    def invoke(self, ctx: click.Context) -> Any:
        lifeline.handle_sigterm_like_ctrl_c()
        outputs.reset()  # a command's inputs are its own (store/outputs.py)
        ctx.meta["rssprobe.argv"] = list(ctx.args)  # the words as typed: where `--` stood (common_args.ARGV)
        try:
            return super().invoke(ctx)
        except UserError as e:
            click.echo(f"rssprobe: error: {e}", err=True)
            sys.exit(e.exit_code)
        except KeyboardInterrupt:
            if lifeline.terminated:
                sys.exit(lifeline.EXIT_TERMINATED)
            raise
        except SystemExit as e:
            sys.exit(lifeline.exit_code(e.code))
        except click.UsageError as e:
            sub = e.ctx.info_name if e.ctx is not None and e.ctx.parent is not None else None
            command = f"rssprobe {sub}" if sub else "rssprobe"
            click.echo(f"rssprobe: error: {one_line(e.format_message())} (see '{command} --help')", err=True)
            sys.exit(e.exit_code)
        finally:
            claim.release_all()  # the directories this command wrote are free again (store/claim.py)


# each command's one-line summary in `rssprobe --help`, whole (click cut 14 of 16 docstrings with "..."); at
# most SUMMARY_WIDTH characters, so that the list fits 80 columns (tests/test_pr_verdict.py)
SUMMARY_WIDTH = 66
SUMMARIES = {
    "bisect": "Find the version, patch part or commit that moved a figure.",
    "collect": "Read a run's events and write its tables and final status.",
    "diff": "Compare B against A: does B change host RAM, where, by how much.",
    "doctor": "Check which probes work on this machine.",
    "env": "Isolated environments (torch + DeepSpeed) for other versions.",
    "estimate": "Host RAM per rank and per node for a model on G GPUs.",
    "gate": "CI gate: pass / regression / undecided, exit 0 / 1 / 125.",
    "matrix": "Run a scenario over versions, patches and allocators.",
    "merge": "Join the directories of a campaign's shards into one.",
    "patches": "List interventions (--patch NAME) and patch sets.",
    "prepare": "Prepare a scenario for an external multi-node launch.",
    "report": "An HTML and markdown report of runs, with charts.",
    "run": "Run a scenario, a training script or your launch command.",
    "scale": "Run at several model sizes; fit bytes = fixed + slope x params.",
    "show": "Show a run, group, size sweep, matrix or plan.",
    "verdict": "Judge a plan's claims (B/param) against its runs.",
}


def summary(cmd: click.Command, name: str) -> str:
    """A command's one-line summary: SUMMARIES', else its short_help, else its help's first sentence."""
    if name in SUMMARIES:
        return SUMMARIES[name]
    if cmd.short_help:
        return cmd.short_help
    text = " ".join((cmd.help or "").split("\n\n")[0].split())
    end = text.find(". ")
    return text if end < 0 else text[: end + 1]


@click.group(cls=Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="rssprobe")
def main() -> None:
    """Host memory of DeepSpeed ZeRO training (stages 1-3, optimizer and parameters offloaded to the CPU), per
    parameter: how much a run holds and who owns it, whether a change moves it (diff, gate), how much a run
    nobody has made will need (estimate), and which release or commit changed it (bisect).

    \b
    Start with:
      rssprobe run --baseline --repeat 3 --trim-at-end --out runs/base
      rssprobe run --patched --repeat 3 --trim-at-end --out runs/pr8132
      rssprobe diff runs/base runs/pr8132
    """
