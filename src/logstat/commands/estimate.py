"""`logstat estimate` (being built: see the issue that owns it)."""

import click

from logstat.errors import LogstatError


@click.command()
def estimate() -> None:
    """Not built yet."""
    raise LogstatError("logstat estimate is not built yet")
