"""Megatron-DeepSpeed 3D parallelism (TP x PP x DP): pretrain_gpt.py of a repository checkout.

Flags are those of bigscience-workshop/Megatron-DeepSpeed's argument parser (the list in
fixtures/reference/megatron-deepspeed-flags.tsv); the recipe is the seed's 52B benchmark script
(seeds/001, "Megatron + Deepspeed 3D"): fp16, activation checkpointing, cosine decay, clip 1.0.
Megatron derives gas = global / (micro * DP); the DeepSpeed JSON states the same three numbers.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from logstat.runners.presets import GPT2_VOCAB_SIZE
from logstat.runners.spec import Spec
from logstat.runners.stacks import Stack, deepspeed_json

from logstat.errors import LogstatError

CHECKOUT_ENV = "MEGATRON_DEEPSPEED_DIR"
#: pretrain_gpt.py's --data-impl choices (fixtures/reference/megatron-deepspeed-flags.tsv)
DATA_IMPLS = ("lazy", "cached", "mmap", "infer")
#: Megatron's --split: up to three weights (train, validation, test) split at ',' or '/'
_SPLIT = re.compile(r"\d+(\.\d*)?(?:(?P<sep>[,/])\d+(\.\d*)?(?:(?P=sep)\d+(\.\d*)?)?)?")
#: Shown in the dry-run script when no checkout is known; launching refuses it.
UNKNOWN_CHECKOUT = "MEGATRON_DEEPSPEED_DIR-is-not-set"


def checkout_dir(spec: Spec) -> Path | None:
    """The checkout: megatron.dir, else $MEGATRON_DEEPSPEED_DIR, else None."""
    directory = spec.megatron.dir or os.environ.get(CHECKOUT_ENV)
    return Path(directory).expanduser().absolute() if directory else None


def program(spec: Spec, *, run_dir: Path, ds_config_path: Path) -> list[str]:
    model, batch, train, mega = spec.model, spec.batch, spec.train, spec.megatron
    checkout = checkout_dir(spec)
    script = str(checkout / "pretrain_gpt.py") if checkout else f"{UNKNOWN_CHECKOUT}/pretrain_gpt.py"
    args = [
        script,
        "--tensor-model-parallel-size", str(spec.parallel.tp),
        "--pipeline-model-parallel-size", str(spec.parallel.pp),
        "--num-layers", str(model.num_layers),
        "--hidden-size", str(model.hidden_size),
        "--num-attention-heads", str(model.num_heads),
        "--seq-length", str(model.seq_len),
        "--max-position-embeddings", str(model.seq_len),
        "--micro-batch-size", str(batch.micro),
        "--global-batch-size", str(batch.global_batch),
        "--train-iters", str(spec.steps),
        "--optimizer", train.optimizer,
        "--lr", repr(train.lr),
        "--lr-decay-style", "cosine",
        "--lr-decay-iters", str(spec.steps),
        "--lr-warmup-fraction", "0.01",
        "--clip-grad", "1.0",
        "--weight-decay", "0.01",
        "--seed", str(train.seed),
        "--log-interval", str(train.log_interval),
        "--eval-interval", str(max(spec.steps, 1000)),
        "--eval-iters", "1",
        "--distributed-backend", "nccl",
        "--tokenizer-type", "GPT2BPETokenizer",
        "--data-impl", mega.data_impl,
        "--split", mega.split,
    ]  # fmt: skip
    data_files = {
        "--data-path": mega.data_path,
        "--vocab-file": mega.vocab_file,
        "--merge-file": mega.merge_file,
    }
    for flag, value in data_files.items():
        if value:
            args += [flag, value]
    if train.precision in ("fp16", "bf16"):
        args.append(f"--{train.precision}")
    if train.activation_checkpointing:
        args += ["--checkpoint-activations", "--deepspeed-activation-checkpointing"]
    args += ["--deepspeed", "--deepspeed_config", str(ds_config_path), "--zero-stage", str(train.zero_stage)]
    return args


def launch_check(spec: Spec) -> None:
    """A checkout with pretrain_gpt.py and data files must exist to launch (a dry run needs neither)."""
    checkout = checkout_dir(spec)
    if checkout is None:
        raise LogstatError(
            f"megatron.dir is not set and {CHECKOUT_ENV} is empty: Megatron-DeepSpeed is a repository "
            "checkout, not a package; give its path"
        )
    if not (checkout / "pretrain_gpt.py").is_file():
        raise LogstatError(
            f"megatron.dir={str(checkout)!r} has no pretrain_gpt.py: not a Megatron-DeepSpeed checkout"
        )
    for name in ("data_path", "vocab_file", "merge_file"):
        if not getattr(spec.megatron, name):
            raise LogstatError(f"megatron.{name} is not set: pretrain_gpt.py needs it to train")


def problems(spec: Spec) -> list[tuple[str, object, str]]:
    """What pretrain_gpt.py would refuse after launch: a --data-impl outside its choices, a --split its
    dataset code cannot read, a vocabulary size it never receives."""
    found: list[tuple[str, object, str]] = []
    mega = spec.megatron
    if mega.data_impl not in DATA_IMPLS:
        found.append(
            ("megatron.data_impl", mega.data_impl, f"must be one of {', '.join(DATA_IMPLS)} (--data-impl)")
        )
    if _SPLIT.fullmatch(mega.split) is None or not sum(float(w) for w in re.split("[,/]", mega.split)) > 0:
        rule = "must be up to three weights of train, validation and test split at ',' or '/', not all zero"
        found.append(("megatron.split", mega.split, f"{rule} (--split, e.g. 949,50,1)"))
    if spec.model.vocab_size != GPT2_VOCAB_SIZE:
        rule = (
            f"must be GPT-2's {GPT2_VOCAB_SIZE} with stack megatron-deepspeed: pretrain_gpt.py takes its "
            "vocabulary from megatron.vocab_file (GPT2BPETokenizer), not from a size"
        )
        found.append(("model.vocab_size", spec.model.vocab_size, rule))
    return found


STACK = Stack(
    name="megatron-deepspeed",
    description="Megatron-DeepSpeed pretrain_gpt.py, 3D parallelism (needs CUDA and a checkout)",
    program=program,
    deepspeed_config=deepspeed_json,
    environment=lambda spec: {},
    optimizers=("adam", "sgd"),
    zero_stages=(0, 1),
    zero_stages_why=(
        "pretrain_gpt.py builds its model as a DeepSpeed PipelineModule under --deepspeed whatever parallel.pp "
        "is, and DeepSpeed's PipelineEngine asserts 'ZeRO-2 and ZeRO-3 are incompatible with pipeline "
        "parallelism' (deepspeed/runtime/pipe/engine.py)"
    ),
    model_parallel=True,
    launch_check=launch_check,
    problems=problems,
    section="megatron",
)
