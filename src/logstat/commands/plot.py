"""`logstat plot` (being built: see the issue that owns it)."""

import click

from logstat.errors import LogstatError


@click.command()
def plot() -> None:
    """Not built yet."""
    raise LogstatError("logstat plot is not built yet")
