"""HF Trainer + DeepSpeed ZeRO: our entry point logstat.runners.entrypoints.hf_zero3.

The seed's "HF + Deepspeed Zero 3" benchmark (seeds/001): DP = GPUs, global = micro * gas * DP,
gradient checkpointing. The DeepSpeed JSON states explicit batch values (no "auto"), so what
ran is readable in the file; the Trainer checks them against its own arguments.
"""

from __future__ import annotations

from pathlib import Path

from logstat.runners.spec import Spec
from logstat.runners.stacks import Stack, deepspeed_json, gpt2_shape_flags

ENTRY_POINT = "logstat.runners.entrypoints.hf_zero3"


def program(spec: Spec, *, run_dir: Path, ds_config_path: Path) -> list[str]:
    batch, train = spec.batch, spec.train
    args = [
        "-m", ENTRY_POINT,
        "--deepspeed", str(ds_config_path),
        *gpt2_shape_flags(spec),
        "--per-device-train-batch-size", str(batch.micro),
        "--gradient-accumulation-steps", str(batch.gas),
        "--max-steps", str(spec.steps),
        "--learning-rate", repr(train.lr),
        "--precision", train.precision,
    ]  # fmt: skip
    if train.activation_checkpointing:
        args.append("--activation-checkpointing")
    args += ["--output-dir", str(run_dir / "hf-output"), "--seed", str(train.seed)]
    return args + ["--logging-steps", str(train.log_interval)]


def environment(spec: Spec) -> dict[str, str]:
    # DeepSpeed picks its accelerator from this variable; without it, it looks for CUDA.
    return {} if spec.cluster.use_gpus else {"DS_ACCELERATOR": "cpu"}


STACK = Stack(
    name="hf-zero3",
    description="transformers.Trainer with DeepSpeed ZeRO (stage from train.zero_stage), data parallel",
    program=program,
    deepspeed_config=deepspeed_json,
    environment=environment,
    optimizers=("adamw",),
    zero_stages=(0, 1, 2, 3),
    model_parallel=False,
)
