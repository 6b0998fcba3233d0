"""rssprobe env create|list|rm: isolated torch + DeepSpeed environments."""

from __future__ import annotations

import click

from ..log import say
from ..reporters import output
from ..reporters.table import Table
from ..reporters.view import View
from ..workflows import envs
from . import common_args
from .common_args import format_option, pip_flags


@click.group("env", epilog=common_args.examples(
    "rssprobe env create torch==2.14.1 deepspeed==0.18.2",
    "rssprobe env list",
    "rssprobe env rm NAME"))
def command() -> None:
    """Isolated environments (torch + DeepSpeed) for runs on other versions."""


@command.command("create")
@click.argument("spec", nargs=-1, required=True)
@pip_flags
def create(spec: tuple[str, ...], find_links: tuple[str, ...], index_url: str | None) -> None:
    """Build (or reuse) the env for SPEC: torch==V plus deepspeed==V, deepspeed=PATH or deepspeed=PATH@REV."""
    env = envs.create(spec, common_args.pip_options(find_links, index_url))
    click.echo(env.name)
    say(f"python: {env.python}")


@command.command("list")
@format_option()
def list_(fmt: str) -> None:
    """The environments built so far."""
    root, infos = envs.listed()
    table = Table(f"Environments under {root}", ["name", "torch", "deepspeed", "spec", "created"],
                        [[i["name"], i["versions"].get("torch"), i["versions"].get("deepspeed"), " ".join(i["spec"]),
                          i["created"]] for i in infos],
                        note="" if infos else "none yet: rssprobe env create torch==V deepspeed==V")
    output.render(fmt, View(infos, tables=[table]))


@command.command("rm")
@click.argument("ref", metavar="NAME|SPEC")
def rm(ref: str) -> None:
    """Remove an environment."""
    say(f"removed {envs.remove(ref)}")
