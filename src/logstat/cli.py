"""The `logstat` command line: a thin layer over the library.

Commands are registered here, once, by module path, and imported only when used, so that
`logstat --help` and `logstat parse` never import torch, deepspeed or altair.
"""

from __future__ import annotations

import importlib
import sys

import click

from logstat.errors import LogstatError

#: name -> "module:attribute" of every command; the one place a command is registered.
COMMANDS: dict[str, str] = {
    "parse": "logstat.commands.parse:parse",
    "table": "logstat.commands.table:table",
    "plot": "logstat.commands.plot:plot",
    "estimate": "logstat.commands.estimate:estimate",
    "run": "logstat.commands.run:run",
    "rerun": "logstat.commands.rerun:rerun",
    "sweep": "logstat.commands.sweep:sweep",
    "status": "logstat.commands.status:status",
    "cancel": "logstat.commands.status:cancel",
}


class LazyGroup(click.Group):
    """A group whose commands are imported on first use (keeps start-up light)."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        target = COMMANDS.get(cmd_name)
        if target is None:
            return None
        module_name, attribute = target.split(":")
        return getattr(importlib.import_module(module_name), attribute)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--debug", is_flag=True, help="Show the full traceback of an error.")
@click.version_option(package_name="logstat")
@click.pass_context
def cli(ctx: click.Context, debug: bool) -> None:
    """Launch LLM training jobs reproducibly and turn their logs into numbers.

    \b
    Examples:
      logstat parse logs/ --tflops
      logstat table logs/ > gpt2.md
      logstat run runners/specs/gpt2-52b-megatron-ds.toml --dry-run

    \b
    Exit status: 0 done (parse, table, plot: a log of a failed run is a row,
    not an error); 1 an error (one line on stderr); 2 a command line click
    refuses (an unknown option, a value of the wrong type); 130 interrupted
    (Ctrl-C; 143 a local run stopped by SIGTERM); run: the training's own
    exit status when it failed.
    """
    ctx.obj = {"debug": debug}


def main(argv: list[str] | None = None) -> None:
    """Console entry point: map library errors to one line on stderr and exit code 1."""
    args = sys.argv[1:] if argv is None else argv
    debug = "--debug" in args
    try:
        # Outside standalone mode click catches a command's Exit(code) and returns the code instead
        # of exiting with it: a failed run would exit 0 and make's `&&` chains would go on.
        code = cli.main(args=args, prog_name="logstat", standalone_mode=False)
        if isinstance(code, int) and code != 0:
            sys.exit(code)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except click.exceptions.NoArgsIsHelpError as exc:
        exc.show()  # a bare `logstat` asks what there is: the help as written, not one squeezed line
        sys.exit(exc.exit_code)
    except click.UsageError as exc:
        # One line like every other error (click's own form adds usage and a blank line).
        where = f" (see '{exc.ctx.command_path} --help')" if exc.ctx is not None else ""
        click.echo(f"Error: {' '.join(exc.format_message().split())}{where}", err=True)
        sys.exit(exc.exit_code)
    except click.ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code)
    except click.Abort:
        click.echo("Aborted.", err=True)
        sys.exit(130)
    except BrokenPipeError:
        sys.exit(0)
    except (LogstatError, OSError) as exc:
        if debug:
            raise
        click.echo(f"Error: {exc}", err=True)
        sys.exit(1)
    except Exception as exc:  # last resort: never a traceback for users unless asked
        if debug:
            raise
        if sys.stdout is None:  # started with its stdout closed (`>&-`): Python has none to write to
            click.echo("Error: stdout is closed: redirect it to a file, or give --output FILE", err=True)
            sys.exit(1)
        click.echo(f"Error: {type(exc).__name__}: {exc} (run with --debug for the traceback)", err=True)
        sys.exit(1)
