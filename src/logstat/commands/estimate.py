"""`logstat estimate`: parameters, ZeRO memory, pipeline efficiency, TFLOPs and days of a planned run."""

from __future__ import annotations

import copy

import click

from logstat.errors import LogstatError

#: option -> the spec field it sets (as a --set override); without SPEC the fields not given keep
#: the values of logstat.runners.plan_text.BASE_SPEC.
FIELDS = {
    "seq_len": "model.seq_len",
    "vocab": "model.vocab_size",
    "tp": "parallel.tp",
    "pp": "parallel.pp",
    "zero_stage": "train.zero_stage",
    "micro_batch": "batch.micro",
    "gas": "batch.gas",
    "sec_per_iter": "estimate.sec_per_iter",
    "tokens": "estimate.tokens",
    "gpu_model": "cluster.gpu_model",
    "precision": "train.precision",
    "checkpointing": "train.activation_checkpointing",
    "optimizer": "train.optimizer",
    "stack": "stack",
}
#: the stack a spec-less estimate with ZeRO 2 or 3 follows (Megatron-DeepSpeed implements 0 and 1)
ZERO_STACK = "hf-zero3"
#: options that change the global batch, which is then derived again
BATCH_SHAPING = ("tp", "pp", "micro_batch", "gas", "gpus")


@click.command()
@click.argument("spec", required=False)
@click.option(
    "--set",
    "overrides",
    multiple=True,
    metavar="SECTION.FIELD=VALUE",
    help="Override a field of SPEC (or of the options' plan), as `logstat run --set` does (repeatable).",
)
@click.option(
    "--model",
    help="A GPT-2 size preset of the seed's scripts (MSIZE, in billions), e.g. 52B; an unknown one lists them.",
)
@click.option("--hidden", type=int, help="Hidden size (instead of --model).")
@click.option("--layers", type=int, help="Transformer layers (instead of --model).")
@click.option("--seq-len", type=int, help="Sequence length [1024].")
@click.option("--vocab", type=int, help="Vocabulary size [50257].")
@click.option("--gpus", type=int, help="World size (required without SPEC).")
@click.option("--tp", type=int, help="Tensor-parallel degree [1].")
@click.option("--pp", type=int, help="Pipeline-parallel degree [1].")
@click.option("--zero", "zero_stage", type=click.IntRange(0, 3), help="ZeRO stage [0].")
@click.option("--offload-optimizer", is_flag=True, help="ZeRO-Offload: optimizer states in CPU memory.")
@click.option("--offload-param", is_flag=True, help="Parameters in CPU memory too (ZeRO stage 3).")
@click.option("--micro-batch", type=int, help="Micro batch per GPU [1].")
@click.option("--gas", type=int, help="Gradient accumulation steps (PP chunks) [1].")
@click.option("--sec-per-iter", type=float, help="Measured or assumed seconds per iteration (global batch).")
@click.option("--tokens", type=float, help="Tokens to train, for the days [100e9].")
@click.option("--gpu", "gpu_model", help="GPU model for MFU, e.g. V100-SXM2-32GB, A100-SXM4-80GB, H100-SXM.")
@click.option(
    "--precision",
    type=click.Choice(["fp32", "fp16", "bf16"]),
    help="Training precision; MFU divides by its peak [fp16].",
)
@click.option(
    "--optimizer",
    type=click.Choice(["adam", "adamw", "sgd", "adafactor"]),
    help="Optimizer, for the bytes of its states per parameter [adam].",
)
@click.option(
    "--stack",
    help="Stack whose rules apply: megatron-deepspeed, hf-zero3, ddp-powersgd [megatron-deepspeed; with "
    "--zero 2 or 3, which Megatron-DeepSpeed's pipeline engine refuses, hf-zero3 and its adamw].",
)
@click.option(
    "--checkpointing/--no-checkpointing",
    default=None,
    help="Activation checkpointing (seed formula factor 4, else 3) [on].",
)
def estimate(
    spec: str | None,
    overrides: tuple[str, ...],
    model: str | None,
    hidden: int | None,
    layers: int | None,
    gpus: int | None,
    offload_optimizer: bool,
    offload_param: bool,
    **options: object,
) -> None:
    """Estimate a planned run: parameter count, model-state memory per GPU by ZeRO stage (by the
    optimizer's bytes per parameter), pipeline efficiency, and with --sec-per-iter the TFLOPs per
    GPU and the days to train 100B tokens. The plan passes the checks of `logstat run` (one planner):
    refusals name the spec field; warnings (memory, pipeline bubble, time limit) go to stderr.

    Describe the run with options, or give a SPEC (a TOML file or a shipped spec's name, as for
    `logstat run`) which the options and --set then override.

    \b
    Example:
      logstat estimate --model 52B --gpus 64 --tp 4 --pp 16 --zero 1 --micro-batch 4 --gas 256 --sec-per-iter 129
      logstat estimate --hidden 4096 --layers 30 --gpus 8 --zero 3 --gpu A100-SXM4-80GB --precision bf16
      logstat estimate gpt2-52b-megatron-ds --set steps=1000
    """
    from logstat.analytics.gpus import GPUS
    from logstat.runners.plan_text import BASE_SPEC, estimate_text, preset_msize
    from logstat.runners.spec import build_spec, load_spec
    from logstat.runners.validate import check

    settings: list[str] = []
    try:
        if model is not None:
            if hidden is not None or layers is not None:
                raise ValueError("give either --model or --hidden/--layers, not both")
            settings += [
                f"model.preset={preset_msize(model)}",
                "model.hidden_size=none",
                "model.num_layers=none",
            ]
        elif hidden is not None or layers is not None:
            if hidden is None or layers is None:
                raise ValueError("give both --hidden and --layers (or --model)")
            settings += ["model.preset=none", f"model.hidden_size={hidden}", f"model.num_layers={layers}"]
        elif spec is None:
            raise ValueError("give --model (e.g. 52B) or both --hidden and --layers, or a SPEC")
        if spec is None and gpus is None:
            raise ValueError("give --gpus (the world size), or a SPEC")
    except ValueError as exc:
        raise LogstatError(f"logstat estimate: {exc}") from None
    gpu_model = options.get("gpu_model")
    if gpu_model is not None and gpu_model not in GPUS:
        raise LogstatError(f"logstat estimate: --gpu {gpu_model!r} is unknown; known: {', '.join(GPUS)}")
    if gpus is not None:
        settings += ["cluster.nodes=1", f"cluster.gpus_per_node={gpus}"]
    if spec is None and options.get("stack") is None and options.get("zero_stage") in (2, 3):
        settings.append(f"stack={ZERO_STACK}")
        if options.get("optimizer") is None:
            settings.append("train.optimizer=adamw")
    for name, value in options.items():
        if value is not None:
            settings.append(
                f"{FIELDS[name]}={value!r}" if isinstance(value, float) else f"{FIELDS[name]}={value}"
            )
    if offload_optimizer:
        settings.append("train.offload_optimizer=true")
    if offload_param:
        settings.append("train.offload_param=true")
    if gpus is not None or any(options.get(name) is not None for name in BATCH_SHAPING):
        settings.append("batch.global_batch=none")
    if spec is None:
        planned = build_spec(copy.deepcopy(BASE_SPEC), [*settings, *overrides], source="logstat estimate")
    else:
        planned = load_spec(spec, [*settings, *overrides])
    report = check(planned)
    for warning in report.warnings:
        click.echo(f"warning: {warning}", err=True)
    click.echo(estimate_text(planned), nl=False)
