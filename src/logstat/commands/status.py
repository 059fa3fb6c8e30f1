"""`logstat status` and `logstat cancel`: the state of run directories, their Slurm jobs or local launches
(logstat.runners.backends.slurm, .local)."""

from __future__ import annotations

import json
from pathlib import Path

import click

from logstat.errors import LogstatError

COLUMNS = ("run_dir", "job_id", "state", "exit_code", "run_time", "reason", "source")
#: A sweep's points: its array task, the swept values, the job (array id_task) and its state.
SWEEP_COLUMNS = ("point", "task", "settings", "job_id", "state", "exit_code", "run_time", "reason", "source")


@click.command()
@click.argument("run_dirs", nargs=-1, type=click.Path(file_okay=False, path_type=Path))
@click.option(
    "--runs-root",
    default="runs",
    show_default=True,
    type=click.Path(file_okay=False, path_type=Path),
    help="Where to look for launched runs when no RUN_DIR is named.",
)
@click.option(
    "--json", "as_json", is_flag=True, help="One JSON object per run (JSON Lines) instead of a table."
)
def status(run_dirs: tuple[Path, ...], runs_root: Path, as_json: bool) -> None:
    """Show the state of launched runs: a Slurm run's live from squeue/scontrol while Slurm knows the
    job, else the final state recorded in the run's manifest.json; a local run's as its manifest
    records it, or RUNNING while its launcher runs on this host.

    A sweep directory (logstat sweep) shows each of its points: pruned ones with their rule,
    launched ones with their array task's state. With no RUN_DIR, every run under --runs-root
    whose manifest holds a Slurm job id or a local launch, and every sweep that launched points.

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
        from logstat.runners.sweep import find_sweep_dirs

        run_dirs = (*find_run_dirs(runs_root), *find_sweep_dirs(runs_root))
        if not run_dirs:
            click.echo(f"no launched runs under {runs_root}/", err=True)
            return
    from logstat.runners.sweep import is_sweep_dir, sweep_status

    rows, sweep_rows, errors = [], [], []
    for run_dir in run_dirs:
        try:
            if is_sweep_dir(run_dir):
                sweep_rows += [{"sweep": str(run_dir), **s.as_dict()} for s in sweep_status(run_dir)]
            else:
                rows.append(run_status(run_dir).as_dict())
        except LogstatError as exc:
            errors.append(str(exc))
    if as_json:
        for row in [*rows, *sweep_rows]:
            click.echo(json.dumps(row))
    else:
        if rows:
            click.echo(_table(rows, COLUMNS))
        if sweep_rows:
            click.echo(_table(sweep_rows, SWEEP_COLUMNS))
    for error in errors:
        click.echo(f"Error: {error}", err=True)
    if errors:
        raise SystemExit(1)


@click.command()
@click.argument("run_dir", type=click.Path(exists=True, file_okay=False, path_type=Path))
def cancel(run_dir: Path) -> None:
    """Cancel the Slurm job of RUN_DIR (scancel the job id in its manifest.json), or every
    point of a sweep directory (scancel its job array).

    \b
    Example:
      logstat cancel runs/gpt2-tiny-ddp-powersgd/20260101T120000Z-1a2b3c
    """
    from logstat.runners.backends.slurm import cancel_run
    from logstat.runners.sweep import cancel_sweep, is_sweep_dir

    if is_sweep_dir(run_dir):
        for job_id in cancel_sweep(run_dir):
            click.echo(f"scancel {job_id}: cancel requested for the job array of {run_dir}", err=True)
        return
    job_id = cancel_run(run_dir)
    click.echo(f"scancel {job_id}: cancel requested for {run_dir}", err=True)


def _table(rows: list[dict], columns: tuple[str, ...]) -> str:
    """Aligned columns, ``-`` for unknown values."""
    cells = [[str(row[column]) if row[column] is not None else "-" for column in columns] for row in rows]
    header = [column.upper() for column in columns]
    widths = [max(len(line[i]) for line in [header, *cells]) for i in range(len(columns))]
    return "\n".join(
        "  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True)).rstrip()
        for line in [header, *cells]
    )
