"""DeepSpeed log family: the engine's config dump, ``step=`` lines, throughput and flops-profiler lines.

Formats of DeepSpeed 0.3.x (the 2021 logs) and 0.19: the config printer's ``name ..... value`` lines,
``zero_config`` as multi-line JSON (2021) or ``key=value`` pairs, ``json = {`` the user config as JSON;
the engine's ``step=N, skipped=N, lr=[...]``; the ThroughputTimer's ``.../global_step=G, ...,
CurrSamplesPerSec=Y, MemAllocated=aGB, MaxMemAllocated=bGB`` (0.7's ``E/M, RunningAvgSamplesPerSec=...``
every step, of the step before it; 0.5/0.6's ``E/M, SamplesPerSec=`` a running average); the pipeline
engine's ``steps: N loss: X iter time (s): T samples/sec: S``, ``CONFIG: micro_batches=N
micro_batch_size=M``, ``UNIQUE_PARAMS=N``; ZeRO-3's ``finished initializing model - num_params = 363,
num_elems = 13.02B``; the flops profiler's summary (its latency is one profiled
micro-batch's; its ``FLOPS per GPU`` the step's). A dump's ``world_size`` is the data-parallel size, the
GPU count unless Megatron or a pipeline's topology (model parallelism) came first. Of a restarted job's
dumps the last wins.

RECORDS reads each throughput and pipeline record alone; SEQUENCE the printer's, step and profiler
records, which depend on the run's earlier ones, in segments, each after the ``carry`` of the one before;
the blocks JSON_VALUES and PROFILE hand it their lines.
"""

from __future__ import annotations

import re

import polars as pl
from logstat.parsers import kinds
from logstat.parsers.base import Family
from logstat.parsers.kinds import NUMBER, Block, Events, RecordKind, RecordTest

NAME = "deepspeed"
PS = kinds.PYTHON_SPACE
#: whitespace the old grammars skipped between tokens
_WS = r"[ \t\r\n]*"
WHITESPACE = "".join(filter(str.isspace, map(chr, range(0x3001))))  # what str.strip() strips
_WORD = rf"^{PS}*([^\s\x1c-\x1f]+)"  # str.split()[0]
_DECIMAL = pl.Decimal(38, 0)
#: a record's step events are numbered from this index (a Megatron record glued to it first), by band
_EVENT_BASE = 64
_STEP, _THROUGHPUT, _PIPE, _PROFILE = range(4)
_INT_FACTS = ("global_batch_size", "micro_batch_size", "gas", "zero_stage", "dp", "gpus", "pp", "tp")
_OFFLOADS = ("offload_param", "offload_optimizer")
_STATEMENT = dict.fromkeys(("run", "order", "dump"), pl.Int64)
#: the engine's wall-clock breakdown (deepspeed/utils/timer.py): its step timers print at every step's end,
#: during a step its micro-step timers at every micro-step and ZeRO's optimizer timers (zero/stage3.py,
#: stage_1_and_2.py); ``step=N`` only every steps_per_print, inside the step, before its timers
ENGINE_STEP_TIMERS = ("fwd", "bwd", "bwd_inner", "bwd_allreduce", "step")
ENGINE_IN_STEP_TIMERS = (
    *(f"{name}_microstep" for name in ENGINE_STEP_TIMERS),
    *("optimizer_allgather", "optimizer_gradients", "optimizer_step"),
    *("optimizer_swap_in_state", "optimizer_swap_out_state"),
)
_STATEMENT |= dict.fromkeys(("fact", "value", "note", "unless_seen"), pl.String)


def _strip(text: pl.Expr) -> pl.Expr:
    return text.str.strip_chars(WHITESPACE)


def _real(name: str) -> pl.Expr:
    return pl.col(name).cast(pl.Float64, strict=False)


def _as_bool(text: pl.Expr) -> pl.Expr:
    """True or False for a first word ``true`` / ``false`` (any case, a trailing comma), else null."""
    word = text.str.extract(_WORD, 1).str.strip_chars_end(",").str.to_lowercase()
    return pl.when(word == "true").then(True).when(word == "false").then(False)


def _divided(number: pl.Expr, divisor: float) -> pl.Expr:
    """``number / divisor`` as Python divides: polars multiplies by a literal's reciprocal (2630 / 1e9 is
    2.63e-06, 2630 * 1e-9 is 2.6300000000000002e-06)."""
    return number / pl.int_range(pl.len()).cast(pl.Float64).clip(divisor, divisor)


def _matches(records: pl.DataFrame, pattern: str, names: list[str]) -> pl.DataFrame:
    """Every match of ``pattern`` in each record (its other columns kept): ``seq`` its index, its groups as
    ``names`` (read off the match: a capture over a long record costs ten times a match), ``step`` the
    first's integer."""
    groups = pl.col("match").str.extract_groups(pattern).struct.rename_fields(names)
    return (
        records.select(pl.exclude("text"), match=pl.col("text").str.extract_all(pattern))
        .with_columns(seq=pl.int_ranges(pl.col("match").list.len()))
        .explode("match", "seq")
        .drop_nulls("match")
        .with_columns(groups.alias("groups"))
        .unnest("groups")
        .with_columns(step=pl.col(names[0]).cast(pl.Int64, strict=False))
    )


def _steps(found: pl.DataFrame, band: int, mode=kinds.RECORD, at="order", **metrics: pl.Expr) -> Events:
    """A step event with ``metrics`` per row of ``found`` (``step``, at the order ``at``, ``seq`` its place
    there; null in a metrics record, which is of the step before it), a note for a step beyond int64 (its
    text ``digits``: it records nothing), a mark at each."""
    schema = kinds.STEP_METRICS_SCHEMA
    metrics = {name: metrics.get(name, pl.lit(None)).cast(dtype) for name, dtype in schema.items()}
    numbered = mode in (kinds.RECORD, kinds.COUNTED)
    steps = found.drop_nulls("step") if numbered else found.with_columns(pl.col("step").cast(pl.Int64))
    steps = steps.with_columns(band=pl.lit(band, pl.Int8), mode=pl.lit(mode, pl.Int8))
    steps = steps.select("step", "band", "mode", order=at, seq="seq", family=pl.lit(NAME), **metrics)
    note = kinds.too_long_note("iteration", pl.col("digits").cast(_DECIMAL, strict=False))
    unnumbered = found.filter(pl.col("step").is_null(), pl.lit(numbered))
    notes = unnumbered.select("order", family=pl.lit(NAME), message=note)
    marks = kinds.marks_of(found.lazy(), NAME, kinds.SEEN)
    return Events(steps=[steps], notes=[notes.drop_nulls("message")], marks=[marks])


def _numbered(events: Events) -> Events:
    """``events`` with the step events of a record numbered from ``_EVENT_BASE``, by band and ``seq``."""
    if events.steps:
        steps = pl.concat(events.steps).sort("order", "band", "seq")
        index = pl.int_range(pl.len()).over("order").clip(0, kinds.PYTHON_EVENTS - 1 - _EVENT_BASE)
        events.steps = [steps.with_columns(order=pl.col("order") + _EVENT_BASE + index).drop("band", "seq")]
    return events


def _statements(frame: pl.DataFrame, fact, value: pl.Expr, note=None, unless=()) -> pl.DataFrame:
    """Statements of ``fact`` (``run``, ``order``, ``dump``: null outside a dump), ``value`` as text or
    null and a ``note``; ``unless_seen``: the families (a comma-joined list) whose record before cancels it."""
    fact = pl.lit(fact) if isinstance(fact, str) else fact
    unless = ",".join(unless) if unless else None
    columns = {"dump": "dump" if "dump" in frame.columns else None, "unless_seen": pl.lit(unless)}
    stated = frame.select("run", "order", fact=fact, value=value.cast(pl.String), note=note, **columns)
    return stated.filter(pl.col("value").is_not_null() | pl.col("note").is_not_null()).cast(_STATEMENT)


def _count(frame: pl.DataFrame, text: pl.Expr, fact, *, whole: bool = False, nan=None, **kw) -> pl.DataFrame:
    """Statements of ``int(text)`` (``whole``) or ``int(float(text))`` (of a word, NaN or infinity none,
    noted ``nan``: a ``pl.when`` chain), noted when beyond int64."""
    if whole:
        wide = pl.when(text.str.contains(r"^[-+]?[0-9]+$")).then(text.cast(_DECIMAL, strict=False))
    else:  # truncated as int() does
        number = text.cast(pl.Float64, strict=False)
        wide = pl.when(number.is_finite()).then(number.cast(pl.Int128, strict=False))
    count, note = wide.cast(pl.Int64, strict=False), kinds.too_long_note(fact, wide)
    note = note if nan is None else nan.otherwise(note)
    return _statements(frame, fact, count, pl.when(count.is_null()).then(note), **kw)


def _facts(statements: pl.DataFrame) -> Events:
    """The facts and notes of ``statements`` (in order). In a dump the first statement of a fact wins (its
    attributes come before the user's JSON; a carried one, at order -1, before the segment) and an integer
    beyond int64 is noted only before it; a later dump (a relaunched engine) states it again."""
    group, value, first = ["run", "dump", "fact"], pl.col("value"), pl.col("first")
    first_in_dump = pl.col("dump").is_null() | pl.struct(group).is_first_distinct()
    stated = statements.drop_nulls("value").filter(first_in_dump)
    firsts = stated.select(*group, first="order")
    noted = statements.filter(value.is_null()).join(firsts, on=group, how="left")
    noted = noted.filter(first.is_null() | (pl.col("order") < first))
    stated = stated.filter(pl.col("order") >= 0).with_columns(family=pl.lit(NAME))
    typed = {
        (*_INT_FACTS, "resumed_step", "seq_len"): value.cast(pl.Int64),
        _OFFLOADS: value == "true",
        ("precision",): value,
    }
    typed[("logged_model_size",)] = value.cast(pl.Float64)
    facts = [stated.filter(pl.col("fact").is_in(names)).with_columns(x) for names, x in typed.items()]
    facts = [frame.select("order", "fact", "value", "family", "unless_seen") for frame in facts]
    return Events(facts=facts, notes=[noted.select("order", family=pl.lit(NAME), message="note")])


# --- the records read alone: throughput, pipeline steps, pipeline config (kind RECORDS) ---------------

#: a ThroughputTimer record's rates after its head (the running average, then the step's), and its memory,
#: all or nothing
_RATES = rf"{_WS},{_WS}RunningAvgSamplesPerSec={_WS}{NUMBER}{_WS},{_WS}CurrSamplesPerSec={_WS}({NUMBER})"
_MEMORY = rf"(?:{_WS},{_WS}MemAllocated={_WS}({NUMBER}){_WS}GB,{_WS}MaxMemAllocated={_WS}({NUMBER}){_WS}GB)?"
#: the head of DeepSpeed 0.5-0.7's ThroughputTimer records: ``epoch/micro-steps of the epoch``, no step
_EPOCH_MICRO_STEPS = r"(?:^|[\s\]])[0-9]+/([0-9]+)"
#: ThroughputTimer's record
THROUGHPUT = rf"epoch={_WS}[0-9]+{_WS}/micro_step={_WS}[0-9]+{_WS}/global_step={_WS}([0-9]+){_RATES}{_MEMORY}"
#: DeepSpeed 0.7's ThroughputTimer record, at every step's end: a metric of the step logged before it
#: (``step=N`` is printed in the step, before it)
THROUGHPUT_07 = rf"{_EPOCH_MICRO_STEPS}{_RATES}{_MEMORY}"
#: DeepSpeed 0.5/0.6's ThroughputTimer record, every steps_per_print micro-steps: ``SamplesPerSec=`` the
#: running average since its start_step (of the step logged before it)
THROUGHPUT_05 = rf"{_EPOCH_MICRO_STEPS}{_WS},{_WS}SamplesPerSec={_WS}({NUMBER})"
#: the pipeline engine's step record, read at the first ``iter time (s):`` after the loss that a number
#: and ``samples/sec:`` follow
PIPE_STEPS = (
    rf"steps:{_WS}([0-9]+){_WS}loss:{_WS}({NUMBER}).*?iter time \(s\):{_WS}({NUMBER}){_WS}"
    rf"samples/sec:{_WS}({NUMBER})"
)
PIPE_CONFIG = r"CONFIG: micro_batches=(\d+) micro_batch_size=(\d+)"
UNIQUE_PARAMS = r"UNIQUE_PARAMS=(\d+)"
#: ZeRO-3's ``zero.Init`` leaving its context on rank 0 (runtime/zero/partition_parameters.py ``__exit__``):
#: ``finished initializing model - num_params = 363, num_elems = 13.02B``, the elements of every parameter
#: it built (the whole model, frozen ones too), in billions to two decimals, since the first zero.Init;
#: ``finished initializing model with 68.98B parameters`` before 0.9
ZERO_INIT = r"finished initializing model(?: - num_params = \d+, num_elems = | with )([0-9]+(?:\.[0-9]+)?)B"
#: the pipeline grid's rank map, printed whole by rank 0 (``PipelineParallelGrid``): its coordinates run
#: in order, so the last holds each axis's size less one and the last rank
TOPOLOGY = r"Using topology: \{.*ProcessCoord\(([^()]*)\): ([0-9]+)\}"
#: PipelineModule's partition, printed by rank 0 for every stage in order (runtime/pipe/module.py:
#: ``stage={stage} layers={stop - start}``): the last stage's number is the pipeline's size less one
PIPE_STAGE = r"^stage=([0-9]+) layers=[0-9]+$"
#: the checkpoint engine's load of a checkpoint under its default tag (``global_step{N}``): the run resumed
#: at step N. torch_checkpoint_engine.py: ``[Torch] Begin Load checkpoint from {path}...`` (0.15 on), ``[Torch]
#: Loading checkpoint from {path}...`` before, the engine's ``rank: 0 loading checkpoint: {path}`` before the
#: checkpoint engine (0.6 and older)
CHECKPOINT_LOAD = (
    r"(?:\[Torch\] (?:Begin Load|Loading) checkpoint from |\brank: [0-9]+ loading checkpoint: )"
    r"\S*/global_step([0-9]+)/"
)
#: DeepSpeed-Chat's ``print_throughput`` (dschat/utils/perf.py, every step of its SFT and reward-model
#: training, rank 0): ``Model Parameters: 1.316 B, Latency: 0.36s, TFLOPs: 11.34, Samples/sec: 22.12, Time/seq
#: 0.05s, Batch Size: 8, Sequence Length: 512``, the model's size (``numel`` of every parameter) and the
#: sequence length it trains on
CHAT_THROUGHPUT = r"^Model Parameters: ([0-9]+\.[0-9]+) B, Latency: .*, Sequence Length: ([0-9]+)$"
#: DeepSpeed-Chat's step 3 (training/step3_rlhf_finetuning/main.py), a line per generation batch after its
#: PPO epochs: ``epoch: 0|step: 4|ppo_ep: 1|act_loss: ...`` (2023's first), ``Epoch: 0 | Step: 4 | PPO Epoch: 1 |
#: Actor Loss: ...`` since; ``step`` is the batch's index in its epoch (``enumerate``), the actor's loss the loss
CHAT_PPO_STEP = (
    rf"^[Ee]poch: ([0-9]+) ?\| ?[Ss]tep: ([0-9]+) ?\| ?(?:ppo_ep|PPO Epoch): [0-9]+ ?\| ?"
    rf"(?:act_loss|Actor Loss): ({NUMBER}) ?\|"
)
#: the epoch's banner before them: ``Beginning of Epoch 1/1, Total Generation Batches 120``, its batches
CHAT_EPOCH = r"^Beginning of Epoch [0-9]+/[0-9]+, Total Generation Batches ([0-9]+)$"
#: DeepSpeedConfig's word at its start (runtime/config.py, 0.15 on: ``Config mesh_device None world_size = 16``):
#: its ``world_size``, the data-parallel size the dump prints too (a float where Ulysses divided the world by
#: its sequence-parallel size); without a device mesh nor that division the GPU count unless model
#: parallelism came first
CONFIG_WORLD = r"Config mesh_device (.*) world_size = ([0-9]+(?:\.0)?)$"
#: what a topology's record is marked as seen by: the dump's ``world_size`` after one is the DP size
TOPOLOGY_SEEN = "deepspeed topology"
_AXES = {"pp": "pipe", "dp": "data", "tp": "model"}
_RECORD_MARKERS = (
    "SamplesPerSec=",
    "iter time (s):",
    "CONFIG: micro_batches=",
    "UNIQUE_PARAMS=",
    "finished initializing model",
    "Using topology:",
    " layers=",
    " checkpoint from ",
    " loading checkpoint: ",
    "Model Parameters: ",
    "Config mesh_device ",
    "poch: ",
    "Total Generation Batches ",
)
_RECORDS_PATTERN = "|".join(
    f"(?:{pattern})"
    for pattern in (
        THROUGHPUT,
        THROUGHPUT_07,
        THROUGHPUT_05,
        PIPE_STEPS,
        PIPE_CONFIG,
        UNIQUE_PARAMS,
        ZERO_INIT,
        TOPOLOGY,
        PIPE_STAGE,
        CHECKPOINT_LOAD,
        CHAT_THROUGHPUT,
        CONFIG_WORLD,
        CHAT_PPO_STEP,
        CHAT_EPOCH,
    )
)


def _record_events(records: pl.DataFrame) -> Events:
    """A step event per throughput record (``CurrSamplesPerSec``; the memory, GB (DeepSpeed divides by
    1024**3), back to MiB like Megatron's) and pipeline step (loss, time, samples/s); of a record's first
    ``CONFIG:`` the gradient accumulation steps and micro batch, of ``UNIQUE_PARAMS=`` or ZeRO-3's
    ``finished initializing model`` the model size, of a
    pipeline's topology the GPU count and each axis's size (DeepSpeed's ``pipe``, ``data``, ``model``), of a
    checkpoint's load the step resumed at, of the config's world size the DP size (and GPUs)."""
    throughput = _matches(records, THROUGHPUT, ["digits", "curr", "mem", "max_mem"])
    memory = {"mem_allocated_mb": _real("mem") * 1024, "mem_max_allocated_mb": _real("max_mem") * 1024}
    # the timer's own count of the steps since the engine started: a resumed run's are of its launch
    events = _steps(throughput, _THROUGHPUT, kinds.COUNTED, samples_per_sec=_real("curr"), **memory)
    legacy = _matches(records, THROUGHPUT_07, ["digits", "curr", "mem", "max_mem"]).with_columns(step=None)
    events.extend(_steps(legacy, _THROUGHPUT, kinds.STEP_METRICS, samples_per_sec=_real("curr"), **memory))
    averaged = _matches(records, THROUGHPUT_05, ["digits", "average"]).with_columns(step=None)
    events.extend(_steps(averaged, _THROUGHPUT, kinds.STEP_METRICS, samples_per_sec=_real("average")))
    pipe = _matches(records, PIPE_STEPS, ["digits", "loss", "seconds", "rate"])
    rate = {"loss": _real("loss"), "elapsed_ms": _real("seconds") * 1000, "samples_per_sec": _real("rate")}
    events.extend(_steps(pipe, _PIPE, **rate))
    events.extend(_chat_ppo_steps(records))
    config = _matches(records, PIPE_CONFIG, ["gas", "micro_batch_size"]).filter(pl.col("seq") == 0)
    unique = _matches(records, UNIQUE_PARAMS, ["params"]).filter(pl.col("seq") == 0)
    counts = [_count(config, pl.col(fact), fact, whole=True) for fact in ("gas", "micro_batch_size")]
    size = _statements(unique, "logged_model_size", _divided(_real("params"), 1e9))
    # the first: zero.Init's count is a class's running total, of every model built after it too (a
    # reference model, a critic)
    built = _matches(records, ZERO_INIT, ["billions"]).filter(pl.col("seq") == 0).unique("run", keep="first")
    built_size = _statements(built, "logged_model_size", _real("billions"))
    topology = _matches(records, TOPOLOGY, ["axes", "last"]).filter(pl.col("seq") == 0)
    axes = [_count(topology, _axis(name) + 1, fact) for fact, name in _AXES.items()]
    gpus = _count(topology, pl.col("last").cast(pl.Int64, strict=False) + 1, "gpus")
    stages = _matches(records, PIPE_STAGE, ["stage"])
    # the last line's counts, where no topology came first: printed whole on one line, it is what a cut
    # list of stages is not
    pipeline = _count(stages, pl.col("stage").cast(pl.Int64, strict=False) + 1, "pp", unless=(TOPOLOGY_SEEN,))
    loaded = _matches(records, CHECKPOINT_LOAD, ["digits"])
    resumed = _count(loaded, pl.col("digits"), "resumed_step", whole=True)
    # restated every step: the last (a segment's last is restated by the next segment's, as it would be read
    # whole)
    chat = _matches(records, CHAT_THROUGHPUT, ["billions", "seq_len"]).unique("run", keep="last")
    chat_facts = [
        _statements(chat, "logged_model_size", _real("billions")),
        _count(chat, pl.col("seq_len"), "seq_len"),
    ]
    world = _matches(records, CONFIG_WORLD, ["mesh", "world"])
    # a device mesh's data-parallel group, or Ulysses's world / sequence-parallel size (a float), is no GPU count
    unmeshed = world.filter(pl.col("mesh") == "None", ~pl.col("world").str.contains(".", literal=True))
    world_facts = _world_size(world, unmeshed, pl.col("world"))
    statements = [*counts, size, built_size, *axes, gpus, pipeline, resumed, *chat_facts, *world_facts]
    events.extend(_facts(pl.concat(statements)))
    seen = [
        kinds.marks_of(frame.lazy(), NAME, kinds.SEEN)
        for frame in (config, unique, built, topology, stages, loaded, chat, world)
    ]
    events.marks += [*seen, kinds.marks_of(topology.lazy(), TOPOLOGY_SEEN, kinds.SEEN)]
    return events


def _chat_ppo_steps(records: pl.DataFrame) -> Events:
    """A step per DeepSpeed-Chat PPO line: its batch's index from 1, after the batches of the epochs before
    (its epoch's banner's count; a later epoch's line without one is no step)."""
    found = _matches(records, CHAT_PPO_STEP, ["epoch", "index", "loss"]).sort("run", "order")
    banners = _matches(records, CHAT_EPOCH, ["batches"]).select("run", "order", batches=pl.col("step"))
    found = found.join_asof(banners.sort("run", "order"), on="order", by="run", check_sortedness=False)
    epoch, index = (pl.col(name).cast(pl.Int64, strict=False) for name in ("epoch", "index"))
    before = pl.when(epoch == 0).then(0).otherwise(epoch * pl.col("batches"))
    found = found.with_columns(step=before + index + 1, digits=pl.col("index"))
    return _steps(found, _STEP, loss=_real("loss"))


def _axis(name: str) -> pl.Expr:
    """The coordinate ``name`` of a topology's last rank (null if the grid has no such axis)."""
    return pl.col("axes").str.extract(rf"(?:^|[ ,]){name}=([0-9]+)", 1).cast(pl.Int64, strict=False)


RECORDS = RecordKind(
    family=NAME,
    name="records",
    test=RecordTest(markers=_RECORD_MARKERS, pattern=_RECORDS_PATTERN),
    read=lambda records: _numbered(_record_events(records.collect())),
    facts=(
        "gas",
        "micro_batch_size",
        "logged_model_size",
        "pp",
        "dp",
        "tp",
        "gpus",
        "resumed_step",
        "seq_len",
    ),
)


# --- the steps: ``step=N, skipped=M, lr=[...]`` ----------------------------------------------------------

#: a step record, after a character that is no word character nor ``/`` (or none)
STEP_RECORD = (
    rf"(?:^|[^\w/])step={_WS}([0-9]+){_WS}, skipped={_WS}([0-9]+){_WS}, lr={_WS}\["
    rf"(?:{_WS}({NUMBER})(?:{_WS},{_WS}{NUMBER})*)?{_WS}\]"
)


def _progress(frame: pl.DataFrame, carry: pl.DataFrame) -> tuple[Events, pl.DataFrame]:
    """A step event per step record (its first ``lr``) but step 0, printed at the engine's start. As
    ``skipped=`` counts since the start, a step's are those since the record before (after the ``total``
    carried), none if fewer. And each run's last total."""
    # a record glued after another's "]": a space after every "]" leaves it a character before its own
    spaced = pl.col("text").str.replace_all("]", "] ", literal=True)
    stepped = frame.filter(pl.col("text").str.contains("step=", literal=True)).select("run", "order", spaced)
    found = _matches(stepped, STEP_RECORD, ["digits", "total", "lr"])
    found = found.with_columns(pl.col("total").cast(pl.Int64, strict=False))
    found = pl.concat([carry.select("run", "total", order=pl.lit(-1, pl.Int64)), found], how="diagonal")
    total = pl.col("total")
    skipped = pl.max_horizontal(total - total.shift().over("run").fill_null(0), 0)
    found = found.sort("run", "order", "seq").with_columns(skipped=skipped)
    steps = found.filter(pl.col("digits").str.contains("[1-9]"))
    return _steps(steps, _STEP, lr=_real("lr"), skipped=pl.col("skipped")), found.unique("run", keep="last")


# --- the flops profiler's summary ----------------------------------------------------------------------

PROFILE_HEADER = "DeepSpeed Flops Profiler"
#: a summary is read this many lines after its header (of whichever file: a header near the end of a
#: job's .out opens the first lines of its .err too)
PROFILE_WINDOW_LINES = 60
PROFILE_STEP = r"Profile Summary at step (\d+)"
#: summary labels (the text before the value) -> what they state; the first a record starts with
PROFILE_LABELS: dict[str, str] = {
    "world size:": "gpus",
    "data parallel size:": "dp",
    "batch size per GPU:": "micro_batch_size",
    "params of model = params per GPU * mp_size:": "logged_model_size",
    "params of model:": "logged_model_size",
}
_LABELS = "|".join(map(re.escape, PROFILE_LABELS))
_LABEL = rf"^(?:FLOPS per GPU = [\d.]+ \* fwd flops per GPU / iter latency:|{_LABELS})"
_PROFILE_LINE = rf"Profile Summary at step \d|^{PS}*(?:FLOPS per GPU = |{_LABELS})"
_PROFILE_MARKERS = ("Profile Summary at step", "FLOPS per GPU = ", *PROFILE_LABELS)


def _scaled(text: pl.Expr, unit: str = "") -> pl.Expr:
    """A value as the profiler prints one, ``2.63 K`` -> 2630.0; ``unit`` (``FLOPS``) after it taken off."""
    body = _strip(text)
    if unit:
        body = _strip(body.str.replace(re.escape(unit) + "$", ""))
    parts = body.str.extract_groups(rf"^({NUMBER}){_WS}([TGBMKmu])?$")
    scale = parts.struct[1].replace_strict(kinds.SI_PREFIXES, default=1.0, return_dtype=pl.Float64)
    return parts.struct[0].cast(pl.Float64, strict=False) * scale


def _profile(lines: pl.DataFrame, carry: pl.DataFrame) -> tuple[Events, pl.DataFrame]:
    """Each summary (60 lines after its header, or up to the next): ``Profile Summary at step N`` names the
    step of the lines after it, whose ``FLOPS per GPU`` is its ``logged_tflops_per_gpu`` (at the step's
    line); its counts are facts (``int()``: NaN or infinity raised, noted), its parameters the model size.
    And each run's last header's line."""
    header = pl.col("text").str.contains(PROFILE_HEADER, literal=True)
    carried = carry.select("run", summary=pl.lit(-1, pl.Int64), opened="profiled").drop_nulls("opened")
    headers = pl.concat([carried, lines.filter(header).select("run", summary="order", opened="line")])
    stripped = _strip(pl.col("text"))
    step, fact, value, rest = map(pl.col, ["step", "fact", "value", "rest"])
    label = pl.when(step.is_null()).then(stripped.str.extract(_LABEL, 0))
    number = step.cast(pl.Int64, strict=False)
    said = (
        lines.filter(~header)
        .join_asof(headers, left_on="order", right_on="summary", by="run", check_sortedness=False)
        .filter(pl.col("line") - pl.col("opened") <= PROFILE_WINDOW_LINES)
        .with_columns(step=pl.col("text").str.extract(PROFILE_STEP, 1))
        .with_columns(label=label, at=pl.when(step.is_not_null()).then("order"))
        .with_columns(pl.col("step", "at").forward_fill().over("summary"))
        .drop_nulls("label")
        .with_columns(fact=pl.col("label").replace_strict(PROFILE_LABELS, default="flops"), step=number)
        .with_columns(rest=stripped.str.slice(pl.col("label").str.len_chars()))
        .with_columns(value=pl.when(fact == "flops").then(_scaled(rest, "FLOPS")).otherwise(_scaled(rest)))
        .drop_nulls("value")
    )
    flops = said.filter(fact == "flops").drop_nulls("step").with_columns(seq="order", digits=None)
    events = _steps(flops, _PROFILE, kinds.STEP_METRICS, "at", logged_tflops_per_gpu=_divided(value, 1e12))
    infinite = pl.lit("OverflowError: cannot convert float infinity to integer")
    nan = pl.when(value.is_nan()).then(pl.lit("ValueError: cannot convert float NaN to integer"))
    nan = nan.when(value.is_infinite()).then(infinite)
    counts = _count(said.filter(fact.is_in(["gpus", "dp", "micro_batch_size"])), value, fact, nan=nan)
    size = _statements(said.filter(fact == "logged_model_size"), fact, _divided(value, 1e9))
    events.extend(_facts(pl.concat([counts, size])))
    return events, headers.group_by("run").agg(profiled=pl.col("opened").last())


# --- the config printer's dumps ---------------------------------------------------------------------------

PRINT_TAG = r"\[config\.py:\d+:print(?:_user_config)?\]"
_DUMP_HEADER = "DeepSpeedEngine configuration"
#: a JSON value is read at most this many lines after the attribute that opens it, in the same file
JSON_MAX_LINES = 300
#: dump attributes that are a count; the user config's at the top of ``json = {...}`` (but the stage)
DUMP_FACTS = {"train_batch_size": "global_batch_size", "train_micro_batch_size_per_gpu": "micro_batch_size"}
DUMP_FACTS |= {"gradient_accumulation_steps": "gas", "zero_optimization_stage": "zero_stage"}
JSON_FACTS = dict(list(DUMP_FACTS.items())[:3])
#: precision attributes -> the flag they set (``*_config``: today's ``enabled=...`` pydantic repr)
PRECISION_FLAGS = dict.fromkeys(("fp16_enabled", "float16_config"), "fp16") | {"bf16_enabled": "bf16"}
PRECISION_FLAGS |= dict.fromkeys(("bfloat16_enabled", "bfloat16_config"), "bfloat16") | {"amp_enabled": "amp"}
#: the flags whose statement (readable, on or off) the fp32 rule asks for
_STATED = ("fp16", "bfloat16", "bf16")
#: the attributes a dump is read for: no other states anything or opens a JSON value that is read
NAMES_READ = frozenset((*DUMP_FACTS, "world_size", "zero_config", "zero_enabled", "json", *PRECISION_FLAGS))
#: the JSON keys read (at any depth, but JSON_FACTS); lines with other keys only open or close objects
JSON_VALUE_KEYS = frozenset(
    (*_OFFLOADS, "device", "enabled", "stage", "cpu_offload", "cpu_offload_params", *JSON_FACTS)
)
_QUOTED_KEYS = "|".join(re.escape(f'"{key}"') for key in sorted(JSON_VALUE_KEYS))
#: the records of a JSON value that can change what it states: one that closes an object (starts with
#: ``}``), a key whose value opens one (``"fp16": {``), a key whose values are read
JSON_LINE = rf'^{PS}*\}}|"{PS}*:{PS}*\{{|{_QUOTED_KEYS}'
_W = "[A-Za-z0-9_]"
_NAME = rf"[A-Za-z_]{_W}*"
#: ``name ..... value``: after the name, dots after any whitespace, two whitespace characters, or a tab
#: (Python's expandtabs widened it to two spaces or more unless the name's length is 7 modulo 8)
_DOTTED = rf"^{_NAME}(?:{PS}*\.\.+|{PS}{{2,}})|^[A-Za-z_](?:{_W}{{8}})*(?:{_W}{{0,5}}|{_W}{{7}})\t"
#: ``"key": value,`` of a JSON line (searched, not anchored)
_JSON_KEY = rf'"(\w+)"{PS}*:{PS}*([^,\s\x1c-\x1f][^,]*)?,?{PS}*$'


def _items(printed: pl.DataFrame, carry: pl.DataFrame) -> pl.DataFrame:
    """The printer's records (ranks glued without a tag: one per tag, ``order`` plus its index), in order,
    with ``kind`` (``header``, ``value`` or null: it names nothing), ``name``, ``dump`` (the run's headers
    so far, the carried ones too) and, of a name read, its ``value`` (stripped, another rank's record
    glued onto it cut off) and whether it ``opens`` a JSON value (it ends with ``{``)."""
    body, stripped, head, json = map(pl.col, ("body", "stripped", "head", "json"))
    kind = pl.when(stripped.str.starts_with(_DUMP_HEADER)).then(pl.lit("header"))
    kind = kind.when(json.is_not_null() | head.is_not_null()).then(pl.lit("value"))
    name = pl.when(json.is_not_null()).then(pl.lit("json")).otherwise(head.str.extract(f"^{_NAME}", 0))
    value = _strip(pl.col("raw").str.replace(r"\[\d{4}-\d\d-\d\d \d\d:\d\d.*$", ""))
    headers, order = (pl.col("kind") == "header").fill_null(False), pl.col("order") + pl.col("item") - 1
    dump = headers.cum_sum().over("run") + pl.col("carried").fill_null(0)
    return (
        printed.lazy()
        .with_columns(pl.col("text").str.replace_all(PRINT_TAG, "\x00$0").str.split("\x00"))
        .with_columns(item=pl.int_ranges(pl.col("text").list.len()))
        .explode("text", "item")
        .filter(pl.col("item") > 0)
        .with_columns(body=pl.col("text").str.splitn("]", 2).struct[1])
        .with_columns(stripped=_strip(body), json=body.str.extract(rf"^{PS}*json = (.*)$", 1))
        .with_columns(head=stripped.str.extract(_DOTTED, 0))
        .with_columns(kind=kind, name=name, raw=pl.coalesce(json, stripped.str.slice(head.str.len_chars())))
        .join(carry.lazy().select("run", carried="dump"), on="run", how="left", maintain_order="left")
        .with_columns(dump=dump, value=pl.when(pl.col("name").is_in(list(NAMES_READ))).then(value))
        .select("run", "line", "file", "kind", "name", "dump", "value", order=order)
        .with_columns(opens=pl.col("value").str.ends_with("{").fill_null(False))
        .collect()
    )


def _world_size(stated: pl.DataFrame, as_gpus: pl.DataFrame, value: pl.Expr, *, whole: bool = False) -> list:
    """DeepSpeedConfig's ``world_size`` (the dump's, or the config's word at its start) of ``stated``: the
    data-parallel size; of ``as_gpus`` (those no mesh or Ulysses divided) the GPU count unless model parallelism
    (Megatron's or a pipeline's) came first."""
    return [
        _count(stated, value, "dp", whole=whole),
        _count(as_gpus, value, "gpus", whole=whole, unless=("megatron", TOPOLOGY_SEEN)),
    ]


def _attributes(items: pl.DataFrame) -> list[pl.DataFrame]:
    """The counts and world size, zero_config's offloads (today's one-line repr: None, or a config whose
    device is not none) and ``zero_enabled False`` (stage 0)."""
    name, word = pl.col("name"), pl.col("value").str.extract(_WORD, 1)
    counts, world = items.filter(name.is_in(list(DUMP_FACTS))), items.filter(name == "world_size")
    statements = [
        _count(counts, word, name.replace_strict(DUMP_FACTS, default=None)),
        *_world_size(world, world, word, whole=True),
    ]
    zero = items.filter(name == "zero_config")
    for key in _OFFLOADS:
        on = pl.col("value").str.extract(rf"(?:^|\W){key}=(None|\w+\([^)]*\))", 1)
        device = on.str.extract(r"device='?(\w+)'?", 1).fill_null("none")
        offload = pl.when(on.str.starts_with("None")).then(False).when(on.is_not_null())
        statements.append(_statements(zero, key, offload.then(device != "none")))
    enabled = items.filter(name == "zero_enabled")
    return [*statements, _statements(enabled, "zero_stage", pl.when(~_as_bool(pl.col("value"))).then(0))]


def _precision(items: pl.DataFrame, carry: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Precision where a flag is turned on: fp16 by fp16 or amp, bf16 by bfloat16 or bf16 (the dump's first
    statement wins: no flag was on before); fp32 at ``json`` once the dump's fp16 flag and a bf16 flag are
    stated readable (each by its last line so far, the carried state first: none was on, else an earlier
    statement wins). And that state after each record."""
    name, flag, on, value = pl.col("name"), pl.col("flag"), pl.col("on"), pl.col("value")
    enabled = value.str.extract(r"(?:^|\W)enabled=(\w+)", 1)
    flags = items.filter(name.is_in([*PRECISION_FLAGS, "json"])).with_columns(
        flag=name.replace_strict(PRECISION_FLAGS, default=None, return_dtype=pl.String),
        on=pl.when(name.str.ends_with("_config")).then(_as_bool(enabled)).otherwise(_as_bool(value)),
    )
    carried = carry.select("run", "dump", *_STATED, order=pl.lit(-1, pl.Int64))
    readable = (pl.when(flag == f).then(on.is_not_null()).otherwise(pl.col(f)).alias(f) for f in _STATED)
    filled = pl.col(_STATED).forward_fill().over("run", "dump").fill_null(False)
    state = pl.concat([carried, flags], how="diagonal").with_columns(readable).with_columns(filled)
    fp32 = (name == "json") & pl.col("fp16") & (pl.col("bfloat16") | pl.col("bf16"))
    on = on & flag.is_not_null()
    value = pl.when(on & flag.is_in(["fp16", "amp"])).then(pl.lit("fp16")).when(on).then(pl.lit("bf16"))
    value = value.when(fp32).then(pl.lit("fp32"))
    return _statements(state, "precision", value), state.select("run", "dump", *_STATED)


def _json_values(lines: pl.DataFrame, items: pl.DataFrame) -> list[pl.DataFrame]:
    """Statements of the dumps' multi-line JSON values, 2021's ``zero_config`` (offloads, stage) and ``json
    = {...}`` (the batch sizes at its top, precision): a value opens at an attribute read whose value ends
    with ``{``, up to the printer's next record that names something, the ``}`` that closes it,
    JSON_MAX_LINES lines or the end of its file. Its lines close an object, open one (``"key": {``) or
    state a value of a key read, by its parent (the object it is in; at the top, the attribute)."""
    owners = items.drop_nulls("kind").rename({"order": "owner", "line": "at", "file": "in_file"})
    key, value, text, opens, closes = map(pl.col, ("key", "value", "text", "opens", "closes"))
    depth, parent = pl.col("depth"), pl.col("parent")
    within = (pl.col("file") == pl.col("in_file")) & (pl.col("line") - pl.col("at") <= JSON_MAX_LINES)
    parents = pl.when(opens).then(key).forward_fill().over("owner", "depth").fill_null(pl.col("name"))
    reads = (
        lines.select("run", "order", "line", "file", text=_strip(pl.col("text")))
        .join_asof(owners, left_on="order", right_on="owner", by="run", check_sortedness=False)
        .filter(opens & within)
        .with_columns(text.str.extract_groups(_JSON_KEY).struct.rename_fields(["key", "raw"]).alias("kv"))
        .unnest("kv")
        .with_columns(closes=text.str.starts_with("}"), value=_strip(pl.col("raw").fill_null("")))
        .with_columns(opens=~closes & key.is_not_null() & value.str.starts_with("{"))
        .filter(closes | opens | key.is_in(list(JSON_VALUE_KEYS)))
        .with_columns(depth=1 + (opens.cast(pl.Int64) - closes.cast(pl.Int64)).cum_sum().over("owner"))
        # a value is closed once its depth fell to 0: the lines after that are not its own
        .filter(depth.shift(1).fill_null(1).cum_min().over("owner") > 0)
        .with_columns(parent=parents)
        .filter(~closes, ~opens)
    )
    top = reads.filter(key.is_in(list(JSON_FACTS)), depth == 1, pl.col("name") == "json")
    device = reads.filter(key == "device", parent.is_in(_OFFLOADS))
    enabled = reads.filter(key == "enabled", parent.is_in(["fp16", "bf16", "bfloat16"]))
    stage = reads.filter(key == "stage", parent.is_in(["zero_optimization", "zero_config"]))
    fp16 = pl.when(parent == "fp16").then(pl.lit("fp16")).otherwise(pl.lit("bf16"))
    offload = pl.when(key == "cpu_offload").then(pl.lit(_OFFLOADS[1])).otherwise(pl.lit(_OFFLOADS[0]))
    return [
        _statements(reads.filter(key.is_in(_OFFLOADS)), key, pl.when(value == "null").then(False)),
        _statements(device, parent, ~value.str.strip_chars('"').is_in(["none", "null"])),
        _statements(enabled, "precision", pl.when(_as_bool(value)).then(fp16)),
        _count(stage, value, "zero_stage"),
        _count(top, value, key.replace_strict(JSON_FACTS, default=None, return_dtype=pl.String)),
        # DeepSpeed 0.3.x's ZeRO-Offload switches (neither true nor false states nothing)
        _statements(reads.filter(key.is_in(["cpu_offload", "cpu_offload_params"])), offload, _as_bool(value)),
    ]


def _dumps(printed: pl.DataFrame, others: pl.DataFrame, carry: pl.DataFrame) -> tuple[Events, pl.DataFrame]:
    """The dumps' facts (a dump starts at its header; the records before any are the carried dump's, or
    one whose header was lost) from the printer's records and the others (the JSON values' lines), a mark
    per printer record (a dump alone makes a run DeepSpeed's); and each run's last dump, the facts it
    stated, its flags' state."""
    items = _items(printed, carry)
    precision, flags = _precision(items, carry)
    carried = carry.select("run", "dump", order=pl.lit(-1, pl.Int64), fact="stated", value=pl.lit(""))
    statements = [carried.explode("fact").drop_nulls("fact"), *_attributes(items), precision]
    statements = pl.concat([*statements, *_json_values(others, items)], how="diagonal_relaxed")
    events = _facts(statements.sort("order", maintain_order=True))
    # an engine's dump after steps were logged starts a new launch (a relaunch appended to the log)
    headers = items.lazy().filter(pl.col("kind") == "header")
    events.marks += [
        kinds.marks_of(printed.lazy(), NAME, kinds.SEEN),
        kinds.marks_of(headers, NAME, kinds.LAUNCH),
    ]
    last = pl.concat([carry.select("run", "dump"), items.select("run", "dump")]).group_by("run").max()
    stated = statements.drop_nulls("value").group_by("run", "dump").agg(stated=pl.col("fact").unique())
    flags = flags.join(last, on=["run", "dump"], maintain_order="left").group_by("run")
    flags = flags.agg(pl.col(_STATED).last())
    return events, last.join(stated, on=["run", "dump"], how="left").join(flags, on="run", how="left")


# --- the kinds and blocks -------------------------------------------------------------------------------

#: what a run's SEQUENCE records leave to the next segment's: its dumps so far, the facts the last stated
#: and its flags' state, the last ``skipped=`` total, the last profiler header's line
_CARRY = {"run": pl.Int64, "dump": pl.Int64, "stated": pl.List(pl.String)}
_CARRY |= dict.fromkeys(_STATED, pl.Boolean) | {"total": pl.Int64, "profiled": pl.Int64}


def read_sequence(records: pl.LazyFrame, carry: pl.DataFrame | None) -> Events:
    """A segment of the runs' SEQUENCE records, after the ``carry`` of the one before: the dumps, steps and
    profiler summaries, and the RECORDS records glued to them (a record is one kind's)."""
    frame = records.collect()
    carry = pl.DataFrame(schema=_CARRY) if carry is None else carry
    printer = pl.col("text").str.contains(PRINT_TAG)
    printed, others = frame.filter(printer), frame.filter(~printer)
    events, dumped = _dumps(printed, others, carry)
    (progress, totals), (profile, profiled) = _progress(frame, carry), _profile(others, carry)
    glued = frame.filter(pl.col("text").str.contains(_RECORDS_PATTERN))
    for more in (progress, profile, _record_events(glued) if glued.height else Events()):
        events.extend(more)
    carried = pl.concat([dumped, totals.select("run", "total"), profiled], how="diagonal_relaxed")
    events.carry = carried.group_by("run").agg(pl.all().drop_nulls().first()).cast(_CARRY)
    return _numbered(events)


SEQUENCE = RecordKind(
    family=NAME,
    name="sequence",
    test=RecordTest(pattern="|".join([PRINT_TAG, STEP_RECORD, re.escape(PROFILE_HEADER), _PROFILE_LINE])),
    read=read_sequence,
    facts=(*_INT_FACTS, *_OFFLOADS, "precision", "logged_model_size"),
)
#: the raw lines that can hold a JSON_LINE record or a printer's (it may end the value): literals only, a
#: superset that polars' regex finds by a prefilter (an anchored brace is tried at every position, 5x slower
#: than testing the one-line dicts' braces it lets through too)
JSON_LINES = "|".join([r"\{", r"\}", re.escape(":print"), _QUOTED_KEYS])
#: a printer's record that names something (a header, ``json = ``, ``name .. value``) ends a JSON value
_NAMING = rf"{PRINT_TAG}{PS}*(?:{_DUMP_HEADER}|json = |{_NAME}(?:{PS}*\.\.|{PS}{{2,}}[^\s\x1c-\x1f]|\t))"
#: the lines of the dumps' multi-line JSON values, which carry no marker: from a printer's record that may
#: open one (a value ending with ``{``) up to the next that names something, JSON_MAX_LINES lines or the
#: end of the file, the records that can matter
JSON_VALUES = Block(
    family=NAME,
    name="json values",
    opens=RecordTest(pattern=rf"{PRINT_TAG}.*\{{{PS}*(?:$|\[)"),
    ends=RecordTest(pattern=_NAMING),
    body=RecordTest(pattern=f"{PRINT_TAG}|{JSON_LINE}"),
    hint=JSON_LINES,
    max_lines=JSON_MAX_LINES,
    into=SEQUENCE.name,
)
#: the profiler's summaries (a header up to the next or its 60 lines), a block so that no segment of
#: SEQUENCE's ends inside one: a FLOPS line's step event is its summary's step line's
PROFILE = Block(
    family=NAME,
    name="profile",
    opens=RecordTest(markers=(PROFILE_HEADER,)),
    ends=RecordTest(markers=(PROFILE_HEADER,)),
    markers=_PROFILE_MARKERS,
    body=RecordTest(pattern=_PROFILE_LINE),
    max_lines=PROFILE_WINDOW_LINES,
    into=SEQUENCE.name,
)


# --- its launcher and its communication's start: evidence only -------------------------------------------

#: DeepSpeed's launcher (launcher/runner.py ``cmd = ...``, launcher/launch.py ``dist_world_size=16``),
#: ``deepspeed.init_distributed`` (comm/comm.py ``Initializing TorchBackend in DeepSpeed with backend nccl``) and
#: the engine's first words (runtime/engine.py ``DeepSpeed info: version=0.13.1, git-hash=...``): a run
#: DeepSpeed launched or set up, though it failed before its engine printed anything. The engine's, on rank 0
#: only (the others are each rank's, in each rank's file), starts a launch: a requeued job's next attempt,
#: whose engine may print no config dump
_ENGINE_STARTED = "DeepSpeed info: version="
LAUNCHED = (
    r"\[(?:runner\.py:\d+:main\] cmd = |launch\.py:\d+:main\] dist_world_size=)"
    rf"|Initializing TorchBackend in DeepSpeed|{_ENGINE_STARTED}"
)
_LAUNCHED_MARKERS = (
    "] cmd = ",
    "] dist_world_size=",
    "Initializing TorchBackend in DeepSpeed",
    "DeepSpeed info: ",
)
LAUNCHER = RecordKind(
    family=NAME,
    name="launcher",
    test=RecordTest(markers=_LAUNCHED_MARKERS, pattern=LAUNCHED),
    read=lambda records: Events(
        marks=[
            kinds.marks_of(records, NAME, kinds.SEEN),
            kinds.marks_of(records.filter(pl.col("text").str.contains(_ENGINE_STARTED)), NAME, kinds.LAUNCH),
        ]
    ),
)


#: DeepSpeed's code in a traceback's frames: its engine, launcher or communication ran
CODE = ("/deepspeed/",)
#: the options deepspeed.add_config_arguments adds to a program's parser, in its usage (Megatron-DeepSpeed's)
USAGE = ("[--deepspeed_config DEEPSPEED_CONFIG]",)

FAMILY = Family(
    name=NAME,
    # a dump's header, the names it is read for: its other lines matter only in JSON values (JSON_VALUES)
    markers=(
        _DUMP_HEADER,
        *sorted(NAMES_READ),
        "step=",
        PROFILE_HEADER,
        *_PROFILE_MARKERS,
        *_RECORD_MARKERS,
        *_LAUNCHED_MARKERS,
        *CODE,
        *USAGE,
    ),
    kinds=(SEQUENCE, RECORDS, LAUNCHER, kinds.code_frames(NAME, CODE), kinds.argument_usage(NAME, USAGE)),
    blocks=(JSON_VALUES, PROFILE),
    steps_before_timers=True,
    engine=True,
    description="DeepSpeed engine: config dump, step=/throughput lines, pipeline steps, flops profiler; "
    "its launcher's and init_distributed's lines as evidence",
)
