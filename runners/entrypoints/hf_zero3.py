"""Train a GPT-2 with ``transformers.Trainer`` on a DeepSpeed ZeRO engine (stage from the JSON).

The HF Trainer + DeepSpeed stack of the seeds: ``TrainingArguments(deepspeed=<json>)`` makes the
Trainer wrap the model in a ``DeepSpeedEngine``; the ZeRO stage (1, 2 or 3) is whatever the JSON
says. Without CUDA it runs on CPU: DeepSpeed's CPU accelerator and gloo, with the process group
made by DeepSpeed *before* ``TrainingArguments`` so that accelerate sees every process.

Rank 0 prints the Trainer's dict log lines (``{'loss': ..., 'learning_rate': ...}``) and the
``***** train metrics *****`` block to stdout, which ``logstat parse`` reads, and after
training the evidence of what ran: the engine's type and ZeRO stage, the batch it used, and per
rank how many parameter elements that rank holds (at stage 3 about 1/world of them).

Launch::

    python -u -m torch.distributed.run --nproc_per_node 2 -m logstat.runners.entrypoints.hf_zero3 \\
        --deepspeed ds_config.json --hidden-size 64 --num-layers 2 --num-heads 2 --seq-length 32 \\
        --vocab-size 128 --per-device-train-batch-size 2 --gradient-accumulation-steps 2 \\
        --max-steps 5 --learning-rate 1e-3 --precision fp32 --output-dir out --seed 1234
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
from logstat.runners.entrypoints.arguments import (
    PRECISIONS,
    add_gpt2_shape_arguments,
    check_heads_divide_hidden,
    positive_float,
    positive_int,
)
from logstat.runners.entrypoints.data import RandomTokens
from logstat.runners.entrypoints.distributed import emit, finish
from logstat.runners.entrypoints.model import GPT2Shape, build_gpt2


@dataclass(frozen=True, kw_only=True)
class HFRunConfig:
    """Everything one HF Trainer + DeepSpeed run needs, validated."""

    deepspeed: Path
    """DeepSpeed JSON config; its ``zero_optimization.stage`` picks the ZeRO stage."""
    zero_stage: int
    """The ZeRO stage read from ``deepspeed`` (0 to 3)."""
    shape: GPT2Shape
    """Model shape."""
    per_device_train_batch_size: int
    """Samples per rank per micro step."""
    gradient_accumulation_steps: int
    """Micro steps per optimizer step."""
    max_steps: int
    """Optimizer steps to run."""
    learning_rate: float
    """Peak learning rate of the Trainer's schedule (linear decay to 0 over ``max_steps``)."""
    precision: str
    """``fp32``, ``fp16`` or ``bf16``; must agree with the JSON's ``fp16``/``bf16`` sections."""
    activation_checkpointing: bool
    """Gradient (activation) checkpointing of every transformer block."""
    output_dir: Path
    """The Trainer's output directory; nothing is saved in it (``save_strategy="no"``)."""
    seed: int
    """Seed of the weights, the synthetic tokens and the Trainer."""
    logging_steps: int = 1
    """Optimizer steps between the Trainer's loss lines, the spec's ``train.log_interval``. DeepSpeed prints
    no step lines of its own under the Trainer: accelerate sets its ``steps_per_print`` to inf."""


def build_parser() -> argparse.ArgumentParser:
    """The command line; flag names follow ``TrainingArguments`` where it has one."""
    parser = argparse.ArgumentParser(
        prog="python -m torch.distributed.run ... -m logstat.runners.entrypoints.hf_zero3",
        description="GPT-2 training with transformers.Trainer on a DeepSpeed ZeRO engine.",
    )
    parser.add_argument("--deepspeed", required=True, type=Path, metavar="DS_CONFIG_JSON")
    add_gpt2_shape_arguments(parser, heads_dest="num_heads")
    required = {"required": True, "type": positive_int}
    parser.add_argument("--per-device-train-batch-size", dest="per_device_train_batch_size", **required)
    parser.add_argument("--gradient-accumulation-steps", dest="gradient_accumulation_steps", **required)
    parser.add_argument("--max-steps", dest="max_steps", **required)
    parser.add_argument("--learning-rate", dest="learning_rate", required=True, type=positive_float)
    parser.add_argument("--precision", required=True, choices=PRECISIONS)
    parser.add_argument("--activation-checkpointing", dest="activation_checkpointing", action="store_true")
    parser.add_argument("--output-dir", dest="output_dir", required=True, type=Path)
    parser.add_argument("--seed", required=True, type=int)
    parser.add_argument("--logging-steps", dest="logging_steps", type=positive_int, default=1)
    return parser


def _world_size() -> int:
    """Processes of this run, as the launcher says (``WORLD_SIZE``; 1 when run without it)."""
    return int(os.environ.get("WORLD_SIZE", "1"))


def _check_batch_value(parser, ds_config: dict, key: str, expected: int, flag_rule: str) -> None:
    """A batch value written in the JSON must be "auto" or equal what the flags give."""
    value = ds_config.get(key, "auto")
    if value != "auto" and value != expected:
        parser.error(f"--deepspeed: {key}={value} in the JSON disagrees with {flag_rule} = {expected}")


def _check_precision(parser, ds_config: dict, precision: str) -> None:
    """The JSON's fp16/bf16 sections must say what --precision says (DeepSpeed runs what the JSON says)."""
    for kind in ("fp16", "bf16"):
        section = ds_config.get(kind, {})
        enabled = section.get("enabled", False) if isinstance(section, dict) else section
        wanted = precision == kind
        if enabled != "auto" and bool(enabled) != wanted:
            parser.error(
                f"--deepspeed: {kind}.enabled={enabled!r} in the JSON disagrees with --precision {precision}"
            )


def read_zero_stage(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    """Read and check the DeepSpeed JSON: it exists, parses, has a stage 0-3, and its precision and
    batch agree with the flags."""
    path: Path = args.deepspeed
    if not path.is_file():
        parser.error(f"--deepspeed={path}: no such file")
    try:
        ds_config = json.loads(path.read_text())
    except json.JSONDecodeError as error:
        parser.error(f"--deepspeed={path}: not valid JSON ({error})")
    if not isinstance(ds_config, dict):
        parser.error(f"--deepspeed={path}: the JSON must be an object")
    zero = ds_config.get("zero_optimization", {})
    if not isinstance(zero, dict):
        parser.error(f"--deepspeed={path}: zero_optimization must be an object, not {zero!r}")
    stage = zero.get("stage", 0)
    if stage not in (0, 1, 2, 3):
        parser.error(f"--deepspeed={path}: zero_optimization.stage={stage!r} must be 0, 1, 2 or 3")
    _check_precision(parser, ds_config, args.precision)
    micro, gas = args.per_device_train_batch_size, args.gradient_accumulation_steps
    _check_batch_value(
        parser, ds_config, "train_micro_batch_size_per_gpu", micro, "--per-device-train-batch-size"
    )
    _check_batch_value(parser, ds_config, "gradient_accumulation_steps", gas, "--gradient-accumulation-steps")
    world = _world_size()
    _check_batch_value(
        parser,
        ds_config,
        "train_batch_size",
        micro * gas * world,
        f"--per-device-train-batch-size * --gradient-accumulation-steps * world size {world}",
    )
    return stage


def parse_config(argv: Sequence[str]) -> HFRunConfig:
    """Parse and validate ``argv``; a bad value exits 2 with a message naming the flag and the rule."""
    parser = build_parser()
    args = parser.parse_args(argv)
    check_heads_divide_hidden(parser, num_heads=args.num_heads, hidden_size=args.hidden_size)
    if args.output_dir.exists() and not args.output_dir.is_dir():
        parser.error(f"--output-dir={args.output_dir}: exists and is not a directory")
    zero_stage = read_zero_stage(parser, args)
    return HFRunConfig(
        deepspeed=args.deepspeed,
        zero_stage=zero_stage,
        shape=GPT2Shape(
            hidden_size=args.hidden_size,
            num_layers=args.num_layers,
            num_attention_heads=args.num_heads,
            seq_length=args.seq_length,
            vocab_size=args.vocab_size,
        ),
        per_device_train_batch_size=args.per_device_train_batch_size,
        gradient_accumulation_steps=args.gradient_accumulation_steps,
        max_steps=args.max_steps,
        learning_rate=args.learning_rate,
        precision=args.precision,
        activation_checkpointing=args.activation_checkpointing,
        output_dir=args.output_dir,
        seed=args.seed,
        logging_steps=args.logging_steps,
    )


def engine_evidence(engine: object) -> str:
    """What the Trainer really wrapped the model in, and the batch that engine runs."""
    import deepspeed

    kind = type(engine)
    is_engine = isinstance(engine, deepspeed.DeepSpeedEngine)
    line = (
        f"deepspeed engine | trainer.model_wrapped: {kind.__module__}.{kind.__qualname__} |"
        f" is DeepSpeedEngine: {is_engine} |"
    )
    if is_engine:
        line += (
            f" zero stage: {engine.zero_optimization_stage()} |"
            f" world size: {engine.world_size} |"
            f" train batch size: {engine.train_batch_size()} |"
            f" micro batch size per gpu: {engine.train_micro_batch_size_per_gpu()} |"
            f" gradient accumulation steps: {engine.gradient_accumulation_steps()} |"
        )
    return line


def partition_evidence(module: torch.nn.Module, *, rank: int, stage: int) -> str:
    """How many parameter elements this rank holds, against the model's full count.

    Under ZeRO-3 a parameter's full size is ``ds_numel`` and this rank's shard is ``ds_tensor``
    (the local tensor itself is empty); at lower stages every rank holds whole parameters.
    """
    named = list(module.named_parameters())
    partitioned = all(hasattr(p, "ds_tensor") for _, p in named)
    full = sum(p.ds_numel if partitioned else p.numel() for _, p in named)
    local = sum(p.ds_tensor.numel() if partitioned else p.numel() for _, p in named)
    name, first = named[0]
    example_full = first.ds_numel if partitioned else first.numel()
    example_local = first.ds_tensor.numel() if partitioned else first.numel()
    return (
        f"zero parameters | rank {rank} | stage {stage} | partitioned: {partitioned} |"
        f" parameters: {len(named)} | full numel: {full} | local numel: {local} |"
        f" {name} full: {example_full} local: {example_local} |"
    )


def run(config: HFRunConfig) -> None:
    """Train as configured; rank 0 prints the Trainer's logs and the evidence lines to stdout."""
    on_gpu = torch.cuda.is_available()
    if not on_gpu:
        # Picked at deepspeed's import: without it DeepSpeed probes for CUDA and fails.
        os.environ.setdefault("DS_ACCELERATOR", "cpu")
    import deepspeed
    from deepspeed.accelerator import get_accelerator
    from transformers import Trainer, TrainingArguments

    if config.precision == "fp16" and not get_accelerator().is_fp16_supported():
        sys.exit(
            f"--precision fp16: DeepSpeed's {get_accelerator().device_name()} accelerator does not support fp16; "
            "use bf16 or fp32 here"
        )

    # DeepSpeed makes the process group first: accelerate then sees all ranks (else it counts one
    # process on CPU and DeepSpeed's train_batch_size check fails).
    deepspeed.init_distributed(dist_backend="nccl" if on_gpu else "gloo")
    rank = torch.distributed.get_rank()
    world = torch.distributed.get_world_size()
    if rank == 0:
        # DeepSpeed logs at WARNING by default; at INFO rank 0 prints the engine's configuration dump
        # (ZeRO stage, batch sizes) and its `step=N, skipped=N, lr=[...]` lines, which the log keeps.
        deepspeed.utils.logging.set_log_level_from_string("info")
    training_args = TrainingArguments(
        output_dir=str(config.output_dir),
        deepspeed=str(config.deepspeed),
        use_cpu=not on_gpu,
        per_device_train_batch_size=config.per_device_train_batch_size,
        gradient_accumulation_steps=config.gradient_accumulation_steps,
        max_steps=config.max_steps,
        learning_rate=config.learning_rate,
        logging_steps=config.logging_steps,
        gradient_checkpointing=config.activation_checkpointing,
        fp16=config.precision == "fp16",
        bf16=config.precision == "bf16",
        report_to=[],
        save_strategy="no",
        seed=config.seed,
        # PrinterCallback instead of tqdm: the dict log lines go to stdout, one per step.
        disable_tqdm=True,
        # The Trainer sets DeepSpeed's logger to this level on the main process (replicas: warning).
        log_level="info",
    )
    # After TrainingArguments: under ZeRO-3 the model is then created already partitioned.
    model = build_gpt2(config.shape, seed=config.seed)
    dataset = RandomTokens(
        num_samples=config.per_device_train_batch_size
        * config.gradient_accumulation_steps
        * world
        * config.max_steps,
        seq_length=config.shape.seq_length,
        vocab_size=config.shape.vocab_size,
        seed=config.seed,
    )
    trainer = Trainer(model=model, args=training_args, train_dataset=dataset)
    result = trainer.train()
    trainer.log_metrics("train", result.metrics)
    # The Trainer's prints (rank 0) are done before any rank writes its evidence.
    torch.distributed.barrier()
    if rank == 0:
        emit(engine_evidence(trainer.model_wrapped))
    engine_module = getattr(trainer.model_wrapped, "module", trainer.model_wrapped)
    # Every rank reports its own shard, one line each.
    emit(partition_evidence(engine_module, rank=rank, stage=config.zero_stage))
    finish("nccl" if on_gpu else "gloo")


def main(argv: Sequence[str] | None = None) -> None:
    """Entry point of ``-m logstat.runners.entrypoints.hf_zero3``."""
    run(parse_config(sys.argv[1:] if argv is None else argv))


if __name__ == "__main__":
    main()
