"""Train a GPT-2 with plain PyTorch DDP and the PowerSGD communication hook (seed 000's recipe).

The recipe of seeds/000_deepspeed_jean_zay_bloom7b_notes.md ("DDP+gradient checkpointing+
adafactor+gradient compression (powerSGD) + gradient accumulation"): DistributedDataParallel
with PowerSGD gradient compression, gradient checkpointing, Adafactor, and gradient
accumulation that synchronises only on the last micro step. Rank 0 writes Megatron's log
format (world-size line, ``arguments`` dump, one ``iteration`` line per logged step), so
``logstat parse`` reads these runs with the Megatron family.

Launch (one process per GPU, or per CPU slot with gloo)::

    python -u -m torch.distributed.run --nproc_per_node 2 -m logstat.runners.entrypoints.ddp_powersgd \\
        --hidden-size 64 --num-layers 2 --num-heads 2 --seq-length 32 --vocab-size 128 \\
        --micro-batch-size 2 --gradient-accumulation-steps 2 --train-iters 5 --lr 1e-3 \\
        --optimizer adafactor --precision fp32 --activation-checkpointing \\
        --powersgd-rank 2 --powersgd-start-iter 2 --seed 1234 --log-interval 1
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass

import torch
import torch.distributed as dist
from logstat.runners.entrypoints.arguments import (
    PRECISIONS,
    add_gpt2_shape_arguments,
    check_heads_divide_hidden,
    positive_float,
    positive_int,
)
from logstat.runners.entrypoints.data import RandomTokens
from logstat.runners.entrypoints.distributed import emit, finish
from logstat.runners.entrypoints.model import GPT2Shape, build_gpt2, parameter_count
from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as powersgd
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, DistributedSampler

CLIP_GRAD = 1.0  # Megatron's default --clip-grad; the logged grad norm is the norm before clipping.
OPTIMIZERS = ("adafactor", "adamw")


@dataclass(frozen=True, kw_only=True)
class DDPRunConfig:
    """Everything one DDP + PowerSGD run needs, validated; field names are Megatron's argument names."""

    hidden_size: int
    """Model width."""
    num_layers: int
    """Transformer blocks."""
    num_attention_heads: int
    """Attention heads; divides ``hidden_size``."""
    seq_length: int
    """Tokens per sample."""
    vocab_size: int
    """Vocabulary size (not padded: no tensor parallelism)."""
    micro_batch_size: int
    """Samples per rank per micro step."""
    gradient_accumulation_steps: int
    """Micro steps per optimizer step; gradients are all-reduced only on the last one."""
    train_iters: int
    """Optimizer steps to run."""
    lr: float
    """Constant learning rate."""
    optimizer: str
    """``adafactor`` (torch.optim.Adafactor, as in seed 000) or ``adamw``."""
    precision: str
    """``fp32``, or autocast compute in ``fp16`` (with a dynamic loss scaler) or ``bf16``."""
    checkpoint_activations: bool
    """Gradient (activation) checkpointing of every transformer block."""
    powersgd_rank: int
    """PowerSGD matrix approximation rank."""
    powersgd_start_iter: int
    """Plain all-reduce before this many synchronised steps, PowerSGD after (>= 2, PowerSGD's rule)."""
    seed: int
    """Seed of the weights and of the synthetic tokens."""
    log_interval: int
    """Steps per ``iteration`` line (times and losses are averaged over the interval)."""


def build_parser() -> argparse.ArgumentParser:
    """The command line; flag names follow Megatron's where Megatron has one."""
    parser = argparse.ArgumentParser(
        prog="python -m torch.distributed.run ... -m logstat.runners.entrypoints.ddp_powersgd",
        description="GPT-2 training with DDP, PowerSGD, gradient checkpointing, Adafactor, gradient accumulation.",
    )
    add_gpt2_shape_arguments(parser, heads_dest="num_attention_heads")
    required = {"required": True, "type": positive_int}
    parser.add_argument("--micro-batch-size", dest="micro_batch_size", **required)
    parser.add_argument("--gradient-accumulation-steps", dest="gradient_accumulation_steps", **required)
    parser.add_argument("--train-iters", dest="train_iters", **required)
    parser.add_argument("--lr", required=True, type=positive_float)
    parser.add_argument("--optimizer", required=True, choices=OPTIMIZERS)
    parser.add_argument("--precision", required=True, choices=PRECISIONS)
    parser.add_argument("--activation-checkpointing", dest="checkpoint_activations", action="store_true")
    parser.add_argument("--powersgd-rank", dest="powersgd_rank", **required)
    parser.add_argument("--powersgd-start-iter", dest="powersgd_start_iter", **required)
    parser.add_argument("--seed", required=True, type=int)
    parser.add_argument("--log-interval", dest="log_interval", type=positive_int, default=1)
    return parser


def parse_config(argv: Sequence[str]) -> DDPRunConfig:
    """Parse and validate ``argv``; a bad value exits 2 with a message naming the flag and the rule."""
    parser = build_parser()
    args = parser.parse_args(argv)
    check_heads_divide_hidden(parser, num_heads=args.num_attention_heads, hidden_size=args.hidden_size)
    if args.powersgd_start_iter < 2:
        parser.error(
            f"--powersgd-start-iter={args.powersgd_start_iter} must be >= 2: PowerSGD's error feedback "
            "starts after DDP has rebuilt its buckets in the first step"
        )
    return DDPRunConfig(**vars(args))


@dataclass(frozen=True, kw_only=True)
class StepResult:
    """What one optimizer step measured."""

    elapsed_s: float
    """Wall time of the step (all micro steps, communication and optimizer)."""
    loss: float
    """Language-model loss averaged over micro steps and data-parallel ranks."""
    grad_norm: float
    """Global gradient norm before clipping."""
    loss_scale: float
    """Loss scale used for this step (1.0 without fp16)."""
    skipped: bool
    """The fp16 scaler found inf/nan gradients and skipped the update."""


def megatron_iteration_line(
    *,
    iteration: int,
    train_iters: int,
    consumed_samples: int,
    elapsed_ms: float,
    learning_rate: float,
    global_batch_size: int,
    lm_loss: float,
    loss_scale: float,
    grad_norm: float,
    skipped_iterations: int,
    nan_iterations: int,
) -> str:
    """One ``iteration`` line, field for field in Megatron-LM's ``training_log`` format."""
    return (
        f" iteration {iteration:8d}/{train_iters:8d} |"
        f" consumed samples: {consumed_samples:12d} |"
        f" elapsed time per iteration (ms): {elapsed_ms:.1f} |"
        f" learning rate: {learning_rate:.3E} |"
        f" global batch size: {global_batch_size:5d} |"
        f" lm loss: {lm_loss:.6E} |"
        f" loss scale: {loss_scale:.1f} |"
        f" grad norm: {grad_norm:.3f} |"
        f" number of skipped iterations: {skipped_iterations:3d} |"
        f" number of nan iterations: {nan_iterations:3d} |"
    )


def megatron_arguments_dump(arguments: dict[str, object]) -> list[str]:
    """Megatron's ``arguments`` block: names sorted case-insensitively, dots to column 50."""
    lines = ["------------------------ arguments ------------------------"]
    for name in sorted(arguments, key=str.lower):
        dots = "." * (48 - len(name))
        lines.append(f"  {name} {dots} {arguments[name]}")
    lines.append("-------------------- end of arguments ---------------------")
    return lines


def megatron_header(config: DDPRunConfig, *, world_size: int, backend: str) -> list[str]:
    """The lines Megatron prints before training that carry the run's facts."""
    arguments: dict[str, object] = {
        **asdict(config),
        "max_position_embeddings": config.seq_length,
        "padded_vocab_size": config.vocab_size,
        "global_batch_size": global_batch_size(config, world_size),
        "fp16": config.precision == "fp16",
        "bf16": config.precision == "bf16",
        "params_dtype": "torch.float32",
        "world_size": world_size,
        "data_parallel_size": world_size,
        "tensor_model_parallel_size": 1,
        "pipeline_model_parallel_size": 1,
        "distributed_backend": backend,
        "DDP_impl": "torch",
        "clip_grad": CLIP_GRAD,
        "rank": 0,
    }
    del arguments["precision"], arguments["vocab_size"]
    return [
        f"using world size: {world_size}, data-parallel-size: {world_size}, "
        "tensor-model-parallel size: 1, pipeline-model-parallel size: 1 ",
        *megatron_arguments_dump(arguments),
        f"setting number of micro-batches to constant {config.gradient_accumulation_steps}",
        f" > padded vocab (size: {config.vocab_size}) with 0 dummy tokens (new size: {config.vocab_size})",
    ]


def global_batch_size(config: DDPRunConfig, world_size: int) -> int:
    """Samples per optimizer step: micro * gas * DP, DP = world size (no TP/PP here; seed 002)."""
    return config.micro_batch_size * config.gradient_accumulation_steps * world_size


def make_optimizer(config: DDPRunConfig, parameters) -> torch.optim.Optimizer:
    """Adafactor (seed 000's choice for DDP: factored second moments, far less optimizer memory) or AdamW.

    torch's Adafactor takes ``lr`` as the cap of its relative step size ``min(lr, 1/sqrt(t))``,
    which it scales by each parameter's RMS; the logged learning rate is this ``lr``.
    """
    if config.optimizer == "adafactor":
        return torch.optim.Adafactor(parameters, lr=config.lr)
    return torch.optim.AdamW(parameters, lr=config.lr)


def micro_batches(loader: DataLoader, device: torch.device) -> Iterator[dict[str, torch.Tensor]]:
    """The loader's batches moved to ``device``."""
    for batch in loader:
        yield {name: tensor.to(device, non_blocking=True) for name, tensor in batch.items()}


def train_step(
    config: DDPRunConfig,
    model: DistributedDataParallel,
    optimizer: torch.optim.Optimizer,
    scaler: torch.amp.GradScaler | None,
    batches: Iterator[dict[str, torch.Tensor]],
    device: torch.device,
) -> StepResult:
    """One optimizer step over ``gradient_accumulation_steps`` micro batches."""
    start = time.perf_counter()
    autocast_dtype = {"fp16": torch.float16, "bf16": torch.bfloat16}.get(config.precision)
    steps = config.gradient_accumulation_steps
    loss_sum = torch.zeros((), device=device)
    for micro_step in range(steps):
        # Gradients stay local until the last micro step: one all-reduce (one PowerSGD round) per step.
        sync = model.no_sync() if micro_step < steps - 1 else contextlib.nullcontext()
        with sync:
            with torch.autocast(device.type, dtype=autocast_dtype, enabled=autocast_dtype is not None):
                loss = model(**next(batches)).loss / steps
            (scaler.scale(loss) if scaler else loss).backward()
        loss_sum += loss.detach().float()
    loss_scale = scaler.get_scale() if scaler else 1.0
    if scaler:
        scaler.unscale_(optimizer)
    grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), CLIP_GRAD)
    if scaler:
        scaler.step(optimizer)
        scaler.update()
        skipped = scaler.get_scale() < loss_scale
    else:
        optimizer.step()
        skipped = False
    optimizer.zero_grad(set_to_none=True)
    # Summed then divided: gloo has no AVG reduction.
    dist.all_reduce(loss_sum, op=dist.ReduceOp.SUM)
    loss_sum /= dist.get_world_size()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return StepResult(
        elapsed_s=time.perf_counter() - start,
        loss=loss_sum.item(),
        grad_norm=grad_norm.item(),
        loss_scale=loss_scale,
        skipped=skipped,
    )


def powersgd_evidence(model: DistributedDataParallel, state: powersgd.PowerSGDState) -> str:
    """What DDP says its communication hook is, and what the PowerSGD state has done."""
    hook_name = model._get_ddp_logging_data().get("comm_hook", "none")
    rate, numel_before, numel_after = state.compression_stats()
    return (
        f"powersgd | comm hook: {hook_name} | matrix approximation rank: {state.matrix_approximation_rank} |"
        f" start iter: {state.start_powerSGD_iter} | hook iterations: {state.iter} |"
        f" numel before compression: {numel_before} | numel after compression: {numel_after} |"
        f" compression rate: {rate:.3f} |"
    )


def _setup_device() -> tuple[torch.device, str]:
    """NCCL on the local GPU when there is one, gloo on CPU otherwise."""
    if torch.cuda.is_available():
        local_rank = int(os.environ.get("LOCAL_RANK", "0"))
        torch.cuda.set_device(local_rank)
        return torch.device("cuda", local_rank), "nccl"
    return torch.device("cpu"), "gloo"


def run(config: DDPRunConfig) -> None:
    """Train as configured; rank 0 prints the Megatron-format log to stdout."""
    device, backend = _setup_device()
    dist.init_process_group(backend=backend)
    rank, world_size = dist.get_rank(), dist.get_world_size()

    def log(line: str) -> None:
        if rank == 0:
            emit(line)

    for line in megatron_header(config, world_size=world_size, backend=backend):
        log(line)
    shape = GPT2Shape(
        hidden_size=config.hidden_size,
        num_layers=config.num_layers,
        num_attention_heads=config.num_attention_heads,
        seq_length=config.seq_length,
        vocab_size=config.vocab_size,
    )
    model = build_gpt2(shape, seed=config.seed).to(device)
    log(f" > number of parameters on (tensor, pipeline) model parallel rank (0, 0): {parameter_count(model)}")
    if config.checkpoint_activations:
        model.activation_checkpointing_enable()
    ddp_model = DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None)
    state = powersgd.PowerSGDState(
        process_group=None,
        matrix_approximation_rank=config.powersgd_rank,
        start_powerSGD_iter=config.powersgd_start_iter,
        random_seed=config.seed,
    )
    ddp_model.register_comm_hook(state, powersgd.powerSGD_hook)

    per_step = global_batch_size(config, world_size)
    dataset = RandomTokens(
        num_samples=per_step * config.train_iters,
        seq_length=config.seq_length,
        vocab_size=config.vocab_size,
        seed=config.seed,
    )
    sampler = DistributedSampler(dataset, num_replicas=world_size, rank=rank, shuffle=False)
    loader = DataLoader(dataset, batch_size=config.micro_batch_size, sampler=sampler, drop_last=True)
    batches = micro_batches(loader, device)
    optimizer = make_optimizer(config, ddp_model.parameters())
    scaler = torch.amp.GradScaler(device.type) if config.precision == "fp16" else None

    log("training ...")
    interval: list[StepResult] = []
    for iteration in range(1, config.train_iters + 1):
        interval.append(train_step(config, ddp_model, optimizer, scaler, batches, device))
        if iteration % config.log_interval == 0 or iteration == config.train_iters:
            log(_interval_line(config, interval, iteration=iteration, global_batch=per_step))
            interval = []
    log(powersgd_evidence(ddp_model, state))
    finish(backend)


def _interval_line(
    config: DDPRunConfig, interval: list[StepResult], *, iteration: int, global_batch: int
) -> str:
    """Megatron's line for the steps of one log interval: times and losses averaged over it."""
    finite = [step for step in interval if math.isfinite(step.loss)]
    last = interval[-1]
    return megatron_iteration_line(
        iteration=iteration,
        train_iters=config.train_iters,
        consumed_samples=iteration * global_batch,
        elapsed_ms=1000.0 * sum(step.elapsed_s for step in interval) / len(interval),
        learning_rate=config.lr,
        global_batch_size=global_batch,
        lm_loss=sum(step.loss for step in finite) / len(finite) if finite else math.nan,
        loss_scale=last.loss_scale,
        grad_norm=last.grad_norm,
        skipped_iterations=sum(step.skipped for step in interval),
        nan_iterations=len(interval) - len(finite),
    )


def main(argv: Sequence[str] | None = None) -> None:
    """Entry point of ``-m logstat.runners.entrypoints.ddp_powersgd``."""
    run(parse_config(sys.argv[1:] if argv is None else argv))


if __name__ == "__main__":
    main()
