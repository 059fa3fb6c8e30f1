"""`logstat table` (being built: see the issue that owns it)."""

import click

from logstat.errors import LogstatError


@click.command()
def table() -> None:
    """Not built yet."""
    raise LogstatError("logstat table is not built yet")
