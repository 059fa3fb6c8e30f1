"""The one place log families are registered.

Each entry is the module path of a family module exposing ``FAMILY: Family``. Order matters:
families are listed from the most specific training framework to the most generic engine. A run's
primary family is weighed by what its records supplied (``primary``): a family whose records gave the
run's numbers (iteration rows, measured results) outweighs any number of records that only describe
the run (a banner, a command line, a config dump), and among those the first in this order wins (an
HF Trainer run also logs DeepSpeed's progress lines, often more of them than its own). DeepSpeed-Chat
prints its own ``***** Running training *****`` and HF-style flags on its command line, but every
number comes from DeepSpeed's lines: its family is ``deepspeed``. A Megatron-DeepSpeed run prints
both Megatron's and DeepSpeed's lines and is named by ``COMBINED``. Context families (Slurm) are
never primary.

Adding a family: write ``parsers/<name>.py`` with ``FAMILY``, add its module path here, add
fixtures and a test (STYLE.md rule 1).
"""

from __future__ import annotations

import importlib
from collections import Counter
from functools import cache

from logstat.parsers.base import Family, RunBuilder

from logstat.errors import LogstatError

FAMILY_MODULES: tuple[str, ...] = (
    "logstat.parsers.megatron",
    "logstat.parsers.hf_trainer",
    "logstat.parsers.mingpt",
    "logstat.parsers.deepspeed",
    "logstat.parsers.slurm",
)

#: runs showing evidence of every family of a key are named by its value.
COMBINED: dict[frozenset[str], str] = {
    frozenset({"megatron", "deepspeed"}): "megatron-deepspeed",
}


@cache
def families() -> tuple[Family, ...]:
    """Every registered family, in registry order."""
    return tuple(importlib.import_module(module).FAMILY for module in FAMILY_MODULES)


def names() -> list[str]:
    """Registry names of the families, for help texts and error messages."""
    return [family.name for family in families()]


def get(name: str) -> Family:
    """The family called ``name`` (``hf_trainer`` and ``hf-trainer`` are the same); lists the valid
    names when there is none."""
    wanted = name.strip().lower().replace("_", "-")
    for family in families():
        if family.name.replace("_", "-") == wanted:
            return family
    raise LogstatError(f"unknown log family {name!r}: choose one of {', '.join(names())}")


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
    """Per family, how many of the run's numbers its records supplied: the iteration rows it logged
    first, and the ``RESULT_FACTS`` it stated."""
    counts = Counter(row["family"] for row in run.iterations.values())
    for name in RESULT_FACTS:
        if name in run.facts:
            counts[run.provenance.get(name, "").partition(":")[0]] += 1
    return dict(counts)


def primary(scores: dict[str, int], numbers: dict[str, int] | None = None) -> str:
    """The run's primary family from per-family evidence ``scores`` (0 = none) and the ``numbers`` each
    supplied (``supplied``): of the families with evidence, the first in registry order that supplied
    numbers, else the first at all; ``unknown`` if none. A family of a ``COMBINED`` mix that all has
    evidence gives the mix's name."""
    seen = [f.name for f in families() if not f.context and scores.get(f.name, 0) > 0]
    if not seen:
        return "unknown"
    weighed = [name for name in seen if (numbers or {}).get(name, 0) > 0]
    chosen = (weighed or seen)[0]
    for combined_of, combined_name in COMBINED.items():
        if chosen in combined_of and combined_of <= set(seen):
            return combined_name
    return chosen
