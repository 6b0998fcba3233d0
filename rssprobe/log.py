"""Progress notes for the user: one line on stderr, prefixed, so stdout stays the report."""

from __future__ import annotations

import click


def say(text: str) -> None:
    click.echo(f"rssprobe: {text}", err=True)
