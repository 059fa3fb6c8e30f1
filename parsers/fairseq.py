"""fairseq and metaseq (OPT's trainer): the ``train_inner`` progress records (fairseq/logging/progress_bar.py),
every ``--log-interval`` updates, in JSON (``--log-format json``) or simple form::

    2021-03-15 09:00:29 | INFO | train_inner | {"epoch": 1, "update": 0.02, "loss": "11.503", "ppl": "2903.28",
    "wps": "67840.2", "ups": "1.82", "wpb": "65536", "bsz": "128", "num_updates": "10", "lr": "1.25e-05",
    "gnorm": "0.812", "loss_scale": "16", "train_wall": "14", "gb_free": "8.9", "wall": "17"}
    2021-06-02 08:03:28 | INFO | train_inner | epoch 001:    100 / 4500 loss=10.049, ppl=1059.03, wps=31245.4,
    ups=0.48, wpb=65536, bsz=128, num_updates=100, lr=0.0003, gnorm=0.51, loss_scale=8, train_wall=203, ...

A record each, its step ``num_updates`` (an epoch's summary and a validation's prefix their keys:
``train_num_updates``, ``valid_num_updates``, not read): the loss, lr, ``gnorm``, ``loss_scale``, the
updates per second ``ups`` (its inverse the step's time, over the interval), the words (tokens) per second
``wps``. The configuration fairseq_cli/train.py logs (the dataclass config as a dict, or argparse's
``Namespace(...)`` before 0.10) states ``max_update`` (the plan, 0 none), ``distributed_world_size`` and
``tokens_per_sample`` (``training on 16 devices (GPUs/TPUs)`` the world, an echoed ``--max-update`` the plan);
``done training in 561.3 seconds`` is the run's end. Its trainer's ``| WARNING | ... OOM: Ran out of memory``
is one it recovers from. Failures are the Slurm family's.
"""

from __future__ import annotations

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
    marks_of,
    run_ends,
    stated_counts,
    step_lines,
)

NAME = "fairseq"

#: a progress record's step: a JSON key or the simple form's ``key=value``
STEP = r'(?:"num_updates": "|[\s,]num_updates=)(\d+)'
#: the JSON records' step key: other families' dict readers leave such records to this one
JSON_STEP = '"num_updates": '
_STEP_MARKERS = (JSON_STEP, "num_updates=")
#: the record's metrics, by the step column they fill
_FIELDS = {"loss": "loss", "lr": "lr", "grad_norm": "gnorm", "loss_scale": "loss_scale"}
_FIELDS |= {"updates_per_sec": "ups", "tokens_per_sec": "wps"}
#: the counts the configuration states, by the fact each states: its keys (a dict's ``'key': N``, a
#: Namespace's ``key=N``; metaseq's and fairseq's ``model_parallel_size`` its Megatron tensor parallelism), the world
#: fairseq_cli/train.py logs (``training on 16 devices (GPUs/TPUs)``) and
#: fairseq-train's plan flag
_CONFIG_COUNTS = {
    "max_update": "train_iters",
    "distributed_world_size": "gpus",
    "tokens_per_sample": "seq_len",
    "model_parallel_size": "tp",
    "training on": "gpus",
    "max-update": "train_iters",
}
CONFIG_COUNT = (
    r"(?P<key>\b(?:max_update|distributed_world_size|tokens_per_sample|model_parallel_size)'?(?:: |=)|training on |--max-update[= ])"
    r"(?P<count>\d+)\b"
)
_CONFIG_MARKERS = (
    "'distributed_world_size': ",
    "distributed_world_size=",
    "devices (GPUs/TPUs)",
    "--max-update",
)
DONE = "done training in "


def _field(name: str) -> pl.Expr:
    """A record's value of ``name``: ``"name": "X"`` (JSON, values quoted) or ``name=X``."""
    return as_real(pl.col("text").str.extract(rf'(?:"{name}": "?|[\s,]{name}=)({NUMBER})', 1))


def read_steps(records: pl.LazyFrame) -> Events:
    """A step event per progress record."""
    step = as_count(pl.col("text").str.extract(STEP, 1))
    fields = {column: _field(name) for column, name in _FIELDS.items()}
    ups = fields.pop("updates_per_sec")
    return step_lines(
        records,
        NAME,
        step=pl.when(step > 0).then(step),
        elapsed_ms=pl.when(ups > 0).then(1000 / ups),
        **fields,
    )


def read_config(records: pl.LazyFrame) -> Events:
    """The configuration's counts (``max_update`` 0: no plan), the world it trains on, ``--max-update``."""
    facts = stated_counts(records, NAME, CONFIG_COUNT, _CONFIG_COUNTS)
    return Events(facts=[facts.collect()], marks=[marks_of(records, NAME, SEEN)])


#: fairseq's and metaseq's code in a traceback's frames
CODE = ("/fairseq_cli/", "/fairseq/trainer.py", "/metaseq/", "/metaseq_cli/")

FAMILY = Family(
    name=NAME,
    markers=(*_STEP_MARKERS, *_CONFIG_MARKERS, DONE, *CODE),
    kinds=(
        RecordKind(
            family=NAME,
            name="progress",
            test=RecordTest(markers=_STEP_MARKERS, pattern=STEP),
            read=read_steps,
        ),
        RecordKind(
            family=NAME,
            name="config",
            test=RecordTest(markers=_CONFIG_MARKERS),
            read=read_config,
            facts=tuple(dict.fromkeys(_CONFIG_COUNTS.values())),
        ),
        RecordKind(
            family=NAME,
            name="done",
            test=RecordTest(markers=(DONE,), pattern=rf"{DONE}{NUMBER} seconds"),
            read=lambda records: run_ends(records, NAME),
        ),
        code_frames(NAME, CODE),
    ),
    description="fairseq / metaseq: train_inner progress records (JSON or simple), the configuration, the end",
)
