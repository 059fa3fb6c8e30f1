"""The plan of a run as text: parameters, batch, pipeline bubble, ZeRO memory by stage, and (given
a measured or assumed speed) TFLOPs, MFU and days for N tokens.

The numbers are those of the one planner, ``logstat.runners.validate.check`` and ``.estimate``
(the checks and numbers of ``logstat run``); this module only builds the spec ``logstat estimate``
describes with options and lays the answer out.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any

from logstat.analytics.display import mfu_text, tflops_text
from logstat.runners.spec import Spec

_MODEL_SIZE = re.compile(r"^(\d+)\s*[bB]?$")

#: The spec ``logstat estimate`` describes when no SPEC is given; options override it. No Slurm
#: job is planned: time limit 0 (none), one step.
BASE_SPEC: dict[str, Any] = {
    "name": "estimate",
    "stack": "megatron-deepspeed",
    "steps": 1,
    "model": {},
    "batch": {"micro": 1, "gas": 1},
    "train": {"precision": "fp16", "activation_checkpointing": True, "optimizer": "adam"},
    "cluster": {"nodes": 1, "time_limit": "0"},
}


def preset_msize(model: str) -> int:
    """``"52B"`` -> 52, a GPT-2 MSIZE of the runners' presets; ValueError naming the valid ones."""
    from logstat.runners.presets import GPT2_PRESETS

    match = _MODEL_SIZE.match(model.strip())
    valid = ", ".join(str(m) for m in GPT2_PRESETS)
    if match is None:
        raise ValueError(f"--model {model!r} is not a preset size like 52B; presets: {valid}")
    if int(match[1]) not in GPT2_PRESETS:
        raise ValueError(f"--model {model}: no GPT-2 preset of size {int(match[1])}B; presets: {valid}")
    return int(match[1])


def _gb(n_bytes: float) -> str:
    return f"{n_bytes / 1e9:.1f}"


_MEMORY_HEADERS = (
    "ZeRO stage",
    "GPU GB",
    "GPU GB, optimizer offloaded",
    "GPU GB, optimizer + params offloaded",
    "CPU GB (all offloaded)",
)


def _memory_table(spec: Spec) -> list[str]:
    """ZeRO stages 0-3 without and with offload (``-`` where DeepSpeed has no such offload)."""
    from logstat.runners.validate import model_state_memory_per_rank

    def memory(stage: int, **offload: bool):
        return model_state_memory_per_rank(
            spec, stage=stage, **{"offload_optimizer": False, "offload_param": False, **offload}
        )

    rows = []
    for stage in range(4):
        plain = memory(stage)
        opt = memory(stage, offload_optimizer=True) if stage >= 1 else None
        both = memory(stage, offload_optimizer=True, offload_param=True) if stage == 3 else None
        cpu = both or opt
        rows.append(
            (
                f"{stage} (this run)" if stage == spec.train.zero_stage else str(stage),
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
    return lines + _refused_stages(spec)


def _refused_stages(spec: Spec) -> list[str]:
    """A line under the table naming the stages the planner refuses for this run (its pipeline, its
    stack), with the first rule: their rows are what the memory would be, not a plan to launch."""
    from logstat.runners.validate import check

    refused = {}
    for stage in range(4):
        train = dataclasses.replace(
            spec.train, zero_stage=stage, offload_optimizer=False, offload_param=False
        )
        rules = [
            p.rule
            for p in check(dataclasses.replace(spec, train=train)).problems
            if p.field == "train.zero_stage"
        ]
        if rules:
            refused[stage] = rules[0]
    if not refused:
        return []
    first, rule = next(iter(refused.items()))
    stages = " and ".join(map(str, refused))
    return ["", f"ZeRO {stages}: refused for this run (train.zero_stage={first} {rule})"]


def _label(spec: Spec) -> str:
    preset = f"GPT-2 {spec.model.preset}B preset" if spec.model.preset is not None else ""
    if spec.name == BASE_SPEC["name"]:
        return f"{preset}: " if preset else ""
    return f"spec {spec.name}{f' ({preset})' if preset else ''}: "


def estimate_text(spec: Spec) -> str:
    """The estimate of ``spec`` as plain text with one markdown table (ZeRO memory by stage);
    a SpecError lists the problems :func:`logstat.runners.validate.check` finds."""
    from logstat.runners.validate import estimate

    plan = estimate(spec)
    model, parallel, batch, train = spec.model, spec.parallel, spec.batch, spec.train
    gpus, dp = spec.world_size, plan.dp
    state = plan.state_bytes
    lines = [
        f"Model: {_label(spec)}hidden {model.hidden_size}, layers {model.num_layers}, seq {model.seq_len}, "
        f"vocab {model.vocab_size}",
        f"Parameters: {plan.params / 1e9:.2f}B ({plan.params:,}) = l*(12h^2 + 13h) + v*h + s*h + 2h",
        f"Parallelism: {gpus} GPUs = TP {parallel.tp} x PP {parallel.pp} x DP {dp}",
        f"Global batch: {plan.global_batch} = micro batch {batch.micro} x gas {batch.gas} x DP {dp} "
        f"({plan.global_batch * model.seq_len:,} tokens per iteration)",
        f"Pipeline efficiency: {plan.pipeline_efficiency:.1%} = gas/(gas+PP-1) = {batch.gas}/{batch.gas + parallel.pp - 1}",
        "",
        f"Model-state memory per GPU, {train.optimizer} in {train.precision}: {state.weights:g} + {state.grads:g} + "
        f"{state.optimizer:.4g} = {state.total:.4g} bytes/param (weights + gradients + optimizer states); "
        f"Ψ = {plan.params_per_rank / 1e9:.3f}B per TP x PP rank, partitioned over N = DP = {dp}; "
        "activations not counted:",
        "",
        *_memory_table(spec),
        "",
        f"This run (ZeRO {train.zero_stage}"
        + (", optimizer offload" if train.offload_optimizer else "")
        + (", parameter offload" if train.offload_param else "")
        + f"): {_gb(plan.model_state.gpu_bytes)} GB per GPU"
        + (
            f", {_gb(plan.model_state.cpu_bytes)} GB of CPU memory per GPU"
            if plan.model_state.cpu_bytes
            else ""
        ),
    ]
    if plan.sec_per_iter is None:
        lines.append("TFLOPs and days: give --sec-per-iter (measured or assumed) to compute them.")
        return "\n".join(lines) + "\n"
    assumed = (
        f" (at the assumed {spec.estimate.tflops_per_gpu:g} TFLOPs/GPU)"
        if spec.estimate.sec_per_iter is None
        else ""
    )
    factor = 4 if train.activation_checkpointing else 3
    lines += [
        "",
        f"Throughput: {plan.sec_per_iter:.4g} s/iteration{assumed} = {plan.tokens_per_sec:,.0f} tokens/s",
        f"TFLOPs per GPU: {tflops_text(plan.tflops_per_gpu)} (seed formula, factor {factor}); "
        f"{tflops_text(plan.megatron_tflops_per_gpu)} (Megatron eq. 3)",
    ]
    if plan.mfu is not None:
        # The same definitions as `logstat parse`'s mfu and hfu columns: model FLOPs (no recomputed
        # forward, PaLM's MFU) and the executed ones (eq. 3 as the run recomputes) over the peak.
        lines.append(
            f"MFU: {mfu_text(plan.mfu)} of the {spec.cluster.gpu_model} {train.precision} dense peak "
            f"{plan.peak_tflops:g} TFLOPs (model FLOPs {tflops_text(plan.model_tflops_per_gpu)} TFLOPs: "
            f"eq. 3 without recomputation); HFU: {mfu_text(plan.hfu)} (eq. 3 as run)"
        )
    lines.append(f"Days for {plan.tokens / 1e9:g}B tokens: {plan.days:.1f} ({plan.gpu_days:,.0f} GPU-days)")
    return "\n".join(lines) + "\n"
