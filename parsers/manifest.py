"""Run facts from the ``manifest.json`` the runners write beside a run's log.

The manifest holds what was launched (the resolved spec), so its facts override the log's; provenance
says ``manifest``. A log without a readable manifest is read from its lines alone (a broken one is noted).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import polars as pl
from logstat.parsers.base import RunBuilder
from logstat.parsers.schema import RUNS_SCHEMA

MANIFEST_NAME = "manifest.json"

#: fact name -> (spec section, key) in the manifest's ``spec``.
SPEC_FACTS: dict[str, tuple[str, str]] = {
    "tp": ("parallel", "tp"),
    "pp": ("parallel", "pp"),
    "micro_batch_size": ("batch", "micro"),
    "gas": ("batch", "gas"),
    "global_batch_size": ("batch", "global_batch"),
    "seq_len": ("model", "seq_len"),
    "hidden_size": ("model", "hidden_size"),
    "num_layers": ("model", "num_layers"),
    "num_heads": ("model", "num_heads"),
    "vocab_size": ("model", "vocab_size"),
    "zero_stage": ("train", "zero_stage"),
    "offload_optimizer": ("train", "offload_optimizer"),
    "offload_param": ("train", "offload_param"),
    "activation_checkpointing": ("train", "activation_checkpointing"),
    "precision": ("train", "precision"),
    "nodes": ("cluster", "nodes"),
    "gpus_per_node": ("cluster", "gpus_per_node"),
    "gpu_model": ("cluster", "gpu_model"),
    "train_iters": ("", "steps"),
}

#: fact name -> top-level manifest key.
TOP_FACTS: dict[str, str] = {
    "gpus": "world_size",
    "dp": "dp",
    "job_id": "slurm_job_id",
    "stack": "stack",
    "spec_name": "spec_name",
    "run_id": "run_id",
}


def facts(manifest: dict[str, Any]) -> dict[str, Any]:
    """The run facts a manifest states (absent keys are left out, never guessed)."""
    spec = manifest.get("spec") if isinstance(manifest.get("spec"), dict) else {}
    out: dict[str, Any] = {}
    for fact, (section, key) in SPEC_FACTS.items():
        holder = spec if not section else spec.get(section)
        if isinstance(holder, dict) and holder.get(key) is not None:
            out[fact] = holder[key]
    for fact, key in TOP_FACTS.items():
        if manifest.get(key) is not None:
            out[fact] = manifest[key]
    if "run_id" not in out and isinstance(manifest.get("run_dir"), str) and manifest["run_dir"].strip("/\\"):
        # manifests without a run_id key: the run directory's own name, <UTC time>-<short id>
        out["run_id"] = manifest["run_dir"].replace("\\", "/").rstrip("/").rsplit("/", 1)[-1]
    cluster = spec.get("cluster") if isinstance(spec.get("cluster"), dict) else {}
    if cluster.get("use_gpus") is False:
        out.pop("gpu_model", None)  # a CPU run has no GPU model, whatever the spec's cluster says
    if isinstance(out.get("job_id"), int) and not isinstance(out["job_id"], bool):
        out["job_id"] = str(out["job_id"])
    return out


def fits_column(fact: str, value: Any) -> bool:
    """Whether ``value`` has the type of the ``runs`` column ``fact`` (a hand-edited or foreign
    manifest may say ``"world_size": "sixty-four"``, which polars would refuse for the whole frame)."""
    dtype = RUNS_SCHEMA.get(fact)
    if dtype == pl.Boolean:
        return isinstance(value, bool)
    if dtype == pl.String:
        return isinstance(value, str)
    return not isinstance(value, bool) and isinstance(value, int if dtype == pl.Int64 else int | float)


def apply(run: RunBuilder, log_path: Path) -> None:
    """Override ``run``'s facts with those of the manifest beside ``log_path`` (if any)."""
    path = log_path.parent / MANIFEST_NAME
    if not path.is_file():
        return
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        run.state.setdefault("parse_errors", []).append(f"manifest {path}: {exc}")
        return
    if not isinstance(manifest, dict):
        return
    for name, value in facts(manifest).items():
        if fits_column(name, value):
            run.set_fact(name, value, "manifest", 0, override=True)
        else:
            run.state.setdefault("parse_errors", []).append(
                f"manifest {path}: {name}={value!r} is not a {RUNS_SCHEMA[name]}; not used"
            )
