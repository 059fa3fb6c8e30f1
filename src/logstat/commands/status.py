"""`logstat status` and `logstat cancel` (being built: see the Slurm issue)."""

import click

from logstat.errors import LogstatError


@click.command()
def status() -> None:
    """Not built yet."""
    raise LogstatError("logstat status is not built yet")


@click.command()
def cancel() -> None:
    """Not built yet."""
    raise LogstatError("logstat cancel is not built yet")
