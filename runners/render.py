"""Render a validated spec into what runs: an sbatch script, the per-node command, a DeepSpeed JSON.

The sbatch script runs one task per node; each task starts ``python -u -m
torch.distributed.run`` with its node rank from ``SLURM_PROCID`` and the master address from
``scontrol show hostnames``: only those two are left to the shell, every other value is a
literal in the script, shell-quoted with :func:`shlex.quote` so that ``$(...)``, backticks,
quotes and newlines coming from a spec are inert. ``#SBATCH`` lines are read by sbatch, not
bash, and cannot hold a newline: such values are refused.
"""

from __future__ import annotations

import dataclasses
import json
import re
import shlex
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from logstat.runners.spec import Spec, SpecError

SCRIPT_NAME = "run.sbatch"
DS_CONFIG_NAME = "ds_config.json"
SPEC_NAME = "spec.toml"
MANIFEST_NAME = "manifest.json"
LOCAL_LOG_NAME = "train.log"
#: sbatch's ``--output`` pattern inside the run directory (``%j``: the job id).
SLURM_LOG_PATTERN = "slurm-%j.out"
_NUMBER = re.compile(r"-\d+(\.\d*)?([eE][-+]?\d+)?")


@dataclass(frozen=True, kw_only=True)
class RenderedRun:
    """Everything a backend needs to launch one run; built by :func:`render`, never edited."""

    spec: Spec
    """The resolved, validated spec."""
    run_dir: Path
    """The run's directory (absolute); created by logstat.runners.rundir, not by rendering."""
    python: str
    """The Python interpreter the nodes run (absolute path of this venv's python by default)."""
    program: tuple[str, ...]
    """What torch.distributed.run starts on each node: ``("-m", module, args...)`` or ``(script, args...)``."""
    deepspeed_config: Mapping[str, Any] | None
    """The DeepSpeed JSON (written to ``ds_config.json`` in the run directory), or None."""
    env: Mapping[str, str] = field(default_factory=dict)
    """Environment variables the stack needs, exported by the script and set by the local backend."""
    sbatch_script: str = ""
    """The sbatch script text (written to ``run.sbatch``)."""
    warnings: tuple[str, ...] = ()
    """Validation warnings (printed, and kept in the manifest)."""

    @property
    def script_path(self) -> Path:
        return self.run_dir / SCRIPT_NAME

    @property
    def ds_config_path(self) -> Path:
        return self.run_dir / DS_CONFIG_NAME

    @property
    def spec_path(self) -> Path:
        return self.run_dir / SPEC_NAME

    @property
    def manifest_path(self) -> Path:
        return self.run_dir / MANIFEST_NAME

    @property
    def local_log_path(self) -> Path:
        """Where the local backend writes the run's stdout and stderr."""
        return self.run_dir / LOCAL_LOG_NAME

    def slurm_log_path(self, job_id: str) -> Path:
        """The Slurm job's output file once its id is known (``#SBATCH --output``)."""
        return self.run_dir / SLURM_LOG_PATTERN.replace("%j", job_id)

    def launcher_argv(self, *, node_rank: int, master_addr: str, master_port: int | None = None) -> list[str]:
        """The per-node command with concrete node rank and master (the local backend's command)."""
        cluster = self.spec.cluster
        return [
            self.python,
            "-u",
            "-m",
            "torch.distributed.run",
            "--node_rank",
            str(node_rank),
            "--master_addr",
            master_addr,
            *launcher_options(self.spec, master_port=master_port or cluster.master_port),
            *self.program,
        ]


def launcher_options(spec: Spec, *, master_port: int) -> list[str]:
    """torch.distributed.run's counts: ``--nnodes`` from cluster.nodes, the one source of node counts."""
    return [
        "--nproc_per_node",
        str(spec.cluster.gpus_per_node),
        "--nnodes",
        str(spec.cluster.nodes),
        "--master_port",
        str(master_port),
    ]


def render(
    spec: Spec, run_dir: Path, *, python: str | None = None, warnings: Sequence[str] = ()
) -> RenderedRun:
    """Render ``spec`` for ``run_dir`` (the directory need not exist yet)."""
    from logstat.runners.stacks import get_stack

    stack = get_stack(spec.stack)
    run_dir = Path(run_dir).absolute()
    ds_config = stack.deepspeed_config(spec)
    program = tuple(stack.program(spec, run_dir=run_dir, ds_config_path=run_dir / DS_CONFIG_NAME))
    env = dict(stack.environment(spec))
    run = RenderedRun(
        spec=spec,
        run_dir=run_dir,
        python=python or sys.executable,
        program=program,
        deepspeed_config=ds_config,
        env=env,
        warnings=tuple(warnings),
    )
    return dataclasses.replace(run, sbatch_script=sbatch_script(run))


def sbatch_script(run: RenderedRun) -> str:
    """The sbatch script of ``run``: header, environment, one launcher per node via srun."""
    spec, cluster = run.spec, run.spec.cluster
    q = shlex.quote
    lines = ["#!/bin/bash", *sbatch_header(run), ""]
    lines += [
        f"# Rendered by logstat from spec {_comment(spec.name)}: the files beside this script are the",
        "# resolved spec (spec.toml), the DeepSpeed config and manifest.json.",
        "set -euo pipefail",
        "",
    ]
    for name, value in sorted(run.env.items()):
        lines.append(f"export {name}={q(value)}")
    lines += [
        "# The first node of the allocation hosts the rendezvous; only Slurm knows it at run time.",
        'MASTER_ADDR="$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)"',
        "export MASTER_ADDR",
        f"cd {q(str(run.run_dir))}",
        "",
        "# One task per node; each starts the launcher with its node rank from SLURM_PROCID,",
        "# which the task's own shell expands on its node: hence the single quotes.",
        "# shellcheck disable=SC2016",
        f"srun --ntasks-per-node=1{_srun_cpus(cluster.cpus_per_task)} --kill-on-bad-exit=1 bash -c \\",
        '  \'exec "$0" -u -m torch.distributed.run --node_rank "$SLURM_PROCID" --master_addr "$MASTER_ADDR" "$@"\' \\',
    ]
    args = [run.python, *launcher_options(spec, master_port=cluster.master_port), *run.program]
    lines += _continued(args)
    return "\n".join(lines) + "\n"


def _srun_cpus(cpus_per_task: int | None) -> str:
    """srun's own --cpus-per-task: since Slurm 22.05 a step does not inherit sbatch's (sbatch(1))."""
    return "" if cpus_per_task is None else f" --cpus-per-task={cpus_per_task}"


def sbatch_header(run: RenderedRun) -> list[str]:
    """``#SBATCH`` lines; ``--nodes`` comes from cluster.nodes, as does the launcher's ``--nnodes``."""
    cluster = run.spec.cluster
    options: list[tuple[str, str | int | None, str]] = [
        ("job-name", cluster.job_name, "cluster.job_name"),
        ("nodes", cluster.nodes, "cluster.nodes"),
        ("ntasks-per-node", 1, "one task per node: the launcher forks the per-GPU processes"),
        ("cpus-per-task", cluster.cpus_per_task, "cluster.cpus_per_task"),
        ("gres", f"gpu:{cluster.gpus_per_node}" if cluster.use_gpus else None, "cluster.gpus_per_node"),
        ("time", cluster.time_limit, "cluster.time_limit"),
        ("partition", cluster.partition, "cluster.partition"),
        ("constraint", cluster.constraint, "cluster.constraint"),
        ("account", cluster.account, "cluster.account"),
        # sbatch expands %-patterns in file names: a literal % of the path is written %%.
        ("output", str(run.run_dir).replace("%", "%%") + "/" + SLURM_LOG_PATTERN, "run directory"),
    ]
    lines = []
    for option, value, source in options:
        if value is None:
            continue
        text = str(value)
        if any(ord(char) < 0x20 or ord(char) == 0x7F for char in text):
            raise SpecError(
                f"{source}={text!r} contains a control character (newline, tab...): "
                "#SBATCH lines are read by sbatch line by line and cannot hold one"
            )
        lines.append(f"#SBATCH --{option}={shlex.quote(text)}")
    return lines


def ds_config_text(config: Mapping[str, Any]) -> str:
    """The DeepSpeed JSON as written to the run directory."""
    return json.dumps(config, indent=2, sort_keys=True) + "\n"


def _continued(args: Sequence[str]) -> list[str]:
    """Arguments one per line (a flag with its value together), joined with backslash continuations."""
    groups: list[list[str]] = []
    for arg in args:
        if groups and not _is_flag(arg) and _is_flag(groups[-1][0]) and len(groups[-1]) == 1:
            groups[-1].append(arg)
        else:
            groups.append([arg])
    rendered = ["    " + " ".join(shlex.quote(a) for a in group) for group in groups]
    return [line + " \\" for line in rendered[:-1]] + rendered[-1:]


def _is_flag(arg: str) -> bool:
    """An option, not a value: '-1' and '-0.5' (a negative value) are values."""
    return arg.startswith("-") and not _NUMBER.fullmatch(arg)


def _comment(text: str) -> str:
    """Text safe inside a ``#`` comment line (no line breaks)."""
    return "".join(char if char.isprintable() else "?" for char in text)
