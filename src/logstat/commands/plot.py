"""`logstat plot`: charts of the runs as HTML and PNG/SVG files (the only command that imports altair)."""

from pathlib import Path

import click

from logstat.errors import LogstatError
from logstat.parsers.registry import FAMILY_CHOICES

#: chart file stem -> why a chart is not drawn (logstat.analytics.charts.charts_of draws them).
CHARTS = {
    "gpu_days_100b": "no run with a measured throughput",
    "loss": "no logged loss",
    "time_breakdown": "no timer of a logged step (Megatron's time (ms) lines, DeepSpeed's engine timers)",
}


@click.command()
@click.argument("paths", nargs=-1, required=True, type=click.Path(readable=False, path_type=Path))
@click.option(
    "--out",
    "out_dir",
    required=True,
    type=click.Path(path_type=Path, file_okay=False),
    help="Directory for the chart files (created if missing).",
)
@click.option(
    "--format",
    "formats",
    multiple=True,
    type=click.Choice(["html", "png", "svg"]),
    default=("html", "png"),
    show_default=True,
    help="File formats; repeat the option for several.",
)
@click.option(
    "--family", help=f"Read every log as this family instead of detecting it: {', '.join(FAMILY_CHOICES)}."
)
@click.option(
    "--warmup", type=int, default=1, show_default=True, help="Leading iterations left out of medians."
)
def plot(
    paths: tuple[Path, ...], out_dir: Path, formats: tuple[str, ...], family: str | None, warmup: int
) -> None:
    """Draw the charts of the logs under PATHS into --out DIR and print the files written:
    GPU-days to train 100B tokens vs number of GPUs per configuration (gpu_days_100b), loss vs
    iteration per run (loss), and the per-iteration time breakdown from Megatron timer lines
    (time_breakdown). A chart without data in the logs is skipped, with a note on stderr.
    HTML files are self-contained (they work offline).

    Files are never overwritten: if any chart file already exists in DIR, the command writes
    nothing and fails naming it; choose a new --out directory.

    \b
    Example:
      logstat plot logs/ --out plots/
      logstat plot logs/ --out plots-svg/ --format svg --format html
    """
    from logstat.analytics.charts import charts_of, planned_files, write_charts
    from logstat.progress import load_with_progress

    formats = tuple(dict.fromkeys(formats))  # a format given twice is one file per chart
    # before the logs are read (minutes on a big corpus): a chart file that exists is never replaced
    existing = [path for path in planned_files(list(CHARTS), out_dir, formats) if path.exists()]
    if existing:
        raise LogstatError(
            f"logstat plot: {existing[0]} exists; logstat never overwrites a file (choose another --out)"
        )
    result = load_with_progress(paths, family=family, warmup=warmup)
    if result.runs.is_empty():
        raise LogstatError(f"logstat plot: no log files under {', '.join(map(str, paths))}")
    from logstat.formats import run_warnings, warmup_warnings

    for line in [*run_warnings(result.runs), *warmup_warnings(result.runs, warmup)]:
        click.echo(line, err=True)
    charts = charts_of(result.runs, result.iterations, result.timers)
    for stem, why in CHARTS.items():
        if stem not in charts:
            click.echo(f"logstat plot: no {stem} chart: {why}", err=True)
    if not charts:
        raise LogstatError("logstat plot: nothing to draw in these logs")
    try:
        written = write_charts(charts, out_dir, formats=formats)
    except FileExistsError as exc:
        raise LogstatError(f"logstat plot: {exc}") from None
    for path in written:
        click.echo(str(path))
