"""`logstat rerun`: launch a run's resolved spec again, with overrides, into a new run directory."""

from pathlib import Path

import click


@click.command()
@click.argument("reference", metavar="ROW_OR_RUN_DIR")
@click.option(
    "--set",
    "overrides",
    multiple=True,
    metavar="SECTION.FIELD=VALUE",
    help="Override a field of the run's spec, typed and validated as by `logstat run` (repeatable).",
)
@click.option(
    "--backend",
    default=None,
    metavar="dry-run|local|slurm",
    help="Where to launch it [the backend that ran the original].",
)
@click.option("--dry-run", "dry_run", is_flag=True, help="Same as --backend dry-run: print what would run.")
@click.option("--wait", is_flag=True, help="slurm: follow the job until it ends (local always waits).")
@click.option(
    "--runs-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("runs"),
    show_default=True,
    help="Root of run directories: where a run named by spec name and id is looked up, and the new one goes.",
)
def rerun(
    reference: str,
    overrides: tuple[str, ...],
    backend: str | None,
    dry_run: bool,
    wait: bool,
    runs_dir: Path,
) -> None:
    """Launch again the run ROW_OR_RUN_DIR: a run directory, or text naming the run by its spec name
    and run id (a table row's Notes, "gpt2-tiny-ddp-powersgd 20260101T120000Z-1a2b3c", or the id
    alone), looked up under --runs-dir. The resolved spec saved in the run directory is launched with
    the --set overrides into a NEW run directory (nothing is overwritten), whose manifest.json names
    the run it reruns under "reruns"; its path is printed on stdout.

    \b
    Example:
      logstat rerun runs/gpt2-tiny-ddp-powersgd/20260101T120000Z-1a2b3c --set steps=10
      logstat rerun "gpt2-tiny-ddp-powersgd 1a2b3c" --backend slurm
    """
    from logstat.commands.run import report_launch
    from logstat.runners.backends import stderr_echo
    from logstat.runners.rerun import rerun as rerun_run

    result = rerun_run(
        reference,
        backend="dry-run" if dry_run else backend,
        overrides=overrides,
        wait=wait,
        runs_root=runs_dir,
        echo=stderr_echo,
    )
    report_launch(result)
