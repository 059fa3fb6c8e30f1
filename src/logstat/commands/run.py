"""`logstat run`: validate, render and launch an experiment spec."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

if TYPE_CHECKING:
    from logstat.runners.backends import LaunchResult


@click.command()
@click.argument("spec")
@click.option(
    "--backend",
    default="dry-run",
    show_default=True,
    metavar="dry-run|local|slurm",
    help="dry-run prints the plan; local runs torch.distributed.run here; slurm submits with sbatch.",
)
@click.option("--dry-run", "dry_run", is_flag=True, help="Same as --backend dry-run: print what would run.")
@click.option(
    "--set",
    "overrides",
    multiple=True,
    metavar="SECTION.FIELD=VALUE",
    help="Override a spec field, typed by the field (repeatable), e.g. --set parallel.pp=8.",
)
@click.option("--wait", is_flag=True, help="slurm: follow the job until it ends (local always waits).")
@click.option(
    "--runs-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("runs"),
    show_default=True,
    help="Root of run directories: runs/<spec-name>/<UTC time>-<id>/ (never overwritten).",
)
def run(
    spec: str, backend: str, dry_run: bool, overrides: tuple[str, ...], wait: bool, runs_dir: Path
) -> None:
    """Validate SPEC (a TOML file or a shipped spec's name), render it and launch it.

    Every refusal names the field, its value and the rule, before anything is created. A launch
    makes a new run directory holding the resolved spec, the sbatch script, the DeepSpeed JSON,
    manifest.json and the log; its path is printed on stdout.

    \b
    Example:
      logstat run runners/specs/gpt2-52b-megatron-ds.toml --dry-run
      logstat run gpt2-tiny-ddp-powersgd --backend local
      logstat run gpt2-52b-megatron-ds --set parallel.pp=8 --set batch.micro=2 --dry-run
    """
    from logstat.runners.backends import launch_spec, stderr_echo

    result = launch_spec(
        spec,
        backend="dry-run" if dry_run else backend,
        overrides=overrides,
        wait=wait,
        runs_root=runs_dir,
        echo=stderr_echo,
    )
    report_launch(result)


def report_launch(result: LaunchResult) -> None:
    """The launch's message on stderr, its run directory on stdout, and its exit code (non-zero
    when the run failed, so that make's && chains stop)."""
    if result.message:
        click.echo(result.message, err=True)
    if result.run_dir is not None:
        click.echo(str(result.run_dir))
    if not result.ok:
        raise click.exceptions.Exit(result.exit_code or 1)
