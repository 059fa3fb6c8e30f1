"""The one place log families are registered.

Each entry is the module path of a family module exposing ``FAMILY: Family``. Order matters:
families are listed from the most specific training framework to the most generic engine, and
a run's primary family is the first one in this order that has evidence in the run (an HF
Trainer run also prints DeepSpeed's config; a Megatron-DeepSpeed run prints both Megatron's and
DeepSpeed's lines and is named by ``COMBINED``). Context families (Slurm) are never primary.

Adding a family: write ``parsers/<name>.py`` with ``FAMILY``, add its module path here, add
fixtures and a test (STYLE.md rule 1).
"""

from __future__ import annotations

import importlib
from functools import cache

from logstat.parsers.base import Family

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


def primary(scores: dict[str, int]) -> str:
    """The run's primary family from per-family evidence ``scores`` (0 = none); ``unknown`` if none."""
    seen = {name for name, score in scores.items() if score > 0}
    for combined_of, combined_name in COMBINED.items():
        if combined_of <= seen:
            return combined_name
    for family in families():
        if not family.context and family.name in seen:
            return family.name
    return "unknown"
