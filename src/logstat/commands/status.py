"""`logstat status` and `logstat cancel`: the Slurm jobs of run directories (logstat.runners.backends.slurm)."""

from __future__ import annotations

import json
from pathlib import Path

import click

from logstat.errors import LogstatError

COLUMNS = ("run_dir", "job_id", "state", "exit_code", "run_time", "reason", "source")


@click.command()
@click.argument("run_dirs", nargs=-1, type=click.Path(file_okay=False, path_type=Path))
@click.option(
    "--runs-root",
    default="runs",
    show_default=True,
    type=click.Path(file_okay=False, path_type=Path),
    help="Where to look for submitted runs when no RUN_DIR is named.",
)
@click.option(
    "--json", "as_json", is_flag=True, help="One JSON object per run (JSON Lines) instead of a table."
)
def status(run_dirs: tuple[Path, ...], runs_root: Path, as_json: bool) -> None:
    """Show the Slurm state of submitted runs: live from squeue/scontrol while Slurm knows the job,
    else the final state recorded in the run's manifest.json.

    With no RUN_DIR, every run under --runs-root whose manifest holds a Slurm job id.

    \b
    Example:
      logstat status runs/gpt2-tiny-ddp-powersgd/20260101T120000Z-1a2b3c
    """
    from logstat.runners.backends.slurm import find_run_dirs, run_status

    if not run_dirs:
        given = click.get_current_context().get_parameter_source("runs_root")
        if given == click.core.ParameterSource.COMMANDLINE and not runs_root.is_dir():
            # a mistyped --runs-root would otherwise read as "nothing submitted", exit 0
            raise LogstatError(f"--runs-root {runs_root}: no such directory")
        run_dirs = tuple(find_run_dirs(runs_root))
        if not run_dirs:
            click.echo(f"no runs submitted to Slurm under {runs_root}/", err=True)
            return
    rows, errors = [], []
    for run_dir in run_dirs:
        try:
            rows.append(run_status(run_dir).as_dict())
        except LogstatError as exc:
            errors.append(str(exc))
    if as_json:
        for row in rows:
            click.echo(json.dumps(row))
    elif rows:
        click.echo(_table(rows))
    for error in errors:
        click.echo(f"Error: {error}", err=True)
    if errors:
        raise SystemExit(1)


@click.command()
@click.argument("run_dir", type=click.Path(exists=True, file_okay=False, path_type=Path))
def cancel(run_dir: Path) -> None:
    """Cancel the Slurm job of RUN_DIR (scancel the job id in its manifest.json).

    \b
    Example:
      logstat cancel runs/gpt2-tiny-ddp-powersgd/20260101T120000Z-1a2b3c
    """
    from logstat.runners.backends.slurm import cancel_run

    job_id = cancel_run(run_dir)
    click.echo(f"scancel {job_id}: cancel requested for {run_dir}", err=True)


def _table(rows: list[dict]) -> str:
    """Aligned columns, ``-`` for unknown values."""
    cells = [[str(row[column]) if row[column] is not None else "-" for column in COLUMNS] for row in rows]
    header = [column.upper() for column in COLUMNS]
    widths = [max(len(line[i]) for line in [header, *cells]) for i in range(len(COLUMNS))]
    return "\n".join(
        "  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True)).rstrip()
        for line in [header, *cells]
    )
