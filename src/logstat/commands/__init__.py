"""The `logstat` subcommands, one module each (registered in logstat.cli.COMMANDS)."""

import click


def given(name: str) -> bool:
    """Whether the user typed option ``name`` (not just its default)."""
    source = click.get_current_context().get_parameter_source(name)
    return source == click.core.ParameterSource.COMMANDLINE
