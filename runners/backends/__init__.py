"""Backends launch a rendered run: the one registry of them, and the interface they implement.

A backend is a module registered in ``BACKENDS`` with a function::

    def launch(run: RenderedRun, *, wait: bool = False, echo: Callable[[str], None] = ...) -> LaunchResult

and optionally ``preflight(run: RenderedRun) -> None``, called before the run directory is
created, which raises ``LogstatError`` when this backend cannot run ``run`` at all (so that a
refused run leaves nothing behind).

``run`` (logstat.runners.render.RenderedRun) carries the resolved spec, the run directory
(already created by logstat.runners.rundir, holding spec.toml, run.sbatch, ds_config.json and
manifest.json), the sbatch script text, the per-node command (``run.program`` and
``run.launcher_argv(...)``), the DeepSpeed JSON and the environment. ``echo`` prints progress
lines for the user (stderr). A backend never raises for a failed training job: it returns a
result whose ``exit_code`` says so; it raises ``LogstatError`` for what the user must fix
(no sbatch, no checkout...). A backend that learns a Slurm job id records it with
``logstat.runners.manifest.update_manifest(run.run_dir, slurm_job_id=...)``.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Protocol

from logstat.errors import LogstatError

if TYPE_CHECKING:
    from logstat.runners.render import RenderedRun
    from logstat.runners.spec import Spec


@dataclass(frozen=True, kw_only=True)
class LaunchResult:
    """What a backend reports back."""

    backend: str
    """Registry name of the backend that launched."""
    run_dir: Path | None
    """The run directory (None for a dry run, which creates nothing)."""
    exit_code: int | None = None
    """Exit code of the training command when it ran to the end (0 = success); None if not known."""
    job_id: str | None = None
    """Slurm job id once submitted."""
    log_path: Path | None = None
    """The run's log file (stdout and stderr of the training command)."""
    state: str | None = None
    """Final or current state as the backend knows it (e.g. COMPLETED, PENDING, TIMEOUT)."""
    message: str = ""
    """One line for the user."""

    @property
    def ok(self) -> bool:
        """True unless the run is known to have failed."""
        return self.exit_code in (None, 0)


class Launch(Protocol):
    def __call__(
        self, run: RenderedRun, *, wait: bool = False, echo: Callable[[str], None] = ...
    ) -> LaunchResult: ...


#: name -> module path: the one place a backend is registered.
BACKENDS: dict[str, str] = {
    "dry-run": "logstat.runners.backends.dry_run",
    "local": "logstat.runners.backends.local",
    "slurm": "logstat.runners.backends.slurm",
}


def backend_module(name: str) -> ModuleType:
    """The module of backend ``name``; a LogstatError listing the valid names if unknown."""
    target = BACKENDS.get(name)
    if target is None:
        raise LogstatError(f"backend {name!r} is unknown (backends: {', '.join(BACKENDS)})")
    return importlib.import_module(target)


def get_backend(name: str) -> Launch:
    """The ``launch`` function of backend ``name``."""
    return backend_module(name).launch


def preflight(name: str, run: RenderedRun) -> None:
    """Run backend ``name``'s ``preflight(run)`` if it has one (raises LogstatError to refuse)."""
    check = getattr(backend_module(name), "preflight", None)
    if check is not None:
        check(run)


def stderr_echo(line: str) -> None:
    """The default ``echo``: one line on stderr."""
    print(line, file=sys.stderr, flush=True)


def launch_spec(
    spec_ref: str | Path | Spec,
    *,
    backend: str = "dry-run",
    overrides: tuple[str, ...] | list[str] = (),
    wait: bool = False,
    runs_root: Path | None = None,
    python: str | None = None,
    echo: Callable[[str], None] = stderr_echo,
    reruns: Path | None = None,
) -> LaunchResult:
    """Load (unless ``spec_ref`` is a loaded spec: then ``overrides`` are already in it), validate, render
    and launch a spec: the library function behind ``logstat run`` (and ``logstat rerun``, which names in
    ``reruns`` the run directory it launches again).

    Nothing is created before the spec is valid and the backend's preflight accepts it; the run
    directory is then created (never reused) with the spec, script, DeepSpeed JSON and manifest.
    """
    from logstat.runners.manifest import build_manifest
    from logstat.runners.render import render
    from logstat.runners.rundir import RUNS_ROOT, create_run_dir, run_dir_path
    from logstat.runners.spec import Spec, load_spec
    from logstat.runners.stacks import get_stack
    from logstat.runners.validate import validate

    launch = get_backend(backend)
    spec = spec_ref if isinstance(spec_ref, Spec) else load_spec(spec_ref, overrides)
    warnings = validate(spec)
    for warning in warnings:
        echo(f"warning: {warning}")
    run = render(spec, run_dir_path(runs_root or RUNS_ROOT, spec.name), python=python, warnings=warnings)
    preflight(backend, run)
    if backend != "dry-run":
        get_stack(spec.stack).launch_check(spec)
    if backend != "dry-run":
        manifest = build_manifest(run, backend=backend, command=planned_command(backend, run))
        if reruns is not None:
            manifest["reruns"] = {
                "run_dir": str(reruns),
                "spec_name": reruns.parent.name,
                "run_id": reruns.name,
            }
        create_run_dir(run, manifest)
        echo(f"run directory: {run.run_dir}")
    return launch(run, wait=wait, echo=echo)


def planned_command(backend: str, run: RenderedRun) -> list[str]:
    """The command a backend will run, as first recorded in the manifest (backends refine it)."""
    if backend == "slurm":
        return ["sbatch", "--parsable", str(run.script_path)]
    return run.launcher_argv(node_rank=0, master_addr="127.0.0.1")
