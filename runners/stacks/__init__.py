"""Stacks: how a spec becomes a training command line and a DeepSpeed JSON, one module per stack.

Each module exposes ``STACK: Stack`` and is registered once in ``STACKS``.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from logstat.runners.spec import Spec

from logstat.errors import LogstatError


@dataclass(frozen=True, kw_only=True)
class Stack:
    """One training stack."""

    name: str
    """Registry name, the value of a spec's ``stack``."""
    description: str
    """One line for help and error messages."""
    program: Callable[..., list[str]]
    """``program(spec, *, run_dir, ds_config_path)``: what torch.distributed.run starts on each node."""
    deepspeed_config: Callable[[Spec], dict[str, Any] | None]
    """The DeepSpeed JSON with explicit batch values, or None for a stack without DeepSpeed."""
    environment: Callable[[Spec], Mapping[str, str]]
    """Environment variables the stack needs."""
    optimizers: tuple[str, ...]
    """Values of train.optimizer this stack implements."""
    zero_stages: tuple[int, ...]
    """Values of train.zero_stage this stack implements."""
    zero_stages_why: str = ""
    """Why the other stages are not among them, for the refusal."""
    model_parallel: bool
    """Whether TP/PP > 1 is implemented."""
    launch_check: Callable[[Spec], None] = lambda spec: None
    """Raises LogstatError when the spec cannot be launched from here (e.g. no checkout); dry runs skip it."""
    problems: Callable[[Spec], list[tuple[str, object, str]]] = lambda spec: []
    """The stack's own refusals of a spec, each ``(field, value, rule)`` (``validate.check`` reports them)."""
    section: str | None = None
    """The spec section of this stack's own settings (``megatron``, ``ddp``), which other stacks ignore."""


#: name -> module path: the one place a stack is registered.
STACKS: dict[str, str] = {
    "megatron-deepspeed": "logstat.runners.stacks.megatron_deepspeed",
    "hf-zero3": "logstat.runners.stacks.hf_zero3",
    "ddp-powersgd": "logstat.runners.stacks.ddp_powersgd",
}


def section_owners() -> dict[str, str]:
    """Section name -> the stack whose own settings it holds."""
    return {stack.section: stack.name for stack in map(get_stack, STACKS) if stack.section}


def get_stack(name: str) -> Stack:
    """The stack registered as ``name``; a LogstatError listing the valid names if unknown."""
    module = STACKS.get(name)
    if module is None:
        raise LogstatError(f"stack={name!r} is unknown (stacks: {', '.join(STACKS)})")
    return importlib.import_module(module).STACK


def precision_flags(spec: Spec) -> dict[str, Any]:
    """DeepSpeed's fp16/bf16 sections from train.precision (fp32: both disabled)."""
    precision = spec.train.precision
    return {
        "fp16": {"enabled": precision == "fp16", "loss_scale": 0, "initial_scale_power": 16}
        if precision == "fp16"
        else {"enabled": False},
        "bf16": {"enabled": precision == "bf16"},
    }


def zero_section(spec: Spec) -> dict[str, Any]:
    """DeepSpeed's zero_optimization section from train.zero_stage and the offload switches."""
    train = spec.train
    section: dict[str, Any] = {"stage": train.zero_stage}
    if train.offload_optimizer:
        section["offload_optimizer"] = {"device": "cpu", "pin_memory": True}
    if train.offload_param:
        section["offload_param"] = {"device": "cpu", "pin_memory": True}
    return section


def batch_section(spec: Spec) -> dict[str, int]:
    """Explicit batch values; DeepSpeed asserts train_batch = micro * gas * DP, as validation did."""
    return {
        "train_batch_size": spec.batch.global_batch or 0,
        "train_micro_batch_size_per_gpu": spec.batch.micro,
        "gradient_accumulation_steps": spec.batch.gas,
    }


def deepspeed_json(spec: Spec) -> dict[str, Any]:
    """The DeepSpeed JSON of every DeepSpeed stack: explicit batch values, the ZeRO section, the
    precision sections, and the seed's clip of 1.0 (seeds/001); one print at the end of the run."""
    return {
        **batch_section(spec),
        "gradient_clipping": 1.0,
        "zero_optimization": zero_section(spec),
        **precision_flags(spec),
        "steps_per_print": max(spec.steps, 1),
        "wall_clock_breakdown": False,
    }


def gpt2_shape_flags(spec: Spec) -> list[str]:
    """The model-shape flags of our entry points (their shared parser,
    ``logstat.runners.entrypoints.arguments.add_gpt2_shape_arguments``)."""
    model = spec.model
    return [
        "--hidden-size", str(model.hidden_size),
        "--num-layers", str(model.num_layers),
        "--num-heads", str(model.num_heads),
        "--seq-length", str(model.seq_len),
        "--vocab-size", str(model.vocab_size),
    ]  # fmt: skip
