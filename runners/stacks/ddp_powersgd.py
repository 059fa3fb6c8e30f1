"""PyTorch DDP + PowerSGD gradient compression: our entry point logstat.runners.entrypoints.ddp_powersgd.

Seed 000's cheapest recipe: DDP + gradient checkpointing + Adafactor + PowerSGD + gradient
accumulation (256 on 16-32 A100s). No DeepSpeed: no JSON.
"""

from __future__ import annotations

from pathlib import Path

from logstat.runners.spec import Spec
from logstat.runners.stacks import Stack, gpt2_shape_flags

ENTRY_POINT = "logstat.runners.entrypoints.ddp_powersgd"


def program(spec: Spec, *, run_dir: Path, ds_config_path: Path) -> list[str]:
    batch, train = spec.batch, spec.train
    args = [
        "-m", ENTRY_POINT,
        *gpt2_shape_flags(spec),
        "--micro-batch-size", str(batch.micro),
        "--gradient-accumulation-steps", str(batch.gas),
        "--train-iters", str(spec.steps),
        "--lr", repr(train.lr),
        "--optimizer", train.optimizer,
        "--precision", train.precision,
    ]  # fmt: skip
    if train.activation_checkpointing:
        args.append("--activation-checkpointing")
    args += [
        "--powersgd-rank", str(spec.ddp.powersgd_rank),
        "--powersgd-start-iter", str(spec.ddp.powersgd_start_iter),
        "--seed", str(train.seed),
        "--log-interval", str(train.log_interval),
    ]  # fmt: skip
    return args


def largest_compressed_rank(spec: Spec) -> int | None:
    """The largest PowerSGD rank at which torch's hook compresses one of the GPT-2's weight gradients
    (token and position embeddings, attention's h x 3h and h x h, the MLP's h x 4h and 4h x h): an
    n x m one when ``2*(n+m)*r < n*m`` (powerSGD_hook.py ``_should_compress``, ``min_compression_rate``
    2). None when the shape is not known."""
    model = spec.model
    sides = (model.hidden_size, model.vocab_size, model.seq_len)
    if not all(isinstance(side, int) and side >= 1 for side in sides):
        return None
    h, vocab, seq = sides
    matrices = [(vocab, h), (seq, h), (h, 3 * h), (h, h), (h, 4 * h)]
    return max(-(-n * m // (2 * (n + m))) - 1 for n, m in matrices)


def problems(spec: Spec) -> list[tuple[str, object, str]]:
    """PowerSGD's settings the hook cannot run with."""
    found: list[tuple[str, object, str]] = []
    if spec.ddp.powersgd_rank < 1:
        found.append(("ddp.powersgd_rank", spec.ddp.powersgd_rank, "must be >= 1"))
    elif (largest := largest_compressed_rank(spec)) is not None and spec.ddp.powersgd_rank > largest:
        rule = (
            f"compresses none of the model's gradient matrices: PowerSGD sends an n x m one as rank-r factors "
            f"only when 2*(n+m)*r < n*m (torch's min_compression_rate 2), so r <= {largest} here"
        )
        found.append(("ddp.powersgd_rank", spec.ddp.powersgd_rank, rule))
    if spec.ddp.powersgd_start_iter < 2:
        rule = "must be >= 2 (PowerSGD's error feedback and warm start need plain all-reduce first)"
        found.append(("ddp.powersgd_start_iter", spec.ddp.powersgd_start_iter, rule))
    return found


STACK = Stack(
    name="ddp-powersgd",
    description="torch DistributedDataParallel + PowerSGD hook, Adafactor, gradient checkpointing and accumulation",
    program=program,
    deepspeed_config=lambda spec: None,
    environment=lambda spec: {},
    optimizers=("adafactor", "adamw"),
    zero_stages=(0,),
    model_parallel=False,
    problems=problems,
    section="ddp",
)
