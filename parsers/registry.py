"""The one place log families are registered, most specific framework first, most generic engine last.

A run's primary family (``primary``) is the first in this order among those whose records supplied the
run's numbers (iteration rows, measured results), which outweigh any number of records that only
describe the run: an HF Trainer run also logs DeepSpeed's progress lines, often more than its own, and
DeepSpeed-Chat prints HF-style lines but every number comes from DeepSpeed's. Context families (Slurm)
are never primary. Adding a family: ``parsers/<name>.py`` with ``FAMILY``, its module here, fixtures
and a test (STYLE.md rule 1).
"""

from __future__ import annotations

import importlib
from collections import Counter
from functools import cache
from typing import TYPE_CHECKING

from logstat.errors import LogstatError

if TYPE_CHECKING:  # the names below are read by --help, which must not import polars
    from logstat.parsers.base import Family, RunBuilder

#: each family's module under logstat.parsers, which names it (``_`` read as ``-``)
FAMILY_NAMES = (
    "torchtitan",
    "litgpt",
    "torchtune",
    "nemo",
    "megatron",
    "hf_trainer",
    "mingpt",
    "nanogpt",
    "composer",
    "olmo",
    "fairseq",
    "deepspeed",
    "custom",
    "slurm",
)
FAMILY_MODULES = tuple(f"logstat.parsers.{name}" for name in FAMILY_NAMES)

#: runs showing evidence of every family of a key are named by its value (a custom loop on DeepSpeed's
#: engine is a DeepSpeed run).
COMBINED: dict[frozenset[str], str] = {
    frozenset({"megatron", "deepspeed"}): "megatron-deepspeed",
    frozenset({"custom", "deepspeed"}): "deepspeed",
}

#: the names ``--family`` takes
FAMILY_CHOICES = tuple(
    dict.fromkeys((*(name.replace("_", "-") for name in FAMILY_NAMES), *COMBINED.values()))
)


@cache
def families() -> tuple[Family, ...]:
    """Every registered family, in registry order."""
    return tuple(importlib.import_module(module).FAMILY for module in FAMILY_MODULES)


def named(name: str) -> tuple[tuple[Family, ...], str]:
    """The families a ``--family`` name forces, and the name runs get: one family (``hf_trainer`` and
    ``hf-trainer`` are the same), or a ``COMBINED`` mix's (``megatron-deepspeed``: both, as the ``family``
    column names such runs); lists the valid names when there is none."""
    wanted = name.strip().lower().replace("_", "-")
    for family in families():
        if family.name.replace("_", "-") == wanted:
            return (family,), family.name
    for combined_of, combined_name in COMBINED.items():
        if combined_name == wanted:
            return tuple(family for family in families() if family.name in combined_of), combined_name
    raise LogstatError(f"unknown log family {name!r}: choose one of {', '.join(FAMILY_CHOICES)}")


#: the ``runs`` facts that are measured results of the run (its numbers, like the iteration rows), not
#: a description of its setup: HF Trainer's final metrics, minGPT's benchmark averages.
RESULT_FACTS = (
    "final_train_runtime_s",
    "final_samples_per_sec",
    "final_steps",
    "avg_epoch_time_s",
    "peak_memory_mib",
)


def supplied(run: RunBuilder) -> dict[str, int]:
    """Per family, how many of the run's numbers its records supplied: the iteration rows that are its
    (``settle``: it logged the step first, or it is the framework of the engine that did), and the
    ``RESULT_FACTS`` it stated."""
    counts = Counter(row["family"] for row in run.iterations.values())
    for name in RESULT_FACTS:
        if name in run.facts:
            counts[run.provenance.get(name, "").partition(":")[0]] += 1
    return dict(counts)


def primary(scores: dict[str, int], numbers: dict[str, int]) -> str:
    """The run's primary family from per-family evidence ``scores`` (0 = none) and ``numbers`` supplied
    (``supplied``): of the families with evidence, the first in registry order that supplied numbers,
    else the first; ``unknown`` if none; a ``COMBINED`` mix's name if every family of it has evidence."""
    seen = [f.name for f in families() if not f.context and scores.get(f.name, 0) > 0]
    if not seen:
        return "unknown"
    weighed = [name for name in seen if numbers.get(name, 0) > 0]
    chosen = (weighed or seen)[0]
    for combined_of, combined_name in COMBINED.items():
        if chosen in combined_of and combined_of <= set(seen):
            return combined_name
    return chosen
