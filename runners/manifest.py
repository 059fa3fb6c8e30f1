"""manifest.json: what ran, where, with what — so that `logstat parse` need not guess run facts.

Holds package versions, the git revision and dirty flag of logstat (and of the Megatron-DeepSpeed
checkout when used), the host, the Slurm variables, the launch environment that changes a run
(NCCL_*, OMP_*, MASTER_PORT...; never a variable named like a credential), the exact commands, ``slurm_job_id`` once
known, and the resolved spec under ``spec``. The Slurm backend calls :func:`update_manifest`
to add the job id; updates replace the file atomically.
"""

from __future__ import annotations

import json
import os
import platform
import socket
import subprocess
import sys
from collections.abc import Sequence
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any

from logstat.errors import LogstatError

if TYPE_CHECKING:
    from logstat.runners.render import RenderedRun

MANIFEST_VERSION = 1
#: Distributions whose versions decide what a run did.
PACKAGES = ("logstat", "torch", "deepspeed", "transformers", "accelerate", "polars", "pyparsing", "click")
_SOURCE_DIR = Path(__file__).resolve().parent


def build_manifest(run: RenderedRun, *, backend: str, command: Sequence[str]) -> dict[str, Any]:
    """The manifest of a run about to be launched; ``command`` is the exact command the backend runs."""
    from logstat.runners.render import DS_CONFIG_NAME, MANIFEST_NAME, SCRIPT_NAME, SPEC_NAME
    from logstat.runners.spec import spec_to_dict

    spec = run.spec
    repos = {"logstat": git_state(_SOURCE_DIR)}
    checkout = next((arg for arg in run.program if arg.endswith("pretrain_gpt.py")), None)
    if checkout:
        repos["megatron_deepspeed"] = git_state(Path(checkout).parent)
    return {
        "manifest_version": MANIFEST_VERSION,
        "created_utc": utc_now(),
        "backend": backend,
        "run_dir": str(run.run_dir),
        "spec_name": spec.name,
        "stack": spec.stack,
        "command": list(command),
        "logstat_command": list(sys.argv),
        "node_command": [run.python, "-u", "-m", "torch.distributed.run", *run.program],
        "environment": dict(run.env),
        "files": {
            "spec": SPEC_NAME,
            "script": SCRIPT_NAME,
            "manifest": MANIFEST_NAME,
            "deepspeed_config": DS_CONFIG_NAME if run.deepspeed_config is not None else None,
        },
        "world_size": spec.world_size,
        "dp": spec.dp,
        "warnings": list(run.warnings),
        "packages": package_versions(),
        "python": sys.version.split()[0],
        "git": repos,
        "host": host_facts(),
        "slurm": slurm_variables(),
        "launch_environment": launch_environment(),
        "slurm_job_id": os.environ.get("SLURM_JOB_ID"),
        "spec": spec_to_dict(spec),
    }


def utc_now() -> str:
    """Now, as the manifest's ``*_utc`` fields write it (ISO 8601, seconds)."""
    return datetime.now(UTC).isoformat(timespec="seconds")


def manifest_text(manifest: dict[str, Any]) -> str:
    return json.dumps(manifest, indent=2, sort_keys=False, default=str) + "\n"


def read_manifest(path: Path) -> dict[str, Any]:
    """Read ``manifest.json`` from a run directory (or the file itself)."""
    from logstat.runners.render import MANIFEST_NAME

    path = Path(path)
    if path.is_dir():
        path = path / MANIFEST_NAME
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise LogstatError(f"cannot read manifest {path}: {exc}") from exc
    if not isinstance(manifest, dict):
        raise LogstatError(f"manifest {path} holds a JSON {type(manifest).__name__}, not an object")
    return manifest


def update_manifest(run_dir: Path, **fields: Any) -> dict[str, Any]:
    """Add or change top-level fields (e.g. ``slurm_job_id``, ``exit_code``); atomic replace."""
    from logstat.runners.render import MANIFEST_NAME
    from logstat.runners.rundir import atomic_write_text

    manifest = read_manifest(run_dir)
    manifest.update(fields)
    atomic_write_text(Path(run_dir) / MANIFEST_NAME, manifest_text(manifest), replace=True)
    return manifest


def package_versions() -> dict[str, str | None]:
    """Installed versions (without importing the packages: torch takes seconds to import)."""
    versions: dict[str, str | None] = {}
    for name in PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    return versions


def git_state(directory: Path) -> dict[str, Any]:
    """Revision and dirty flag of the git work tree holding ``directory`` (nulls outside git)."""

    def git(*args: str) -> str | None:
        try:
            done = subprocess.run(
                ["git", "-C", str(directory), *args], capture_output=True, text=True, timeout=20
            )
        except (OSError, subprocess.TimeoutExpired):
            return None
        return done.stdout if done.returncode == 0 else None

    revision = git("rev-parse", "HEAD")
    status = git("status", "--porcelain", "--untracked-files=no")
    return {
        "path": str(directory),
        "revision": revision.strip() if revision else None,
        "dirty": None if status is None else bool(status.strip()),
    }


def host_facts() -> dict[str, Any]:
    return {
        "hostname": socket.gethostname(),
        "platform": platform.platform(),
        "machine": platform.machine(),
        "cpu_count": os.cpu_count(),
    }


#: Variables that change what a run does: communication (NCCL, gloo), threads, devices, the
#: launcher's rendezvous, the libraries' switches, hashing, and what code is imported.
LAUNCH_PREFIXES = (
    "NCCL_", "GLOO_", "OMP_", "KMP_", "MKL_", "CUDA_", "CUBLAS_", "CUDNN_", "TORCH_", "TORCHELASTIC_",
    "PYTORCH_", "DS_", "SLURM_", "HF_", "TRANSFORMERS_", "ACCELERATE_",
)  # fmt: skip
LAUNCH_NAMES = (
    "MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "NODE_RANK",
    "PYTHONHASHSEED", "PYTHONPATH", "LD_LIBRARY_PATH", "MEGATRON_DEEPSPEED_DIR",
)  # fmt: skip
#: Parts of a name that mark a credential: such a variable is never written (case-insensitive).
SECRET_MARKERS = ("TOKEN", "KEY", "SECRET", "PASSWORD")


def launch_environment() -> dict[str, str]:
    """The launching environment's variables that change a run (LAUNCH_PREFIXES, LAUNCH_NAMES),
    without any whose name looks like a credential (SECRET_MARKERS): e.g. HF_TOKEN is left out."""
    return {
        key: value
        for key, value in sorted(os.environ.items())
        if (key.startswith(LAUNCH_PREFIXES) or key in LAUNCH_NAMES)
        and not any(marker in key.upper() for marker in SECRET_MARKERS)
    }


def slurm_variables() -> dict[str, str]:
    """Every ``SLURM_*`` variable of the launching environment (empty outside Slurm)."""
    return {key: value for key, value in launch_environment().items() if key.startswith("SLURM_")}
