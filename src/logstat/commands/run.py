"""`logstat run` (being built: see the issue that owns it)."""

import click

from logstat.errors import LogstatError


@click.command()
def run() -> None:
    """Not built yet."""
    raise LogstatError("logstat run is not built yet")
