"""rssprobe env create|list|rm: isolated torch + DeepSpeed environments, and the options to use them.

`python_options` (--env/--python) and `pip_flags` (--find-links/--index-url) are shared by
the commands that start workers, so every one of them picks its interpreter the same way.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click

from .. import envs
from ..reporters import views
from .show import emit

F = Callable[..., Any]


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


def say(text: str) -> None:
    click.echo(f"rssprobe: {text}", err=True)


@click.group("env")
def command() -> None:
    """Isolated environments (torch + DeepSpeed) for runs on other versions."""


@command.command("create")
@click.argument("spec", nargs=-1, required=True)
@pip_flags
def create(spec: tuple[str, ...], find_links: tuple[str, ...], index_url: str | None) -> None:
    """Build (or reuse) the env for SPEC: torch==V plus deepspeed==V, deepspeed=PATH or deepspeed=PATH@REV."""
    env = envs.create(envs.EnvSpec.parse(spec), envs.pip_options(find_links, index_url), say)
    click.echo(env.name)
    say(f"python: {env.python}")


@command.command("list")
@click.option("--format", "fmt", type=click.Choice(["terminal", "markdown", "json", "csv"]), default="terminal")
def list_(fmt: str) -> None:
    """The environments built so far."""
    infos = [e.info() for e in envs.list_envs()]
    table = views.Table(f"Environments under {envs.envs_root()}", ["name", "torch", "deepspeed", "spec", "created"],
                        [[i["name"], i["versions"].get("torch"), i["versions"].get("deepspeed"), " ".join(i["spec"]),
                          i["created"]] for i in infos],
                        note="" if infos else "none yet: rssprobe env create torch==V deepspeed==V")
    emit(fmt, infos, [], [table], alarm=False)


@command.command("rm")
@click.argument("ref", metavar="NAME|SPEC")
def rm(ref: str) -> None:
    """Remove an environment."""
    env = envs.remove(ref)
    say(f"removed {env.path}")
