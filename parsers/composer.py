"""MosaicML Composer (llm-foundry's trainer): the console logger's blocks, a progress header and the
metrics logged since the last one, a line each (composer/loggers/console_logger.py, ``log_to_console``)::

    [batch=120/4800]:
             Train time/batch: 119
             Train loss/train/total: 3.4521
             Train throughput/batches_per_sec: 0.4120
             Train lr-DecoupledAdamW/group0: 0.0001

The header is the step's record: ``[batch=N/M]`` when the run's ``max_duration`` is in batches (``M``,
its planned steps, ``train_iters``), ``[epoch=E][batch=b/T]`` when in epochs (``b`` of the epoch's ``T``:
the step is ``(E - 1) * T + b``). A header in tokens or samples (``[token=N/M]``) names no step: the
block's ``time/batch`` does (the batches done when the step began, logged before it: the step is one more),
as it does under any header. The lines after it are that step's metrics (``Train `` then the logger's key): the loss
(``loss/train/total``), the learning rate (``lr-<optimizer>/group0``), the gradient norm
(``l2_norm/grad/global``, the optimizer monitor's), and the speed monitor's rates over its window:
``batches_per_sec`` (the step's time, ``elapsed_ms``), ``samples_per_sec``, ``tokens_per_sec``;
``trainer/device_train_microbatch_size`` is the micro batch. Composer prints floats with four decimals
(``format_log_data_value``): a learning rate under 5e-5 reads 0. Evaluations' lines (``Eval ``) are not
steps. The configuration a run logs states its shape: llm-foundry's ``Logging config`` (``max_seq_len``,
``global_train_batch_size``, ``device_train_microbatch_size``, ``n_gpus``, ``max_duration: 4800ba``: the
plan) and Composer's own ``Config:`` (``num_nodes``, ``num_gpus_per_node``), top-level keys only.
Failures are the Slurm family's.
"""

from __future__ import annotations

import polars as pl
from logstat.parsers.base import Family
from logstat.parsers.kinds import (
    CLEAN_EXIT,
    NUMBER,
    RECORD,
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
    run_ends,
    step_lines,
)

NAME = "composer"

#: the console logger's progress header of a training step: in batches, or in an epoch's batches
HEADER = r"^\[(?:epoch=(\d+)\]\[)?batch=(\d+)(?:/(\d+))?\]:\s*$"
_HEADER_MARKER = "batch="
#: a metric line of the block: a tab and a space (Composer's ``\n\t ``), ``Train ``, the key, its value
METRIC = rf"^\s*Train ([\w./-]+): ({NUMBER})\s*$"
_METRIC_MARKER = "\t Train "
#: the metric keys read, by the step column they fill
_KEYS = {
    "loss": r"loss/train/total",
    "lr": r"lr-\w+/group0",
    "grad_norm": r"l2_norm/grad/global",
    "batches_per_sec": r"throughput/batches_per_sec",
    "samples_per_sec": r"throughput/samples_per_sec",
    "tokens_per_sec": r"throughput/tokens_per_sec",
}
_MICRO_BATCH = "trainer/device_train_microbatch_size"
_BATCHES_DONE = "time/batch"


def read_headers(records: pl.LazyFrame) -> Events:
    """A step event per header, and the planned steps of a run's last header in batches that states them."""
    fields = pl.col("text").str.extract_groups(HEADER)
    epoch, batch, total = (as_count(fields.struct[str(group)]) for group in (1, 2, 3))
    in_epochs = epoch.is_not_null()
    step = pl.when(~in_epochs).then(batch).when(total.is_not_null()).then((epoch - 1) * total + batch)
    events = step_lines(records, NAME, step=pl.when(step > 0).then(step))
    planned = last_per_run(records, ~in_epochs & (total > 0))
    events.facts.append(facts_of(planned, NAME, train_iters=total).collect())
    return events


def read_metrics(records: pl.LazyFrame) -> Events:
    """A metrics event of the step before it per metric line read; the micro batch each one states."""
    fields = pl.col("text").str.extract_groups(METRIC)
    key, value = fields.struct["1"], as_real(fields.struct["2"])
    steps = metric_lines(records, NAME, key, value, _KEYS)
    micro_batch = pl.when(key == _MICRO_BATCH).then(as_count(fields.struct["2"]))
    # the batches done when the step began (the trainer logs its timestamp before the batch): a header in
    # tokens or samples names no step, this line does
    done = as_count(fields.struct["2"])
    numbered = records.select("order", step=pl.when(key == _BATCHES_DONE).then(done + 1)).drop_nulls("step")
    numbered = numbered.with_columns(mode=pl.lit(RECORD, pl.Int8), family=pl.lit(NAME))
    return Events(
        steps=[steps, numbered.collect()],
        facts=[facts_of(records, NAME, micro_batch_size=micro_batch).filter(pl.col("value") > 0).collect()],
        marks=[marks_of(records, NAME, SEEN)],
    )


#: the run's configuration as YAML, a top-level key a line (unindented: a section's keys are another thing's,
#: the model's ``max_seq_len``), wherever it is printed: llm-foundry's after ``Logging config``, Composer's
#: console logger's hyperparameters after ``Config:`` (its trainer.py logs ``num_nodes`` and
#: ``num_<device>s_per_node``; llm-foundry logs its whole config as hyperparameters too). The keys read, as
#: counts, by the fact each states (``n_gpus`` llm-foundry's world size), and ``max_duration`` in batches
#: (``4800ba``: the plan)
_CONFIG_COUNTS = {
    "max_seq_len": "seq_len",
    "global_train_batch_size": "global_batch_size",
    "device_train_microbatch_size": "micro_batch_size",
    "n_gpus": "gpus",
    "num_nodes": "nodes",
    "num_gpus_per_node": "gpus_per_node",
}
_CONFIG_FACTS = _CONFIG_COUNTS | {"max_duration": "train_iters"}
CONFIG_KEY = rf"^({'|'.join(_CONFIG_FACTS)}): (\S+)\s*$"
_CONFIG_MARKERS = tuple(f"{key}: " for key in _CONFIG_FACTS)
#: the keys that only Composer's and llm-foundry's configurations name: records of the family
_OWN_KEYS = ["global_train_batch_size", "device_train_microbatch_size", "max_duration"]


def read_config(records: pl.LazyFrame) -> Events:
    """Facts of a configuration's top-level keys: counts, and the planned batches of ``max_duration``."""
    fields = pl.col("text").str.extract_groups(CONFIG_KEY)
    name, value = fields.struct["1"], fields.struct["2"]
    count = pl.when(name == "max_duration").then(value.str.extract(r"^(\d+)ba$", 1)).otherwise(value)
    facts = records.select(
        "order", fact=name.replace_strict(_CONFIG_FACTS), value=as_count(count), family=pl.lit(NAME)
    )
    own = records.filter(pl.col("text").str.extract(CONFIG_KEY, 1).is_in(_OWN_KEYS))
    return Events(facts=[facts.filter(pl.col("value") > 0).collect()], marks=[marks_of(own, NAME, SEEN)])


#: llm-foundry's train script's last line, after ``trainer.fit()`` returned (``log.info('Done.')``, its logger
#: ``llmfoundry.command_utils.train``, ``__main__`` in scripts/train/train.py before 0.11), in the format it sets:
#: ``2024-03-14 08:15:04,200: rank0[7713][MainThread]: INFO: llmfoundry.command_utils.train: Done.``
DONE = r": rank[0-9]+\[[0-9]+\]\[[^\]]*\]: INFO: (?:__main__|llmfoundry\.command_utils\.train): Done\.\s*$"
_DONE_MARKER = ": Done."


#: Composer's launcher's word on a rank that exited with 0 (composer/cli/launcher.py ``Rank 0 finished
#: successfully.``): a clean exit of the run it launched (which a failure outweighs)
RANK_FINISHED = r"\bRank \d+ finished successfully\.\s*$"
_RANK_FINISHED_MARKER = " finished successfully."


#: Composer's code in a traceback's frames, and llm-foundry's
CODE = ("/composer/trainer/", "/composer/core/", "/llmfoundry/")

FAMILY = Family(
    name=NAME,
    markers=(
        _HEADER_MARKER,
        _METRIC_MARKER,
        _DONE_MARKER,
        _RANK_FINISHED_MARKER,
        *_CONFIG_MARKERS,
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
            test=RecordTest(markers=(_METRIC_MARKER,), pattern=METRIC),
            read=read_metrics,
            facts=("micro_batch_size",),
        ),
        RecordKind(
            family=NAME,
            name="config key",
            test=RecordTest(markers=_CONFIG_MARKERS, pattern=CONFIG_KEY),
            read=read_config,
            facts=tuple(_CONFIG_FACTS.values()),
        ),
        RecordKind(
            family=NAME,
            name="done",
            test=RecordTest(markers=(_DONE_MARKER,), pattern=DONE),
            read=lambda records: run_ends(records, NAME),
        ),
        RecordKind(
            family=NAME,
            name="launcher's rank exit",
            test=RecordTest(markers=(_RANK_FINISHED_MARKER,), pattern=RANK_FINISHED),
            read=lambda records: run_ends(records, NAME, CLEAN_EXIT),
        ),
        code_frames(NAME, CODE),
    ),
    description="MosaicML Composer / llm-foundry: the console logger's '[batch=N/M]:' blocks of "
    "'Train <key>: <value>' lines (loss, lr, throughput)",
)
