"""`logstat table`: the seed's markdown tables from logs, or `--update` of an existing document."""

from pathlib import Path

import click

from logstat.commands import given
from logstat.errors import LogstatError
from logstat.parsers.registry import FAMILY_CHOICES


@click.command()
@click.argument("paths", nargs=-1, type=click.Path(readable=False, path_type=Path))
@click.option(
    "--update",
    "update_file",
    type=click.Path(path_type=Path, dir_okay=False),
    help="Recompute the TFlops column of every table of this markdown file in place (no PATHS).",
)
@click.option("--columns", help="Comma-separated columns, e.g. 'GPUs,Size,Throughput,TFlops,MFU,Notes'.")
@click.option(
    "--family", help=f"Read every log as this family instead of detecting it: {', '.join(FAMILY_CHOICES)}."
)
@click.option(
    "--warmup", type=int, default=1, show_default=True, help="Leading iterations left out of the median."
)
@click.option("--dry-run", is_flag=True, help="With --update: report the changes, write nothing.")
@click.option(
    "--checkpointing/--no-checkpointing",
    default=True,
    show_default=True,
    help="With --update: the seed formula's factor 4 (activation checkpointing) or 3.",
)
def table(
    paths: tuple[Path, ...],
    update_file: Path | None,
    columns: str | None,
    family: str | None,
    warmup: int,
    dry_run: bool,
    checkpointing: bool,
) -> None:
    """Print the markdown tables of the seed's gpt2.md regenerated from the logs under PATHS
    (default: ./runs): one table per stack, sorted by GPU count, a line under each saying which
    statistic and formula the numbers use. Failed runs show `fail`, they are never dropped.

    With --update FILE.md, recompute instead the TFlops cells of every table of FILE.md that has
    GPUs, Size, Glob-BS, Throughput and TFlops columns, from each row's own cells (the seed's
    "secret formula"), keeping every other byte; the file is replaced atomically. Changed rows are
    listed on stdout with their line number, rows that cannot be read (e.g. OOM) on stderr. A table
    this command generated (its legend says so) keeps its numbers: they came from each run's
    unrounded facts, and a row its rounded cells do not reproduce is reported, not rewritten.

    \b
    Example:
      logstat table logs/ > gpt2.md
      logstat table logs/ --columns GPUs,Size,Throughput,TFlops,MFU,Notes
      logstat table --update gpt2.md
    """
    if update_file is not None:
        if paths:
            raise LogstatError("logstat table: give either log PATHS or --update FILE.md, not both")
        # options that mean nothing here are refused, not silently ignored
        unused = [f"--{name}" for name in ("columns", "family", "warmup") if given(name)]
        if unused:
            raise LogstatError(
                f"logstat table: {', '.join(unused)} go with log PATHS; --update reads the file's own cells"
            )
        _update(update_file, dry_run=dry_run, checkpointing=checkpointing)
        return
    if dry_run:
        raise LogstatError("logstat table: --dry-run goes with --update FILE.md")
    if given("checkpointing"):
        raise LogstatError(
            "logstat table: --checkpointing/--no-checkpointing go with --update FILE.md; "
            "from logs, each run's factor (4 or 3) follows its own activation checkpointing"
        )
    from logstat.runners.sweep import is_sweep_dir

    sweeps = [path for path in paths if is_sweep_dir(path)]
    if sweeps:
        if len(sweeps) != len(paths) or columns is not None:
            raise LogstatError(
                "logstat table: a sweep directory's table has its own columns (the swept fields); "
                "give only sweep directories, without --columns"
            )
        for sweep_dir in sweeps:
            click.echo(_sweep_table(sweep_dir, family=family, warmup=warmup), nl=False)
        return
    from logstat.analytics.tables import parse_columns, render_tables
    from logstat.progress import load_with_progress

    try:
        chosen = parse_columns(columns)
    except ValueError as exc:
        raise LogstatError(f"logstat table: {exc}") from None
    if not paths:
        if not Path("runs").is_dir():
            raise LogstatError("logstat table: give the log files or directories to read (no ./runs here)")
        paths = (Path("runs"),)
    result = load_with_progress(paths, family=family, warmup=warmup)
    if result.runs.is_empty():
        raise LogstatError(f"logstat table: no log files under {', '.join(map(str, paths))}")
    from logstat.formats import run_warnings, warmup_warnings

    for line in [*run_warnings(result.runs), *warmup_warnings(result.runs, warmup)]:
        click.echo(line, err=True)
    click.echo(render_tables(result.runs, columns=chosen), nl=False)


def _sweep_table(sweep_dir: Path, *, family: str | None, warmup: int) -> str:
    """The table of one sweep: every point, its measured numbers from the logs of its run directory."""
    from logstat.analytics.sweep_table import render_sweep_table
    from logstat.api import load_runs
    from logstat.formats import run_warnings, warmup_warnings
    from logstat.runners.sweep import read_sweep

    record = read_sweep(sweep_dir)
    point_dirs = [sweep_dir / point["dir"] for point in record["points"] if point.get("dir")]
    result = load_runs([d for d in point_dirs if d.is_dir()], family=family, warmup=warmup)
    for line in [*run_warnings(result.runs), *warmup_warnings(result.runs, warmup)]:
        click.echo(line, err=True)
    grid = list(record.get("grid") or {})
    title = f"{record.get('spec_name', 'sweep')} sweep: {', '.join(grid)} ({Path(sweep_dir).name})"
    return render_sweep_table(record["points"], result.runs, title=title, grid=grid)


def _update(path: Path, *, dry_run: bool, checkpointing: bool) -> None:
    from logstat.analytics.update import format_report, format_skipped, update_tflops_file

    if not path.is_file():
        raise LogstatError(f"logstat table --update: {path}: no such file")
    result = update_tflops_file(path, checkpointing=checkpointing, dry_run=dry_run)
    if result.tables == 0:
        raise LogstatError(f"{path}: no table with GPUs, Size, Glob-BS, Throughput and TFlops columns")
    for line in format_skipped(result, name=str(path)):
        click.echo(line, err=True)
    for line in format_report(result, name=str(path)):
        click.echo(line)
    verb = "would change" if dry_run else "changed"
    from_logs = sum(s.from_logs for s in result.skipped)
    generated = f", {from_logs} generated from logs (regenerate those)" if from_logs else ""
    click.echo(
        f"{path}: {result.tables} TFlops tables, {result.rows} rows read, {verb} {len(result.changed)}, "
        f"left alone {len(result.skipped) - from_logs} unreadable{generated}",
        err=True,
    )
