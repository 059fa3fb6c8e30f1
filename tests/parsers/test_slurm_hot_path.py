"""The Slurm family's cheaper tests in ``parse_line`` decide what their plain definitions decide.

``_KILLED`` is written so that every alternative opens on a literal (re then scans a line for those
letters only), and the context patterns and ``gpu_model`` run behind substring tests: here each is
compared with its definition (``gpu_model``: with ``named_gpu``, the search its test guards) on the
fixtures' lines, edge cases and random text.
"""

from __future__ import annotations

import gzip
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from logstat.parsers import slurm

from tests.conftest import FIXTURES
from tests.parsers.random_text import joined

#: the definition: a killed process, named anywhere in the line (the launcher's kills are a record kind)
KILLED_DEFINITION = re.compile(r"\bKilled\b|oom[-_]kill|signal 9\b|SIGKILL")


def _fixture_lines() -> list[str]:
    """Every line of the bundled logs."""
    lines = []
    for path in sorted(FIXTURES.rglob("*")):
        if path.suffix == ".gz":
            lines += gzip.open(path, "rt", encoding="utf-8", errors="replace").read().splitlines()
        elif path.is_file() and path.suffix in (".out", ".err", ".log", ".txt"):
            lines += path.read_text(encoding="utf-8", errors="replace").splitlines()
    return lines


REAL = _fixture_lines()


def _same(text: str) -> None:
    assert bool(slurm._KILLED.search(text)) == bool(KILLED_DEFINITION.search(text)), text
    assert slurm.gpu_model(text) == slurm.named_gpu(text), text  # the substring test drops no name
    if "SLURM_" not in text:
        assert slurm._ENV.search(text) is None, text
    if "MiB" not in text:
        assert slurm._SMI_MEMORY.search(text) is None, text


def test_shortcuts_equal_their_definitions_on_real_lines():
    assert sum(bool(KILLED_DEFINITION.search(record)) for record in REAL) >= 9  # the fixtures' failures
    assert sum(slurm.named_gpu(record) is not None for record in REAL) >= 2
    for record in REAL:
        _same(record)


@pytest.mark.parametrize(
    "text",
    [
        "Killed",
        "srun: error: task 3: Killed",
        "xKilled",
        "Killedx",
        "Killed_",
        "_Killed",
        "9Killed",
        "Killed9",
        "é Killed é",
        "éKilled",
        "Killedé",
        "line 12: 4242 Killed  python train.py",
        "oom-kill oom_kill oomkill",
        "signal 9",
        "signal 95",
        "SIGKILL",
        "KilledKilled Killed",
        "GPU 0: NVIDIA a100-sxm4-80gb",
        "Tesla v100-PCIE",
        "h100 pcie",
        "1 00",
        "SLURM_JOB_ID=12 SLURM_NNODES=2 SLURM_GPUS_ON_NODE=4",
        "|  1234MiB / 81920MiB |",
    ],
)
def test_shortcuts_edge_cases(text):
    _same(text)


_PIECES = (
    "Killed", "Kill", "ed", "oom", "-", "_", "kill", "signal 9", "SIGKILL", " ", "x", "9",
    "é", "A100", "V100", "H100", "-SXM4", "-PCIE", " 80GB", "pcie", "a", "1", "00", "SLURM_", "MiB", "/",
)  # fmt: skip


@settings(max_examples=400, deadline=None)
@given(joined(_PIECES, max_size=12))
def test_shortcuts_equal_their_definitions_on_random_pieces(text):
    _same(text)


@settings(deadline=None)
@given(st.text(max_size=40))
def test_shortcuts_equal_their_definitions_on_any_text(text):
    _same(text)
