"""`logstat sweep`: a grid of spec configurations, pruned, then launched as one Slurm job array
or run one after another locally (logstat.runners.sweep)."""

from __future__ import annotations

from pathlib import Path

import click

from logstat.errors import LogstatError


@click.command()
@click.argument("spec")
@click.option(
    "--grid",
    "grid",
    multiple=True,
    metavar="SECTION.FIELD=V1,V2,...",
    help="A grid axis: the field takes each value (typed like --set); repeat for more axes.",
)
@click.option(
    "--set",
    "overrides",
    multiple=True,
    metavar="SECTION.FIELD=VALUE",
    help="Override a spec field for every point (repeatable), e.g. --set batch.global_batch=none.",
)
@click.option(
    "--backend",
    default="dry-run",
    show_default=True,
    metavar="dry-run|local|slurm",
    help="dry-run prints the plan; local runs the points one after another here; slurm submits one job array.",
)
@click.option(
    "--dry-run", "dry_run", is_flag=True, help="Print the plan and stop (the backend's own refusals shown)."
)
@click.option(
    "--min-pipeline-efficiency",
    type=float,
    default=None,
    help="Prune points whose gas/(gas+PP-1) is lower (default 0.8, or [sweep] min_pipeline_efficiency; 0: off).",
)
@click.option(
    "--max-parallel",
    type=click.IntRange(min=1),
    default=None,
    help="slurm: run at most this many array tasks at once (#SBATCH --array=...%K).",
)
@click.option("--recipe", metavar="NAME", help="A tuning recipe's grid: shaden (seed 002).")
@click.option("--wait", is_flag=True, help="slurm: follow the array until every point has ended.")
@click.option(
    "--runs-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("runs"),
    show_default=True,
    help="Root of run directories: the sweep goes to runs/<spec-name>/sweep-<UTC time>-<id>/.",
)
def sweep(
    spec: str,
    grid: tuple[str, ...],
    overrides: tuple[str, ...],
    backend: str,
    dry_run: bool,
    min_pipeline_efficiency: float | None,
    max_parallel: int | None,
    recipe: str | None,
    wait: bool,
    runs_dir: Path,
) -> None:
    """Expand a grid over SPEC (a TOML file or a shipped spec's name), check every point as
    `logstat run` does, and print the plan: the kept points (their array task ids) and the pruned
    ones with the rule that pruned them (refused by the spec checks, e.g. TP*PP does not divide the
    GPUs; model states over the GPU's memory by the estimate; pipeline efficiency under the floor).

    With --backend slurm the kept points are submitted as one job array (one run directory per
    point, SLURM_ARRAY_TASK_ID selects it); with --backend local they run one after another. The
    sweep directory is printed on stdout: give it to `logstat status`, `logstat cancel` and
    `logstat table`. A spec's [sweep.grid] table (field = [values]) adds axes; --grid wins.

    \b
    Example:
      logstat sweep gpt2-52b-megatron-ds --set batch.global_batch=none \\
          --grid batch.micro=4,6,8 --grid batch.gas=256,512 --dry-run
      logstat sweep gpt2-tiny-ddp-powersgd --grid batch.micro=1,2 --grid batch.gas=1,2 --backend local
      logstat sweep gpt2-52b-megatron-ds --recipe shaden --dry-run
    """
    from logstat.runners import sweep as sweeps
    from logstat.runners.backends import BACKENDS, stderr_echo
    from logstat.runners.spec import find_spec

    if backend not in BACKENDS:
        raise LogstatError(f"backend {backend!r} is unknown (backends: {', '.join(BACKENDS)})")
    if backend != "slurm" and (wait or max_parallel):
        raise LogstatError("--wait and --max-parallel go with --backend slurm")
    spec_path = find_spec(spec)
    section = sweeps.sweep_section(spec_path)
    command_axes = [sweeps.parse_axis(text) for text in grid]
    sets, axes = sweeps.assemble_grid(spec_path, section, command_axes, overrides=overrides, recipe=recipe)
    floor = min_pipeline_efficiency
    if floor is None:
        floor = _number(section.get("min_pipeline_efficiency", sweeps.DEFAULT_MIN_PIPELINE_EFFICIENCY))
    if max_parallel is None and section.get("max_parallel") is not None:
        max_parallel = _count(section["max_parallel"])
    plan = sweeps.plan_sweep(
        spec_path,
        axes,
        overrides=[*sets, *overrides],
        min_pipeline_efficiency=floor,
        backend_check=sweeps.backend_check_for(backend),
        recipe=recipe,
    )
    if dry_run or backend == "dry-run":
        click.echo(sweeps.format_plan(plan), nl=False)
        return
    if not plan.kept:
        raise LogstatError(sweeps.nothing_kept_message(plan))
    click.echo(sweeps.format_plan(plan), nl=False, err=True)
    sweep_dir, runs = sweeps.create_sweep(plan, backend=backend, runs_root=runs_dir)
    stderr_echo(f"sweep directory: {sweep_dir}")
    failed = 0
    if backend == "local":
        codes = sweeps.launch_local(runs, echo=stderr_echo)
        failed = sum(code != 0 for code in codes)
    else:
        arrays = sweeps.submit_arrays(
            sweep_dir, runs, width=sweeps.task_width(plan), max_parallel=max_parallel
        )
        for array in arrays:
            stderr_echo(
                f"submitted job array {array['job_id']} (tasks {sweeps.array_ranges(array['tasks'])})"
            )
        if wait:
            statuses = sweeps.wait_sweep(sweep_dir, echo=stderr_echo)
            failed = sum(status.state != "COMPLETED" for status in statuses)
    if failed:
        stderr_echo(
            f"{failed} of {len(runs)} points did not complete; `logstat table {sweep_dir}` shows them"
        )
    click.echo(str(sweep_dir))
    if failed:
        raise SystemExit(1)  # not click's Exit: outside standalone mode click returns its code


def _number(value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= 1:
        raise LogstatError(f"[sweep] min_pipeline_efficiency={value!r} must be a number between 0 and 1")
    return float(value)


def _count(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise LogstatError(f"[sweep] max_parallel={value!r} must be an integer >= 1")
    return value
