"""Back-of-the-envelope numbers for a planned run: parameters, batch, pipeline bubble, ZeRO memory,
and (given a measured or assumed time per iteration) TFLOPs, MFU and days for N tokens.

Every number comes from a formula of ``logstat.analytics.formulas``; this module only picks the
inputs and lays the answer out.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from logstat.analytics import formulas
from logstat.analytics.display import mfu_text, tflops_text
from logstat.analytics.gpus import GPUS, peak_tflops

_MODEL_SIZE = re.compile(r"^(\d+)\s*[bB]?$")


@dataclass(frozen=True, kw_only=True)
class Plan:
    """What the user plans to run."""

    hidden: int
    """Hidden size h."""
    layers: int
    """Transformer layers l."""
    seq_len: int
    """Sequence length s."""
    vocab: int
    """Vocabulary V."""
    gpus: int
    """World size."""
    tp: int = 1
    """Tensor-parallel degree."""
    pp: int = 1
    """Pipeline-parallel degree (stages)."""
    micro_batch: int = 1
    """Micro batch per GPU."""
    gas: int = 1
    """Gradient accumulation steps (= PP chunks)."""
    zero_stage: int = 0
    """The ZeRO stage the run uses (all stages are shown; this one is marked)."""
    offload_optimizer: bool = False
    """ZeRO-Offload of the optimizer states to CPU."""
    offload_param: bool = False
    """ZeRO-Infinity offload of the parameters (stage 3)."""
    checkpointing: bool = True
    """Activation checkpointing (the seed formula's factor 4, else 3)."""
    sec_per_iter: float | None = None
    """Measured or assumed seconds per iteration (one global batch)."""
    tokens: float = 100e9
    """Tokens to train for the days estimate (seed 000 reports days for 100B tokens)."""
    gpu_model: str | None = None
    """GPU model for MFU, a key of ``logstat.analytics.gpus.GPUS``."""
    precision: str = "fp16"
    """fp16 or bf16 (which peak MFU divides by)."""
    label: str = ""
    """How the model was given (e.g. "GPT-2 52B preset"), for the printout."""


def preset_shape(model: str) -> tuple[str, dict[str, int]]:
    """``"52B"`` -> ("GPT-2 52B preset", shape) from the runners' MSIZE presets; ValueError naming the valid ones."""
    from logstat.runners.presets import GPT2_PRESETS, gpt2_preset

    match = _MODEL_SIZE.match(model.strip())
    if match is None:
        valid = ", ".join(f"{m}B" for m in GPT2_PRESETS)
        raise ValueError(f"--model {model!r} is not a preset size like 52B; presets: {valid}")
    try:
        preset = gpt2_preset(int(match[1]))
    except KeyError as exc:
        raise ValueError(f"--model {model}: {exc.args[0]}") from None
    shape = {
        "hidden": preset.hidden_size,
        "layers": preset.num_layers,
        "seq_len": preset.seq_len,
        "vocab": preset.vocab_size,
    }
    return f"GPT-2 {preset.msize}B preset", shape


def validate(plan: Plan) -> None:
    """Raise ValueError naming the field when the parallel layout cannot exist."""
    for name in ("hidden", "layers", "seq_len", "vocab", "gpus", "tp", "pp", "micro_batch", "gas"):
        if getattr(plan, name) < 1:
            raise ValueError(f"{name}={getattr(plan, name)} must be at least 1")
    if plan.gpus % (plan.tp * plan.pp):
        raise ValueError(
            f"gpus={plan.gpus} must be a multiple of tp*pp={plan.tp}*{plan.pp}={plan.tp * plan.pp}"
        )
    # "nan" and "inf" are floats to click: "not > 0" also refuses nan
    if plan.sec_per_iter is not None and not 0 < plan.sec_per_iter < math.inf:
        raise ValueError(f"sec_per_iter={plan.sec_per_iter} must be positive and finite (seconds)")
    if not 0 < plan.tokens < math.inf:
        raise ValueError(f"tokens={plan.tokens} must be positive and finite")
    if plan.gpu_model is not None and plan.gpu_model not in GPUS:
        raise ValueError(f"gpu_model={plan.gpu_model!r} is unknown; known: {', '.join(GPUS)}")
    formulas.zero_model_state_memory(
        params=1,
        dp=1,
        stage=plan.zero_stage,
        offload_optimizer=plan.offload_optimizer,
        offload_param=plan.offload_param,
    )


def _gb(n_bytes: float) -> str:
    return f"{n_bytes / 1e9:.1f}"


_MEMORY_HEADERS = (
    "ZeRO stage",
    "GPU GB",
    "GPU GB, optimizer offloaded",
    "GPU GB, optimizer + params offloaded",
    "CPU GB (all offloaded)",
)


def _memory_table(params_per_rank: float, dp: int, plan: Plan) -> list[str]:
    """ZeRO stages 0-3 without and with offload (``-`` where DeepSpeed has no such offload)."""
    rows = []
    for stage in range(4):
        plain = formulas.zero_model_state_memory(params=params_per_rank, dp=dp, stage=stage)
        opt = both = None
        if stage >= 1:
            opt = formulas.zero_model_state_memory(
                params=params_per_rank, dp=dp, stage=stage, offload_optimizer=True
            )
        if stage == 3:
            both = formulas.zero_model_state_memory(
                params=params_per_rank, dp=dp, stage=stage, offload_optimizer=True, offload_param=True
            )
        cpu = both or opt
        rows.append(
            (
                f"{stage} (this run)" if stage == plan.zero_stage else str(stage),
                _gb(plain.gpu_bytes),
                _gb(opt.gpu_bytes) if opt else "-",
                _gb(both.gpu_bytes) if both else "-",
                _gb(cpu.cpu_bytes) if cpu else "-",
            )
        )
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(_MEMORY_HEADERS)]
    lines = ["| " + " | ".join(h.ljust(w) for h, w in zip(_MEMORY_HEADERS, widths, strict=True)) + " |"]
    lines.append("| " + " | ".join("-" * (w - 1) + ":" for w in widths) + " |")
    lines += ["| " + " | ".join(c.rjust(w) for c, w in zip(r, widths, strict=True)) + " |" for r in rows]
    return lines


def estimate_text(plan: Plan) -> str:
    """The estimate as plain text with one markdown table (ZeRO memory by stage)."""
    validate(plan)
    params = formulas.gpt2_params(
        hidden=plan.hidden, layers=plan.layers, vocab=plan.vocab, seq_len=plan.seq_len
    )
    size_b = params / 1e9
    dp = formulas.data_parallel_size(world=plan.gpus, tp=plan.tp, pp=plan.pp)
    gbs = formulas.global_batch(micro_batch=plan.micro_batch, gas=plan.gas, dp=dp)
    efficiency = formulas.pipeline_efficiency(gas=plan.gas, pp=plan.pp)
    params_per_rank = params / (plan.tp * plan.pp)
    chosen = formulas.zero_model_state_memory(
        params=params_per_rank,
        dp=dp,
        stage=plan.zero_stage,
        offload_optimizer=plan.offload_optimizer,
        offload_param=plan.offload_param,
    )
    label = f"{plan.label}: " if plan.label else ""
    lines = [
        f"Model: {label}hidden {plan.hidden}, layers {plan.layers}, seq {plan.seq_len}, vocab {plan.vocab}",
        f"Parameters: {size_b:.2f}B ({params:,}) = l*(12h^2 + 13h) + v*h + s*h + 2h",
        f"Parallelism: {plan.gpus} GPUs = TP {plan.tp} x PP {plan.pp} x DP {dp}",
        f"Global batch: {gbs} = micro batch {plan.micro_batch} x gas {plan.gas} x DP {dp} "
        f"({gbs * plan.seq_len:,} tokens per iteration)",
        f"Pipeline efficiency: {efficiency:.1%} = gas/(gas+PP-1) = {plan.gas}/{plan.gas + plan.pp - 1}",
    ]
    if plan.layers % plan.pp:
        lines.append(
            f"  note: layers={plan.layers} is not divisible by pp={plan.pp}: the stages are unbalanced"
        )
    lines += [
        "",
        f"Model-state memory per GPU, mixed-precision Adam (16 bytes/param); Ψ = {params_per_rank / 1e9:.3f}B "
        f"per TP x PP rank, partitioned over N = DP = {dp}; activations not counted:",
        "",
        *_memory_table(params_per_rank, dp, plan),
        "",
        f"This run (ZeRO {plan.zero_stage}"
        + (", optimizer offload" if plan.offload_optimizer else "")
        + (", parameter offload" if plan.offload_param else "")
        + f"): {_gb(chosen.gpu_bytes)} GB per GPU"
        + (f", {_gb(chosen.cpu_bytes)} GB of CPU memory per GPU" if chosen.cpu_bytes else ""),
    ]
    if plan.sec_per_iter is None:
        lines.append("TFLOPs and days: give --sec-per-iter (measured or assumed) to compute them.")
        return "\n".join(lines) + "\n"
    seed = formulas.seed_tflops_per_gpu(
        size_b=size_b,
        seq_len=plan.seq_len,
        global_batch=gbs,
        sec_per_iter=plan.sec_per_iter,
        gpus=plan.gpus,
        checkpointing=plan.checkpointing,
    )
    megatron_flops = formulas.megatron_flops_per_iteration(
        global_batch=gbs,
        seq_len=plan.seq_len,
        layers=plan.layers,
        hidden=plan.hidden,
        vocab=plan.vocab,
        checkpointing=plan.checkpointing,
    )
    megatron = formulas.tflops_per_gpu(
        flops_per_iteration=megatron_flops, sec_per_iter=plan.sec_per_iter, gpus=plan.gpus
    )
    tokens_s = formulas.tokens_per_sec(global_batch=gbs, seq_len=plan.seq_len, sec_per_iter=plan.sec_per_iter)
    days = formulas.days_to_train(tokens=plan.tokens, tokens_per_sec=tokens_s)
    factor = 4 if plan.checkpointing else 3
    lines += [
        "",
        f"Throughput: {plan.sec_per_iter:g} s/iteration = {tokens_s:,.0f} tokens/s",
        f"TFLOPs per GPU: {tflops_text(seed)} (seed formula, factor {factor}); {tflops_text(megatron)} (Megatron eq. 3)",
    ]
    peak = peak_tflops(plan.gpu_model, plan.precision)
    if peak:
        # The same definitions as `logstat parse`'s mfu and hfu columns: model FLOPs (no recomputed
        # forward, PaLM's MFU) and the executed ones (eq. 3 as the run recomputes) over the peak.
        model = formulas.tflops_per_gpu(
            flops_per_iteration=formulas.megatron_flops_per_iteration(
                global_batch=gbs,
                seq_len=plan.seq_len,
                layers=plan.layers,
                hidden=plan.hidden,
                vocab=plan.vocab,
                checkpointing=False,
            ),
            sec_per_iter=plan.sec_per_iter,
            gpus=plan.gpus,
        )
        mfu = formulas.flops_utilization(tflops_per_gpu=model, peak_tflops=peak)
        hfu = formulas.flops_utilization(tflops_per_gpu=megatron, peak_tflops=peak)
        lines.append(
            f"MFU: {mfu_text(mfu)} of the {plan.gpu_model} {plan.precision} dense peak {peak:g} TFLOPs "
            f"(model FLOPs {tflops_text(model)} TFLOPs: eq. 3 without recomputation); HFU: {mfu_text(hfu)} (eq. 3 as run)"
        )
    tokens_b = f"{plan.tokens / 1e9:g}B"
    gpu_days = formulas.gpu_days(days=days, gpus=plan.gpus)
    lines.append(f"Days for {tokens_b} tokens: {days:.1f} ({gpu_days:,.0f} GPU-days)")
    return "\n".join(lines) + "\n"
