"""Check a spec before anything runs: refusals name the field, its value and the rule.

:func:`check` collects every problem at once (a user fixes them in one go); :func:`validate`
raises them as one :class:`SpecError` and returns the warnings. :func:`estimate` gives the
numbers of a plan: parameters, model-state memory per GPU (by optimizer and precision), pipeline
efficiency and, given an assumed TFLOPs/GPU or seconds per iteration, TFLOPs, MFU, run time and
days to train the spec's token budget. These two are the one planner: ``logstat run``, ``logstat
estimate`` and sweeps all go through them.
"""

from __future__ import annotations

import dataclasses
import math
import re
from dataclasses import dataclass, field
from typing import Any

from logstat.analytics import formulas
from logstat.analytics.gpus import GPUS, peak_tflops
from logstat.runners.spec import SECTIONS, Spec, SpecError

from logstat.errors import LogstatError

PRECISIONS = ("fp32", "fp16", "bf16")
#: Precisions trained with 2-byte weights and an fp32 master copy (mixed precision).
HALF_PRECISIONS = ("fp16", "bf16")
#: Seed 002: "if you set gas=8*PP you should get 90% pipeline efficiency".
GAS_PER_PP_STAGE = 8
_PLAIN_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
_SLURM_TIME = re.compile(r"\d+(-\d+)?(:\d+){0,2}")
#: Fields rendered into #SBATCH lines, which sbatch reads line by line.
_SBATCH_FIELDS = ("job_name", "partition", "constraint", "account", "time_limit")
#: numpy's seed range: PowerSGD's hook, HF's set_seed and Megatron's _set_random_seed all seed numpy with it
SEED_RANGE = range(2**32)
GIB = 2**30


@dataclass(frozen=True)
class Problem:
    """One refusal: ``field``, its ``value`` and the ``rule`` it breaks."""

    field: str
    value: object
    rule: str

    def __str__(self) -> str:
        return f"{self.field}={self.value!r} {self.rule}"


@dataclass
class Report:
    problems: list[Problem] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    def refuse(self, field_name: str, value: object, rule: str) -> None:
        self.problems.append(Problem(field_name, value, rule))


def validate(spec: Spec) -> list[str]:
    """Raise SpecError listing every problem of ``spec``; return its warnings."""
    report = check(spec)
    if report.problems:
        raise SpecError(f"spec {spec.name!r} refused: " + "; ".join(str(p) for p in report.problems))
    return report.warnings


def check(spec: Spec) -> Report:
    """Every problem and warning of ``spec``."""
    report = Report()
    _check_names(spec, report)
    _check_positive(spec, report)
    # The arithmetic checks divide by these: skip them (only) when one is not a positive count.
    if not any(p.field.startswith(("parallel.", "cluster.", "model.")) for p in report.problems):
        _check_parallel(spec, report)
        if not any(p.field.startswith("batch.") for p in report.problems):
            _check_batch(spec, report)
    _check_training(spec, report)
    _check_stack(spec, report)
    if not report.problems:
        _warn(spec, report)
    return report


def _check_names(spec: Spec, report: Report) -> None:
    if not _PLAIN_NAME.fullmatch(spec.name):
        report.refuse(
            "name", spec.name, "must be a plain name (letters, digits, '.', '_', '-'): it names runs/<name>/"
        )
    cluster = spec.cluster
    for name in _SBATCH_FIELDS:
        value = getattr(cluster, name)
        if value is not None and any(ord(c) < 0x20 or ord(c) == 0x7F for c in value):
            report.refuse(
                f"cluster.{name}",
                value,
                "contains a control character (newline, tab...): #SBATCH lines cannot hold one",
            )
    for name, value in _string_fields(spec):
        if "\0" in value:
            report.refuse(
                name, value, "contains a NUL byte, which no command line, path or file name can hold"
            )
    if not _SLURM_TIME.fullmatch(cluster.time_limit):
        report.refuse(
            "cluster.time_limit", cluster.time_limit, "is not a Slurm time ([D-]HH:MM:SS or minutes)"
        )
    if not 0 < cluster.master_port < 65536:
        report.refuse("cluster.master_port", cluster.master_port, "is not a TCP port (1-65535)")


def _string_fields(spec: Spec) -> list[tuple[str, str]]:
    """(dotted name, value) of every string-valued field of the spec."""
    found = [(f.name, getattr(spec, f.name)) for f in dataclasses.fields(spec)]
    for section in SECTIONS:
        part = getattr(spec, section)
        found += [(f"{section}.{f.name}", getattr(part, f.name)) for f in dataclasses.fields(part)]
    return [(name, value) for name, value in found if isinstance(value, str)]


def _check_positive(spec: Spec, report: Report) -> None:
    if spec.batch.micro < 1:
        report.refuse(
            "batch.micro",
            spec.batch.micro,
            "must be >= 1 (Megatron would stop later with 'Micro batch size per gpu: 0')",
        )
    counts = {
        "steps": spec.steps,
        "batch.gas": spec.batch.gas,
        "parallel.tp": spec.parallel.tp,
        "parallel.pp": spec.parallel.pp,
        "cluster.nodes": spec.cluster.nodes,
        "cluster.gpus_per_node": spec.cluster.gpus_per_node,
        "model.hidden_size": spec.model.hidden_size,
        "model.num_layers": spec.model.num_layers,
        "model.num_heads": spec.model.num_heads,
        "model.seq_len": spec.model.seq_len,
        "model.vocab_size": spec.model.vocab_size,
        "train.log_interval": spec.train.log_interval,
    }
    if spec.cluster.cpus_per_task is not None:
        counts["cluster.cpus_per_task"] = spec.cluster.cpus_per_task
    for name, value in counts.items():
        if value is None or value < 1:
            report.refuse(name, value, "must be >= 1")
    # a causal LM's targets are its inputs shifted by one token: one token has no target (the loss is NaN)
    if spec.model.seq_len == 1:
        report.refuse("model.seq_len", 1, "must be >= 2: a causal LM predicts each next token, one has none")
    if spec.model.vocab_size == 1:
        report.refuse(
            "model.vocab_size", 1, "must be >= 2: a vocabulary of one token leaves nothing to predict"
        )
    if spec.train.seed not in SEED_RANGE:
        report.refuse(
            "train.seed",
            spec.train.seed,
            "must be in 0..2**32-1: numpy's seed range (PowerSGD, HF set_seed and Megatron seed numpy with it)",
        )
    # a derived global batch of 0 is the knock-on of a count refused above, not a problem of its own
    counted = [spec.batch.micro, spec.batch.gas, spec.cluster.nodes, spec.cluster.gpus_per_node]
    batch_counts_ok = all(count >= 1 for count in counted)
    if batch_counts_ok and spec.batch.global_batch is not None and spec.batch.global_batch < 1:
        report.refuse("batch.global_batch", spec.batch.global_batch, "must be >= 1")
    # TOML and --set read nan and inf as floats (nan > 0 is False)
    reals = {"train.lr": spec.train.lr, "estimate.tokens": spec.estimate.tokens}
    for name in ("tflops_per_gpu", "sec_per_iter"):
        if getattr(spec.estimate, name) is not None:
            reals[f"estimate.{name}"] = getattr(spec.estimate, name)
    if spec.estimate.tflops_per_gpu is not None and spec.estimate.sec_per_iter is not None:
        report.refuse(
            "estimate.sec_per_iter",
            spec.estimate.sec_per_iter,
            "and estimate.tflops_per_gpu both give the speed: give one (the other follows from it)",
        )
    for name, value in reals.items():
        if not value > 0:
            report.refuse(name, value, "must be > 0")
        elif value == math.inf:
            report.refuse(name, value, "must be finite")


def _check_parallel(spec: Spec, report: Report) -> None:
    tp, pp, model, cluster = spec.parallel.tp, spec.parallel.pp, spec.model, spec.cluster
    if spec.world_size % (tp * pp):
        report.refuse(
            "parallel.tp*parallel.pp",
            tp * pp,
            f"(tp={tp} * pp={pp}) does not divide the world size cluster.nodes*cluster.gpus_per_node="
            f"{cluster.nodes}*{cluster.gpus_per_node}={spec.world_size}",
        )
    if model.num_layers % pp:
        report.refuse("parallel.pp", pp, f"does not divide model.num_layers={model.num_layers}")
    if model.num_heads % tp:
        report.refuse("parallel.tp", tp, f"does not divide model.num_heads={model.num_heads}")
    if model.hidden_size % model.num_heads:
        report.refuse(
            "model.num_heads", model.num_heads, f"does not divide model.hidden_size={model.hidden_size}"
        )


def _check_batch(spec: Spec, report: Report) -> None:
    batch, dp = spec.batch, spec.dp
    if dp is None or batch.global_batch is None:
        return
    expected = formulas.global_batch(micro_batch=batch.micro, gas=batch.gas, dp=dp)
    if batch.global_batch != expected:
        report.refuse(
            "batch.global_batch",
            batch.global_batch,
            f"!= batch.micro*batch.gas*DP = {batch.micro}*{batch.gas}*{dp} = {expected} "
            "(global = micro * gas * DP, DP = world / (TP*PP))",
        )


def _check_training(spec: Spec, report: Report) -> None:
    train, pp = spec.train, spec.parallel.pp
    if train.optimizer not in formulas.OPTIMIZER_STATES:
        known = ", ".join(formulas.OPTIMIZER_STATES)
        report.refuse("train.optimizer", train.optimizer, f"is unknown (optimizers: {known})")
    if train.precision not in PRECISIONS:
        report.refuse("train.precision", train.precision, f"must be one of {', '.join(PRECISIONS)}")
    elif train.precision == "bf16" and spec.cluster.use_gpus:
        gpu = GPUS.get(spec.cluster.gpu_model or "")
        if gpu is not None and gpu.peak_tflops_bf16 is None:
            report.refuse(
                "train.precision",
                "bf16",
                f"needs bf16 tensor cores, which cluster.gpu_model={gpu.name!r} has not",
            )
    if train.zero_stage not in (0, 1, 2, 3):
        report.refuse("train.zero_stage", train.zero_stage, "must be 0, 1, 2 or 3")
    elif train.zero_stage >= 2 and pp > 1:
        report.refuse(
            "train.zero_stage",
            train.zero_stage,
            f"with parallel.pp={pp}: ZeRO stages 2 and 3 do not work with pipeline parallelism "
            "(seed 002: use stage 0 or 1 with PP)",
        )
    if train.offload_optimizer and train.zero_stage == 0:
        report.refuse("train.offload_optimizer", True, "needs train.zero_stage >= 1 (ZeRO-Offload)")
    if train.offload_param and train.zero_stage != 3:
        report.refuse(
            "train.offload_param", True, f"needs train.zero_stage=3, not {train.zero_stage} (ZeRO-Infinity)"
        )


def _check_stack(spec: Spec, report: Report) -> None:
    from logstat.runners.stacks import STACKS, get_stack

    if spec.stack not in STACKS:
        report.refuse("stack", spec.stack, f"is unknown (stacks: {', '.join(STACKS)})")
        return
    stack = get_stack(spec.stack)
    train = spec.train
    if train.optimizer in formulas.OPTIMIZER_STATES and train.optimizer not in stack.optimizers:
        report.refuse(
            "train.optimizer",
            train.optimizer,
            f"is not one of stack {stack.name}'s: {', '.join(stack.optimizers)}",
        )
    stage_refused = any(p.field == "train.zero_stage" for p in report.problems)
    if train.zero_stage in (0, 1, 2, 3) and train.zero_stage not in stack.zero_stages and not stage_refused:
        stages = ", ".join(map(str, stack.zero_stages))
        why = f": {stack.zero_stages_why}" if stack.zero_stages_why else ""
        report.refuse(
            "train.zero_stage",
            train.zero_stage,
            f"is not implemented by stack {stack.name} (stages: {stages}){why}",
        )
    if not stack.model_parallel:
        for name in ("tp", "pp"):
            value = getattr(spec.parallel, name)
            if value != 1:
                report.refuse(
                    f"parallel.{name}", value, f"must be 1: stack {stack.name} is data parallel only"
                )
    for field_name, value, rule in stack.problems(spec):
        report.refuse(field_name, value, rule)
    _check_other_stacks_sections(spec, report)


def _check_other_stacks_sections(spec: Spec, report: Report) -> None:
    """A setting of another stack's section (a PowerSGD rank in an HF spec) would be ignored without a word:
    refused when it differs from its default."""
    from logstat.runners.stacks import section_owners

    for section, owner in section_owners().items():
        if owner == spec.stack:
            continue
        settings, defaults = getattr(spec, section), SECTIONS[section]()
        for setting in dataclasses.fields(settings):
            value = getattr(settings, setting.name)
            if value != getattr(defaults, setting.name):
                report.refuse(
                    f"{section}.{setting.name}",
                    value,
                    f"is read by stack {owner} only; stack {spec.stack} ignores it",
                )


def _warn(spec: Spec, report: Report) -> None:
    pp, gas = spec.parallel.pp, spec.batch.gas
    if pp > 1 and gas < GAS_PER_PP_STAGE * pp:
        efficiency = formulas.pipeline_efficiency(gas=gas, pp=pp)
        report.warnings.append(
            f"batch.gas={gas} < 8*parallel.pp={GAS_PER_PP_STAGE * pp}: pipeline efficiency "
            f"gas/(gas+PP-1) = {efficiency:.1%}, under 90% (seed 002)"
        )
    plan = _estimate(spec)
    _warn_time_limit(spec, plan, report)
    gpu_model = spec.cluster.gpu_model
    if gpu_model is None or not spec.cluster.use_gpus:
        return
    gpu = GPUS.get(gpu_model)
    if gpu is None:
        report.warnings.append(
            f"cluster.gpu_model={gpu_model!r} is not in logstat.analytics.gpus ({', '.join(GPUS)}): memory not checked"
        )
        return
    if plan.model_state_gib_per_gpu > gpu.memory_gib:
        report.warnings.append(
            f"ZeRO model-state memory estimate {plan.model_state_gib_per_gpu:.1f} GiB "
            f"({plan.model_state_gib_per_gpu * GIB / 1e9:.1f} GB, as the estimate's table writes it) per GPU "
            f"(train.zero_stage={spec.train.zero_stage}, DP={spec.dp}, TP*PP={spec.parallel.tp * spec.parallel.pp}, "
            f"train.optimizer={spec.train.optimizer}: {plan.state_bytes.total:.4g} bytes/param) exceeds the "
            f"{gpu.name}'s {gpu.memory_gib:g} GiB, before activations"
        )


def _warn_time_limit(spec: Spec, plan: Estimate, report: Report) -> None:
    limit_s = slurm_time_limit_s(spec.cluster.time_limit)
    if plan.run_time_s is None or limit_s is None or plan.run_time_s <= limit_s:
        return
    source = (
        "estimate.sec_per_iter"
        if spec.estimate.sec_per_iter is not None
        else f"at the assumed estimate.tflops_per_gpu={spec.estimate.tflops_per_gpu:g}"
    )
    report.warnings.append(
        f"cluster.time_limit={spec.cluster.time_limit!r} ({_hours(limit_s)}) is shorter than the estimated run "
        f"time steps={spec.steps} x {plan.sec_per_iter:.1f} s/iteration ({source}) = {_hours(plan.run_time_s)}: "
        "Slurm would cancel the job before its last step"
    )


def _hours(seconds: float) -> str:
    return f"{seconds / 3600:.1f} h"


def slurm_time_limit_s(text: str) -> int | None:
    """Seconds of a Slurm time limit (sbatch --time: minutes, minutes:seconds, hours:minutes:seconds,
    days-hours, days-hours:minutes, days-hours:minutes:seconds); None for 0 (no limit) or a bad value."""
    if not _SLURM_TIME.fullmatch(text):
        return None
    days, _, clock = text.rpartition("-")
    parts = [int(part) for part in clock.split(":")]
    if days:
        hours, minutes, seconds = (parts + [0, 0])[:3]
    elif len(parts) == 3:
        hours, minutes, seconds = parts
    else:
        hours, (minutes, seconds) = 0, (parts + [0])[:2]
    total = int(days or 0) * 86400 + hours * 3600 + minutes * 60 + seconds
    return total or None


def parameter_count(spec: Spec) -> int:
    """Parameters of the spec's GPT-2 shape (formulas.gpt2_params)."""
    model = spec.model
    return formulas.gpt2_params(
        hidden=model.hidden_size, layers=model.num_layers, vocab=model.vocab_size, seq_len=model.seq_len
    )


def model_state_bytes(spec: Spec) -> formulas.ModelStateBytes:
    """Bytes per parameter of weights, gradients and optimizer states for the spec's optimizer and
    precision (formulas.model_state_bytes_per_param; Adafactor's factored second moment counted on
    the spec's GPT-2 shapes)."""
    model, train = spec.model, spec.train
    factored = 0.0
    if train.optimizer == "adafactor":
        elements = formulas.gpt2_adafactor_second_moment_elements(
            hidden=model.hidden_size, layers=model.num_layers, vocab=model.vocab_size, seq_len=model.seq_len
        )
        factored = elements / parameter_count(spec)
    return formulas.model_state_bytes_per_param(
        optimizer=train.optimizer,
        mixed_precision=train.precision in HALF_PRECISIONS,
        factored_second_moment_per_param=factored,
    )


def model_state_memory_per_rank(spec: Spec, **zero: Any) -> formulas.ZeroMemory:
    """Model-state bytes of one rank: its TP*PP share of the parameters under ZeRO over DP
    (formulas.zero_model_state_memory; offloaded bytes are its ``cpu_bytes``). ``zero`` may replace
    ``stage``, ``offload_optimizer`` and ``offload_param`` (the estimate's table of all stages)."""
    train = spec.train
    settings = {
        "stage": train.zero_stage,
        "offload_optimizer": train.offload_optimizer,
        "offload_param": train.offload_param,
        **zero,
    }
    return formulas.zero_model_state_memory(
        params=parameter_count(spec) / (spec.parallel.tp * spec.parallel.pp),
        dp=spec.dp or 1,
        state_bytes=model_state_bytes(spec),
        **settings,
    )


def model_state_gib_per_gpu(spec: Spec) -> float:
    """GPU model-state memory (GiB) of one rank: its TP*PP share of the parameters under ZeRO over DP."""
    return model_state_memory_per_rank(spec).gpu_bytes / GIB


@dataclass(frozen=True, kw_only=True)
class Estimate:
    """The numbers of a plan: what ``logstat estimate`` and a dry run print, what a sweep compares."""

    params: int
    """Parameters of the model (formulas.gpt2_params)."""
    params_per_rank: float
    """Ψ of one TP x PP rank: params / (TP * PP)."""
    dp: int
    """Data-parallel degree world / (TP * PP)."""
    global_batch: int
    """Samples per iteration: micro * gas * DP."""
    state_bytes: formulas.ModelStateBytes
    """Bytes per parameter of weights, gradients and optimizer states (by optimizer and precision)."""
    model_state: formulas.ZeroMemory
    """Model-state bytes of one rank on the GPU and offloaded to CPU."""
    model_state_gib_per_gpu: float
    """ZeRO model-state memory per GPU, GiB (activations not counted)."""
    pipeline_efficiency: float
    """gas / (gas + PP - 1), a fraction."""
    tflops_per_gpu: float | None
    """Achieved TFLOPs/GPU by the seed formula: assumed (estimate.tflops_per_gpu) or from estimate.sec_per_iter."""
    megatron_tflops_per_gpu: float | None
    """The same speed by Megatron's eq. 3 (attention and logits counted)."""
    sec_per_iter: float | None
    """Seconds per iteration: given, or implied by the assumed TFLOPs (seed formula solved for time)."""
    tokens_per_sec: float | None
    """global batch * seq len / sec_per_iter."""
    model_tflops_per_gpu: float | None
    """Model FLOPs per second per GPU: eq. 3 without recomputation (PaLM's MFU numerator)."""
    mfu: float | None
    """model_tflops_per_gpu / the dense peak of cluster.gpu_model in train.precision (None when unknown)."""
    hfu: float | None
    """megatron_tflops_per_gpu (eq. 3 as the run recomputes) / that peak (None when unknown)."""
    peak_tflops: float | None
    """That peak."""
    days: float | None
    """Days to train estimate.tokens tokens at that speed."""
    gpu_days: float | None
    """days * GPUs."""
    run_time_s: float | None
    """steps * sec_per_iter: the job's training time (start-up not counted)."""
    tokens: float
    """The token budget of ``days``."""


def estimate(spec: Spec) -> Estimate:
    """The plan's estimate, after the checks of :func:`check` (a SpecError lists its problems); the
    speed-dependent numbers need estimate.tflops_per_gpu or estimate.sec_per_iter."""
    validate(spec)
    return _estimate(spec)


def _estimate(spec: Spec) -> Estimate:
    """The estimate of a spec that passed the checks (DP divides, counts are positive)."""
    if spec.dp is None or spec.batch.global_batch is None:
        raise LogstatError(f"spec {spec.name!r}: no estimate for a spec whose DP does not divide")
    params, model, gbs = parameter_count(spec), spec.model, spec.batch.global_batch
    checkpointing, gpus = spec.train.activation_checkpointing, spec.world_size
    tflops_at_one_second = formulas.seed_tflops_per_gpu(
        size_b=params / 1e9,
        seq_len=model.seq_len,
        global_batch=gbs,
        sec_per_iter=1.0,
        gpus=gpus,
        checkpointing=checkpointing,
    )
    sec_per_iter = spec.estimate.sec_per_iter
    if sec_per_iter is None and spec.estimate.tflops_per_gpu:
        # The seed's TFLOPs formula at 1 s/iteration, divided by the assumed TFLOPs, is the s/iteration.
        sec_per_iter = tflops_at_one_second / spec.estimate.tflops_per_gpu
    speed: dict[str, float | None] = dict.fromkeys(
        (
            "tflops_per_gpu",
            "megatron_tflops_per_gpu",
            "model_tflops_per_gpu",
            "tokens_per_sec",
            "mfu",
            "hfu",
            "days",
            "gpu_days",
            "run_time_s",
        )
    )
    peak = peak_tflops(spec.cluster.gpu_model, spec.train.precision) if spec.cluster.gpu_model else None
    if sec_per_iter:
        executed, model_tflops = (
            formulas.tflops_per_gpu(
                flops_per_iteration=formulas.megatron_flops_per_iteration(
                    global_batch=gbs,
                    seq_len=model.seq_len,
                    layers=model.num_layers,
                    hidden=model.hidden_size,
                    vocab=model.vocab_size,
                    checkpointing=recomputed,
                ),
                sec_per_iter=sec_per_iter,
                gpus=gpus,
            )
            for recomputed in (checkpointing, False)
        )
        tokens_per_sec = formulas.tokens_per_sec(
            global_batch=gbs, seq_len=model.seq_len, sec_per_iter=sec_per_iter
        )
        days = formulas.days_to_train(tokens=spec.estimate.tokens, tokens_per_sec=tokens_per_sec)
        tflops = tflops_at_one_second / sec_per_iter
        speed = {
            "tflops_per_gpu": tflops,
            "megatron_tflops_per_gpu": executed,
            "model_tflops_per_gpu": model_tflops,
            "tokens_per_sec": tokens_per_sec,
            # the definitions of `logstat parse`'s mfu and hfu columns (analytics.summary)
            "mfu": formulas.flops_utilization(tflops_per_gpu=model_tflops, peak_tflops=peak)
            if peak
            else None,
            "hfu": formulas.flops_utilization(tflops_per_gpu=executed, peak_tflops=peak) if peak else None,
            "days": days,
            "gpu_days": formulas.gpu_days(days=days, gpus=gpus),
            "run_time_s": spec.steps * sec_per_iter,
        }
    memory = model_state_memory_per_rank(spec)
    return Estimate(
        params=params,
        params_per_rank=params / (spec.parallel.tp * spec.parallel.pp),
        dp=spec.dp,
        global_batch=gbs,
        state_bytes=model_state_bytes(spec),
        model_state=memory,
        model_state_gib_per_gpu=memory.gpu_bytes / GIB,
        pipeline_efficiency=formulas.pipeline_efficiency(gas=spec.batch.gas, pp=spec.parallel.pp),
        sec_per_iter=sec_per_iter,
        peak_tflops=peak,
        tokens=spec.estimate.tokens,
        **speed,
    )
