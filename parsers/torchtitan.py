"""PyTorch torchtitan log family (github.com/pytorch/torchtitan, 2024-2026).

torchtitan logs through Python logging as ``[titan] 2025-03-01 10:00:12,345 - root - INFO - <message>``
(torchtitan/tools/logging.py), rank 0's lines mostly behind torchrun's ``[rank0]:`` and coloured by
torchtitan/tools/utils.py's ``Color``: the reader drops the rank tag and the colour codes, not ``[titan]
<time> - root - INFO - ``, so every pattern here searches a record rather than anchoring at its start.

Lines read, each fact with its source:

- the step line, a step each (logged at step 1, then every ``metrics.log_freq`` steps): 2025's
  torchtitan/components/metrics.py ``MetricsProcessor.log``: ``step: 10  loss:  7.8512  grad_norm:  1.2345
  memory: 62.13GiB(78.54%)  tps: 6,012  tflops: 348.21  mfu: 35.21%``; 2024's train.py: ``step: 10  loss:
  7.8512  memory: 62.13GiB(78.54%)  wps: 6,012  mfu: 35.21%``. ``loss``, ``grad_norm``, and ``tflops`` as
  ``logged_tflops_per_gpu`` (torchtitan's model FLOPs per token x tps). ``memory`` is the allocator's peak
  *reserved* memory, which no column holds (``mem_max_allocated_mb`` is the allocated peak, which it
  overstates): not recorded. ``mfu`` is not kept either (logstat computes its own).
- tps (wps in 2024) is tokens per second per device: the tokens one data-parallel rank read since the last
  log over the time and its model-parallel group (train.py: ``ntokens / (time_delta *
  non_data_parallel_size)``). Over the whole run that is ``tps x GPUs`` tokens/s (the step's
  ``tokens_per_sec``), so a step took ``global batch x sequence length / (tps x GPUs)`` (its
  ``elapsed_ms``; with log_freq > 1 the mean step since the last log). Both need the run's facts, known
  only once every line was read: ``finish`` computes them (null while a fact is missing).
- ``Training starts at step 1, with local batch size 1, global batch size 8, [gradient accumulation steps
  2, ]sequence length 8192, total steps 1000 (warmup 200)`` (train.py): ``micro_batch_size``,
  ``global_batch_size``, ``gas``, ``seq_len`` and ``train_iters``, each clause read alone (early 2024 printed
  ``Training starts at step 1`` only; 2025's Trainer prints the clauses at its end of ``__init__``, ``Trainer
  is initialized with local batch size 4, ...``, and ``Training starts at step 1.`` alone). A new training
  launch, too: a relaunch appended to the log replaces the steps it logs again.
- ``Building 2-D device mesh with ['dp_shard', 'tp'], [4, 2]`` (parallel_dims.py, the dimensions of size
  above 1): ``gpus`` their product, ``dp`` = dp_replicate x dp_shard (2024: ``dp``), ``tp``, ``pp``, ``cp``
  (1 when not listed). A mesh naming another dimension (an expert mesh) states nothing.
- ``Building llama3 8B with TransformerModelArgs(dim=4096, n_layers=32, ...)`` (2024: ``ModelArgs(``):
  hidden_size, num_layers, num_heads, num_query_groups (n_kv_heads, when below n_heads), vocab_size, and a
  Llama's (its ``multiple_of``) gated FFN: ``swiglu`` and ``ffn_hidden_size`` by its FeedForward's rule;
  ``untied_embeddings`` True (its output layer is its own), unless the args say ``enable_weight_tying=True``;
  ``seq_len``, its ``max_seq_len``: train.py sets it to ``training.seq_len`` before it builds the model
  (2024: ``model_config.max_seq_len = job_config.training.seq_len``; 2025: ``update_from_config``), the only
  statement of it before mid-2024's ``Training starts`` clauses, which come after it.
- ``Model llama3 8B size: 8,030,261,248 total parameters``: ``logged_model_size`` (billions).
- ``CUDA capacity: NVIDIA H100 80GB HBM3 with 79.11GiB memory`` (2024: ``GPU capacity: ... (0) with``):
  ``gpu_model``, by Slurm's normaliser.
- ``Applied full activation checkpointing to the model``: ``activation_checkpointing``; ``selective`` is
  False, as Megatron's selective recomputation: no full recomputation (torchtitan's default selective
  option, per op, saves the matmuls' outputs and recomputes none; its every-n-th-layer option, which the
  line does not tell apart, recomputes 1/n of the layers).
- ``Mixed precision training is handled by fully_shard``: ``precision`` bf16, torchtitan's default
  ``mixed_precision_param`` (the dtype itself is not printed).
- ``Loading the checkpoint at step 500.`` (2025: ``Loading the checkpoint from <folder>/step-500.``) and a
  ``Training starts at step 501``: ``resumed_step``; ``Training completed``: the run's end.

Failures (tracebacks, CUDA OOM, NCCL) are the Slurm family's, read from any log.
"""

from __future__ import annotations

import math
import re

import polars as pl
from logstat.parsers.base import Family, RunBuilder
from logstat.parsers.kinds import (
    NUMBER,
    Events,
    RecordKind,
    RecordTest,
    as_count,
    as_real,
    code_frames,
    step_lines,
)
from logstat.parsers.slurm import gpu_model

NAME = "torchtitan"

# --- the step line, read column-wise --------------------------------------------------------------

#: ``step:`` then ``loss:`` and a throughput: no other family's line has the three (Megatron's ``iteration``,
#: DeepSpeed's ``steps: N loss:``, HF's ``{'loss': ...}`` and NeMo's ``Training epoch`` have not)
STEP_LINE = r"\bstep:\s*\d+\s+loss:\s*\S+.*\s(?:tps|wps):\s*[\d,]+"
_THROUGHPUT_MARKERS = ("tps: ", "wps: ")
_COUNT = r"(\d[\d,]*)"  # tps and step are printed with thousands separators (``{:,}``)


def _field(name: str, value: str = f"({NUMBER})") -> pl.Expr:
    return pl.col("text").str.extract(rf"\b{name}:\s*{value}", 1)


def _plain(text: pl.Expr) -> pl.Expr:
    return text.str.replace_all(",", "", literal=True)


def read_steps(records: pl.LazyFrame) -> Events:
    """A step event per step line; its per-device tps, until ``finish``, in ``tokens_per_sec``."""
    return step_lines(
        records,
        NAME,
        step=as_count(_plain(_field("step", _COUNT))),
        loss=as_real(_field("loss")),
        grad_norm=as_real(_field("grad_norm")),
        tokens_per_sec=as_real(_plain(_field("(?:tps|wps)", _COUNT))),
        logged_tflops_per_gpu=as_real(_plain(_field("tflops", r"([\d,]+\.?\d*)"))),
    )


def _positive(run: RunBuilder, name: str) -> int | None:
    value = run.facts.get(name)
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def finish(run: RunBuilder) -> None:
    """The steps' run tokens/s (tps x GPUs) and time (global batch x sequence / that), from the run's facts
    (see the module's docstring); null where a fact is missing."""
    frame = run.iteration_frame
    if frame is None or not frame.filter(pl.col("family") == NAME).height:
        return
    gpus, batch, seq_len = (_positive(run, name) for name in ("gpus", "global_batch_size", "seq_len"))
    own, per_device = pl.col("family") == NAME, pl.col("tokens_per_sec")
    run_rate = per_device * gpus if gpus else pl.lit(None, pl.Float64)
    elapsed = batch * seq_len * 1000.0 / run_rate if batch and seq_len else pl.lit(None, pl.Float64)
    run.iteration_frame = frame.with_columns(
        elapsed_ms=pl.when(own & (per_device > 0)).then(elapsed).otherwise(pl.col("elapsed_ms")),
        tokens_per_sec=pl.when(own).then(run_rate).otherwise(per_device),
    )


# --- the rare lines, read in Python ---------------------------------------------------------------

_STARTS = "Training starts at step "
_INITIALIZED = "Trainer is initialized with "
_START_CLAUSES = {
    "micro_batch_size": re.compile(r"local batch size (\d+)"),
    "global_batch_size": re.compile(r"global batch size (\d+)"),
    "gas": re.compile(r"gradient accumulation steps (\d+)"),
    "seq_len": re.compile(r"sequence length (\d+)"),
    "train_iters": re.compile(r"total steps (\d+)|total (\d+) steps"),
}
_MESH = re.compile(r"Building \d+-D device mesh with \[([^\]]*)\], \[([\d, ]*)\]")
_MESH_NAMES = {"dp", "dp_replicate", "dp_shard", "cp", "tp", "pp"}
_MODEL = re.compile(r"Building \S+ \S+ with (?:Transformer)?ModelArgs\((.*)\)")
_ARGUMENT = re.compile(r"(\w+)=('[^']*'|[^,]*)")
_MODEL_SHAPE = {
    "dim": "hidden_size",
    "n_layers": "num_layers",
    "n_heads": "num_heads",
    "vocab_size": "vocab_size",
}
_SIZE = re.compile(r"Model \S+ \S+ size: ([\d,]+) total parameters")
_CAPACITY = re.compile(r"(?:CUDA|GPU) capacity: (.+?)(?: \(\d+\))? with [\d.]+GiB memory")
_CHECKPOINTING = re.compile(r"Applied (full|selective) activation checkpointing to the model")
_FSDP_PRECISION = "Mixed precision training is handled by fully_shard"
#: a checkpoint's load: 2024's ``Loading the checkpoint at step 500.``, 2025's (components/checkpoint.py)
#: ``Loading the checkpoint from ./outputs/checkpoint/step-2000.``, a folder named by its step
_LOADING = re.compile(r"Loading the checkpoint (?:at step |from \S*step-)(\d+)\.?$")
#: the first step a launch trains (``Training starts at step 2001``): one after the step it resumed at
_FIRST_STEP = re.compile(re.escape(_STARTS) + r"(\d+)")
#: the whole message, so that another program's "Training completed." is not torchtitan's end
_COMPLETED = re.compile(r"(?:^|- )Training completed$")


def llama_ffn_hidden_size(dim: int, multiple_of: int, multiplier: float | None) -> int:
    """torchtitan's Llama FeedForward width: 2/3 of 4 x dim, times ``ffn_dim_multiplier``, rounded up to
    ``multiple_of`` (llama3 8B: 14336)."""
    hidden = int(2 * (4 * dim) / 3)
    if multiplier is not None:
        hidden = int(multiplier * hidden)
    return multiple_of * math.ceil(hidden / multiple_of)


def _model_facts(arguments: str, lineno: int, run: RunBuilder) -> None:
    values = {name: value for name, value in _ARGUMENT.findall(arguments)}
    number = lambda name: int(values[name]) if values.get(name, "").isdigit() else None  # noqa: E731
    for argument, fact in _MODEL_SHAPE.items():
        run.set_fact(fact, number(argument), NAME, lineno)
    run.set_fact("seq_len", number("max_seq_len"), NAME, lineno)
    # torchtitan's Llama (and DeepSeek) Transformer has an output layer of its own, never the embedding's;
    # a model whose args can tie them (its Qwen3's enable_weight_tying) says so
    run.set_fact("untied_embeddings", values.get("enable_weight_tying") != "True", NAME, lineno)
    heads, kv_heads = number("n_heads"), number("n_kv_heads")
    if kv_heads and heads and kv_heads < heads:
        run.set_fact("num_query_groups", kv_heads, NAME, lineno)
    dim, multiple_of = number("dim"), number("multiple_of")
    multiplier = values.get("ffn_dim_multiplier")
    scale = None if multiplier in (None, "None") else _finite(multiplier)
    # a Llama's gated FFN (w2(silu(w1 x) * w3 x)): DeepSeek's args have no multiple_of; a multiplier that
    # is no finite number, or a width no float holds, leaves it unknown
    if dim and multiple_of and (scale is not None or multiplier in (None, "None")):
        try:
            width = llama_ffn_hidden_size(dim, multiple_of, scale)
        except OverflowError:
            return
        run.set_fact("ffn_hidden_size", width, NAME, lineno)
        run.set_fact("swiglu", True, NAME, lineno)


def _finite(text: str) -> float | None:
    """``float(text)`` when that is a finite number, else None."""
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def _mesh_facts(names: str, sizes: str, lineno: int, run: RunBuilder) -> None:
    dims = dict(
        zip(
            re.findall(r"'(\w+)'", names),
            (int(size) for size in sizes.split(",") if size.strip()),
            strict=False,
        )
    )
    if not set(dims) <= _MESH_NAMES:
        return
    run.set_fact("gpus", math.prod(dims.values()), NAME, lineno)
    run.set_fact(
        "dp", dims.get("dp", 1) * dims.get("dp_replicate", 1) * dims.get("dp_shard", 1), NAME, lineno
    )
    for name in ("tp", "pp", "cp"):
        run.set_fact(name, dims.get(name, 1), NAME, lineno)


def parse_line(text: str, lineno: int, run: RunBuilder) -> None:
    """torchtitan's start-up, checkpoint and end lines (see the module's docstring)."""
    if _STARTS in text or _INITIALIZED in text:
        run.saw(NAME)
        if _STARTS in text:
            run.new_launch(NAME)
            if (first := _FIRST_STEP.search(text)) and int(first[1]) > 1:
                run.set_fact("resumed_step", int(first[1]) - 1, NAME, lineno)
        for fact, clause in _START_CLAUSES.items():
            if found := clause.search(text):
                run.set_fact(fact, int(found[1] or found[2]), NAME, lineno)
    elif mesh := _MESH.search(text):
        run.saw(NAME)
        _mesh_facts(mesh[1], mesh[2], lineno, run)
    elif model := _MODEL.search(text):
        run.saw(NAME)
        _model_facts(model[1], lineno, run)
    elif size := _SIZE.search(text):
        run.set_fact("logged_model_size", int(size[1].replace(",", "")) / 1e9, NAME, lineno)
    elif capacity := _CAPACITY.search(text):
        run.set_fact("gpu_model", gpu_model(capacity[1]), NAME, lineno)
    elif checkpointing := _CHECKPOINTING.search(text):
        run.set_fact("activation_checkpointing", checkpointing[1] == "full", NAME, lineno)
    elif _FSDP_PRECISION in text:
        run.set_fact("precision", "bf16", NAME, lineno)
    elif loading := _LOADING.search(text.rstrip()):
        run.set_fact("resumed_step", int(loading[1]), NAME, lineno)
    elif _COMPLETED.search(text.rstrip()):
        run.complete(text.strip(), lineno)


#: torchtitan's code in a traceback's frames
CODE = ("/torchtitan/",)

FAMILY = Family(
    name=NAME,
    markers=(
        *_THROUGHPUT_MARKERS,
        _STARTS,
        _INITIALIZED,
        "-D device mesh with ",
        "ModelArgs(",
        " total parameters",
        " capacity: ",
        " activation checkpointing to the model",
        _FSDP_PRECISION,
        "Loading the checkpoint ",
        "Training completed",
        *CODE,
    ),
    parse_line=parse_line,
    finish=finish,
    kinds=(
        RecordKind(
            family=NAME,
            name="step",
            test=RecordTest(markers=_THROUGHPUT_MARKERS, pattern=STEP_LINE),
            read=read_steps,
        ),
        code_frames(NAME, CODE),
    ),
    description="PyTorch torchtitan: step lines (tps or wps), device mesh, model args, training start and end",
)
