"""AI2's OLMo trainer (olmo/train.py ``log_metrics_to_console``): a step's metrics after a header, a metric a
line indented by four spaces (``format_float``: four significant places, thousands grouped by commas)::

    2024-02-05 10:12:34.410	node-132:0	olmo.train:816	INFO	[step=120/739328,epoch=0]
        train/CrossEntropyLoss=2.666
        throughput/device/tokens_per_second=92,001
        throughput/device/batches_per_second=0.7092
        optim/total_grad_norm=0.2915
        optim/learning_rate_group0=0.0003

The header ``[step=N/M]`` (``,epoch=E`` in later versions) is the step's record, ``M`` the planned steps
(``max_steps``, ``train_iters``). The lines after it are that step's metrics: the loss
(``train/CrossEntropyLoss``), the learning rate (``optim/learning_rate_group0``), the gradient norm
(``optim/total_grad_norm``), a device's batches per second (the step's time, ``elapsed_ms``) and tokens
per second. Evaluations' metrics (``eval/...``) are not the step's. scripts/train.py's ``Total number of
parameters: 1,176,764,416`` is the logged size; the ``TrainConfig(...)`` it prints states the global and
micro batch and the sequence length. Failures are the Slurm family's.
"""

from __future__ import annotations

import re

import polars as pl
from logstat.parsers.base import Family
from logstat.parsers.kinds import (
    NUMBER,
    SEEN,
    Events,
    RecordKind,
    RecordTest,
    as_count,
    as_real,
    code_frames,
    facts_of,
    last_per_run,
    marks_of,
    metric_lines,
    seen_once,
    step_lines,
)

NAME = "olmo"

#: the console header of a training step's metrics
HEADER = r"\[step=(\d+)/(\d+)(?:,epoch=\d+)?(?:,eta=[^\]\s]*)?\]\s*$"
_HEADER_MARKER = "[step="
#: a metric line: four spaces, its name, ``=``, its value (``1,048,576`` above a thousand)
METRIC = rf"^ {{4}}([\w./ ()-]+)=({NUMBER}|\d{{1,3}}(?:,\d{{3}})+)\s*$"
#: the metrics read, by the step column they fill: OLMo's names, then OLMo-core's (its trainer's
#: ``record_metric``: ``train/CE loss``, ``optim/LR (group 0)``, ``optim/total grad norm``, the speed
#: monitor's ``throughput/device/BPS`` and ``TPS``)
_METRIC_NAMES = {
    "loss": ("train/CrossEntropyLoss", "train/CE loss"),
    "lr": ("optim/learning_rate_group0", "optim/LR (group 0)"),
    "grad_norm": ("optim/total_grad_norm", "optim/total grad norm"),
    "batches_per_sec": ("throughput/device/batches_per_second", "throughput/device/BPS"),
    "tokens_per_sec": ("throughput/device/tokens_per_second", "throughput/device/TPS"),
}
_METRICS = {column: "|".join(map(re.escape, names)) for column, names in _METRIC_NAMES.items()}
_METRIC_MARKERS = tuple(f"{name}=" for names in _METRIC_NAMES.values() for name in names)
#: scripts/train.py's count of the model's parameters
PARAMETERS = r"Total number of parameters: (\d{1,3}(?:,\d{3})+|\d+)\s*$"
_PARAMETERS_MARKER = "Total number of parameters: "
#: the ``TrainConfig(...)`` repr's counts, by the fact each states
_CONFIG_COUNTS = {
    "global_train_batch_size": "global_batch_size",
    "device_train_microbatch_size": "micro_batch_size",
    "max_sequence_length": "seq_len",
}
_CONFIG_MARKER = "TrainConfig("
#: OLMo-core's ``ExperimentConfig(...)`` repr, a line, as its scripts print it: its dataset's
#: ``sequence_length=4096`` and its data loader's ``global_batch_size`` in tokens (the sequences: over the length)
_CORE_CONFIG_MARKER = "ExperimentConfig("
_CORE_CONFIG = r"\bsequence_length=(\d+)\b.*?\bglobal_batch_size=(\d+)\b"
#: OLMo-core's loggers, in its logging format (``olmo_core.train.trainer:1064\tINFO\t...``): its run, though it
#: failed before its first step
CORE_LOGGER = r"\bolmo_core\.[\w.]+:\d+\s"
_CORE_LOGGER_MARKER = "olmo_core."


def read_headers(records: pl.LazyFrame) -> Events:
    """A step event per header, and the planned steps of a run's last header."""
    fields = pl.col("text").str.extract_groups(HEADER)
    step, total = as_count(fields.struct["1"]), as_count(fields.struct["2"])
    events = step_lines(records, NAME, step=pl.when(step > 0).then(step))
    planned = last_per_run(records, total > 0)
    events.facts.append(facts_of(planned, NAME, train_iters=total).collect())
    return events


def read_metrics(records: pl.LazyFrame) -> Events:
    """A metrics event of the step before it per metric line read."""
    fields = pl.col("text").str.extract_groups(METRIC)
    value = as_real(fields.struct["2"].str.replace_all(",", "", literal=True))
    steps = metric_lines(records, NAME, fields.struct["1"], value, _METRICS)
    return Events(steps=[steps], marks=[marks_of(records, NAME, SEEN)])


def read_stated(records: pl.LazyFrame) -> Events:
    """The parameter count, and the ``TrainConfig``'s counts."""
    text = pl.col("text")
    count = text.str.extract(PARAMETERS, 1).str.replace_all(",", "", literal=True)
    config = {
        fact: as_count(text.str.extract(rf"\b{key}=(\d+)\b", 1)) for key, fact in _CONFIG_COUNTS.items()
    }
    stated = [
        facts_of(records, NAME, logged_model_size=as_real(count) / 1e9),
        facts_of(records, NAME, **config),
    ]
    core = text.str.extract_groups(_CORE_CONFIG)
    length, tokens = as_count(core.struct["1"]), as_count(core.struct["2"])
    sequences = pl.when((length > 0) & (tokens % length == 0)).then(tokens // length)
    core_records = records.filter(text.str.contains(_CORE_CONFIG_MARKER, literal=True))
    stated.append(facts_of(core_records, NAME, seq_len=length, global_batch_size=sequences))
    # a script's own count may say the same words: the config's repr is OLMo's
    configs = records.filter(text.str.contains(_CONFIG_MARKER, literal=True))
    return Events(
        facts=[frame.filter(pl.col("value") > 0).collect() for frame in stated],
        marks=[marks_of(configs, NAME, SEEN)],
    )


#: OLMo's code in a traceback's frames
CODE = ("/olmo/train.py", "/olmo/model.py", "/olmo/config.py")

FAMILY = Family(
    name=NAME,
    markers=(
        _HEADER_MARKER,
        *_METRIC_MARKERS,
        _PARAMETERS_MARKER,
        _CONFIG_MARKER,
        _CORE_CONFIG_MARKER,
        _CORE_LOGGER_MARKER,
        *CODE,
    ),
    kinds=(
        RecordKind(
            family=NAME,
            name="header",
            test=RecordTest(markers=(_HEADER_MARKER,), pattern=HEADER),
            read=read_headers,
            facts=("train_iters",),
        ),
        RecordKind(
            family=NAME,
            name="metric",
            test=RecordTest(markers=_METRIC_MARKERS, pattern=METRIC),
            read=read_metrics,
        ),
        RecordKind(
            family=NAME,
            name="stated",
            test=RecordTest(
                markers=(_PARAMETERS_MARKER, _CONFIG_MARKER, _CORE_CONFIG_MARKER),
                pattern=rf"{PARAMETERS}|{re.escape(_CONFIG_MARKER)}|{re.escape(_CORE_CONFIG_MARKER)}",
            ),
            read=read_stated,
            facts=("logged_model_size", *_CONFIG_COUNTS.values()),
        ),
        RecordKind(
            family=NAME,
            name="OLMo-core's logger",
            test=RecordTest(markers=(_CORE_LOGGER_MARKER,), pattern=CORE_LOGGER),
            read=lambda records: seen_once(records, NAME),
        ),
        code_frames(NAME, CODE),
    ),
    description="AI2 OLMo: the console's '[step=N/M]' headers and their indented 'name=value' metrics, "
    "the parameter count and TrainConfig",
)
