"""`logstat estimate`: parameters, ZeRO memory, pipeline efficiency, TFLOPs and days of a planned run."""

import click

from logstat.errors import LogstatError


@click.command()
@click.option(
    "--model",
    help="A GPT-2 size preset of the seed's scripts (MSIZE, in billions), e.g. 52B; an unknown one lists them.",
)
@click.option("--hidden", type=int, help="Hidden size (instead of --model).")
@click.option("--layers", type=int, help="Transformer layers (instead of --model).")
@click.option("--seq-len", type=int, help="Sequence length [preset's, else 1024].")
@click.option("--vocab", type=int, help="Vocabulary size [preset's, else 50257].")
@click.option("--gpus", type=int, required=True, help="World size.")
@click.option("--tp", type=int, default=1, show_default=True, help="Tensor-parallel degree.")
@click.option("--pp", type=int, default=1, show_default=True, help="Pipeline-parallel degree.")
@click.option(
    "--zero", "zero_stage", type=click.IntRange(0, 3), default=0, show_default=True, help="ZeRO stage."
)
@click.option("--offload-optimizer", is_flag=True, help="ZeRO-Offload: optimizer states in CPU memory.")
@click.option("--offload-param", is_flag=True, help="Parameters in CPU memory too (ZeRO stage 3).")
@click.option("--micro-batch", type=int, default=1, show_default=True, help="Micro batch per GPU.")
@click.option(
    "--gas", type=int, default=1, show_default=True, help="Gradient accumulation steps (PP chunks)."
)
@click.option("--sec-per-iter", type=float, help="Measured or assumed seconds per iteration (global batch).")
@click.option("--tokens", type=float, default=100e9, show_default=True, help="Tokens to train, for the days.")
@click.option("--gpu", "gpu_model", help="GPU model for MFU, e.g. V100-SXM2-32GB, A100-SXM4-80GB, H100-SXM.")
@click.option(
    "--precision",
    type=click.Choice(["fp16", "bf16"]),
    default="fp16",
    show_default=True,
    help="Which dense peak of --gpu the MFU divides by.",
)
@click.option(
    "--checkpointing/--no-checkpointing",
    default=True,
    show_default=True,
    help="Activation checkpointing (seed formula factor 4, else 3).",
)
def estimate(
    model: str | None,
    hidden: int | None,
    layers: int | None,
    seq_len: int | None,
    vocab: int | None,
    **options: object,
) -> None:
    """Estimate a planned run: parameter count, model-state memory per GPU by ZeRO stage, pipeline
    efficiency, and with --sec-per-iter the TFLOPs per GPU and the days to train 100B tokens.

    \b
    Example:
      logstat estimate --model 52B --gpus 64 --tp 4 --pp 16 --zero 1 --micro-batch 4 --gas 256 --sec-per-iter 129
      logstat estimate --hidden 4096 --layers 30 --gpus 8 --zero 3 --gpu A100-SXM4-80GB --precision bf16
    """
    from logstat.analytics.estimate import Plan, estimate_text, preset_shape

    try:
        if model is not None:
            if hidden is not None or layers is not None:
                raise ValueError("give either --model or --hidden/--layers, not both")
            label, shape = preset_shape(model)
        elif hidden is not None and layers is not None:
            label, shape = "", {"hidden": hidden, "layers": layers, "seq_len": 1024, "vocab": 50257}
        else:
            raise ValueError("give --model (e.g. 52B) or both --hidden and --layers")
        if seq_len is not None:
            shape["seq_len"] = seq_len
        if vocab is not None:
            shape["vocab"] = vocab
        plan = Plan(label=label, **shape, **options)
        text = estimate_text(plan)
    except ValueError as exc:
        raise LogstatError(f"logstat estimate: {exc}") from None
    click.echo(text, nl=False)
