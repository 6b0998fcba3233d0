"""The command line: parses arguments and hands them to the library; nothing else lives here."""

from __future__ import annotations

import importlib
import sys
from typing import Any

import click

from . import __version__
from .errors import UserError, one_line
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
