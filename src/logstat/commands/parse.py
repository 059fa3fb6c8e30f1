"""`logstat parse`: one row per run (or per iteration) from any mix of training logs."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from logstat.commands import given
from logstat.errors import LogstatError
from logstat.parsers.registry import FAMILY_CHOICES

FORMATS = ("table", "json", "csv", "parquet", "markdown")


@click.command()
@click.argument("paths", nargs=-1, required=True, type=click.Path(readable=False))
@click.option(
    "--tflops",
    is_flag=True,
    help="Add model size, samples/s, tokens/s, TFLOPs per GPU (and the log's own), MFU, HFU, and the ZeRO "
    "model-state memory estimate beside the logged peak.",
)
@click.option("--iterations", is_flag=True, help="One row per logged iteration (with its family and line).")
@click.option(
    "--timers", is_flag=True, help="One row per timer of a logged iteration (Megatron's, DeepSpeed's), in ms."
)
@click.option(
    "--format", "fmt", type=click.Choice(FORMATS), default="table", show_default=True, help="Output format."
)
@click.option(
    "--family",
    default=None,
    help=f"Force one log family instead of detecting it per file: {', '.join(FAMILY_CHOICES)}.",
)
@click.option(
    "--warmup",
    type=int,
    default=1,
    show_default=True,
    help="Leading logged steps left out of the steady-state statistics.",
)
@click.option(
    "--output", "-o", default=None, help="Write to this new file (never overwrites) instead of stdout."
)
@click.option(
    "--verbose",
    "-v",
    is_flag=True,
    help="Say on stderr which files under the directories were not read, and why (other names, hidden).",
)
def parse(
    paths: tuple[str, ...],
    tflops: bool,
    iterations: bool,
    timers: bool,
    fmt: str,
    family: str | None,
    warmup: int,
    output: str | None,
    verbose: bool,
) -> None:
    """Parse training logs (files or directories, plain or .gz/.xz/.bz2) into one row per run.

    A job's output and error files are one run (Slurm .out/.err, LSF .stdout/.stderr, PBS/SGE
    name.o123/name.e123; one named alone brings the other beside it; name.1234 is a log too); --verbose
    lists the files of the directories that were not read (an archive holding logs is a row that says to
    extract it). The family (--family names them) is detected per
    file. s/iter is the median of the logged steps after the first --warmup ones.

    \b
    Example:
      logstat parse logs/ --tflops
      logstat parse a.out b.out.gz --format json
      logstat parse logs/ --iterations --format csv -o iterations.csv
      logstat parse logs/ --timers --format csv
    """
    from logstat import formats
    from logstat.api import find_logs, load_files, warn_unlisted

    if iterations and timers:
        raise LogstatError("--iterations and --timers: give one (each is a table of its own)")
    steps = "--iterations" if iterations else "--timers" if timers else None
    if steps and (tflops or given("warmup")):
        run_option = "--tflops" if tflops else "--warmup"
        raise LogstatError(f"{run_option} is of the run table; {steps} lists every logged step: give one")
    if output is None and fmt == "parquet" and sys.stdout.isatty():
        raise LogstatError("--format parquet is binary: give --output FILE (not written to a terminal)")
    if output is not None:
        formats.refuse_unwritable_output(output)
    files = find_logs(paths, skipped=_say_skipped if verbose else warn_unlisted)
    if not files:
        raise LogstatError(
            f"no log files (*.out, *.err, *.stdout, *.stderr, *.log, *.txt, PBS/SGE name.o123 / name.e123,"
            f" name.1234, .gz/.xz/.bz2 of those) under {', '.join(paths)}"
        )
    from logstat.progress import progress_bar, run_sizes

    # workers=None: one reader process per core for big inputs (this console script is import-safe).
    progress = progress_bar(run_sizes(files)) if sys.stderr.isatty() else None
    result = load_files(files, family=family, warmup=warmup, progress=progress, workers=None)
    for line in formats.run_warnings(result.runs):
        click.echo(line, err=True)
    if steps is None:  # of the runs' s/iter, which a table of steps does not show
        for line in formats.warmup_warnings(result.runs, warmup):
            click.echo(line, err=True)
    if iterations or timers:
        frame = result.iterations if iterations else result.timers
        formats.write(
            frame, fmt, lambda markdown: formats.step_rows_text(frame, result.runs, markdown=markdown), output
        )
        return
    runs = formats.run_records(result.runs, tflops=tflops)
    formats.write(
        runs,
        fmt,
        lambda markdown: formats.runs_text(result.runs, tflops=tflops, markdown=markdown, warmup=warmup),
        output,
    )


def _say_skipped(path: Path, reason: str) -> None:
    click.echo(f"skipped: {path}: {reason}", err=True)
