"""`logstat parse` (being built: see the issue that owns it)."""

import click

from logstat.errors import LogstatError


@click.command()
def parse() -> None:
    """Not built yet."""
    raise LogstatError("logstat parse is not built yet")
