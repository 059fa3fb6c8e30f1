"""Run directories: ``runs/<spec-name>/<UTC time>-<short id>/``, created once, never overwritten.

Every file is written atomically: into a temporary file in the same directory, flushed, then
linked into place. A new file is linked with ``os.link``, which fails if the name exists, so
nothing the user made is ever replaced; only files logstat itself rewrites on purpose (the
manifest, when a job id becomes known) are replaced with ``os.replace``.
"""

from __future__ import annotations

import os
import secrets
import tempfile
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from logstat.errors import LogstatError

if TYPE_CHECKING:
    from logstat.runners.render import RenderedRun

#: Default root of run directories (relative to the working directory).
RUNS_ROOT = Path("runs")
#: A sweep directory's record and the plan `logstat sweep` printed (here, not in runners.sweep: the log walk
#: passes over the plan, and importing the sweep planner would cost every parse ~40 ms)
SWEEP_FILE = "sweep.json"
PLAN_FILE = "plan.txt"


def run_dir_path(
    runs_root: Path, spec_name: str, *, now: datetime | None = None, short_id: str | None = None
) -> Path:
    """Where a new run of ``spec_name`` goes: ``<root>/<spec-name>/<YYYYmmddTHHMMSSZ>-<6 hex>``."""
    stamp = (now or datetime.now(UTC)).astimezone(UTC).strftime("%Y%m%dT%H%M%SZ")
    return Path(runs_root).absolute() / spec_name / f"{stamp}-{short_id or secrets.token_hex(3)}"


def create_run_dir(run: RenderedRun, manifest: dict[str, Any]) -> Path:
    """Create ``run.run_dir`` (refusing if it exists) with the spec, script, DeepSpeed JSON, manifest."""
    from logstat.runners.manifest import manifest_text
    from logstat.runners.render import ds_config_text
    from logstat.runners.spec import spec_to_toml

    run_dir = run.run_dir
    make_parents(run_dir)
    try:
        run_dir.mkdir()
    except FileExistsError:
        raise LogstatError(f"run directory {run_dir} exists: runs are never overwritten") from None
    atomic_write_text(run.spec_path, spec_to_toml(run.spec))
    atomic_write_text(run.script_path, run.sbatch_script, mode=0o755)
    if run.deepspeed_config is not None:
        atomic_write_text(run.ds_config_path, ds_config_text(run.deepspeed_config))
    atomic_write_text(run.manifest_path, manifest_text(manifest))
    return run_dir


def make_parents(path: Path) -> None:
    """Create the directories above ``path``; a LogstatError naming the one that is a file instead."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError):
        blocking = next(p for p in [path.parent, *path.parent.parents] if p.exists() and not p.is_dir())
        raise LogstatError(
            f"{blocking} is a file, where the directory of {path.name} goes: move it or give another --runs-dir"
        ) from None


def atomic_write_text(path: Path, text: str, *, replace: bool = False, mode: int = 0o644) -> None:
    """Write ``text`` to ``path`` atomically; refuse an existing ``path`` unless ``replace``."""
    path = Path(path)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    tmp = Path(tmp_name)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, mode)
        if replace:
            os.replace(tmp, path)
        else:
            try:
                os.link(tmp, path)
            except FileExistsError:
                raise LogstatError(f"{path} exists: logstat never overwrites a file") from None
    finally:
        tmp.unlink(missing_ok=True)


def open_new_log(path: Path):
    """Open a log file for writing that must not exist yet (mode ``x``: never truncates a log)."""
    try:
        return open(path, "x", encoding="utf-8", errors="replace")
    except FileExistsError:
        raise LogstatError(f"log {path} exists: logstat never overwrites a log") from None
