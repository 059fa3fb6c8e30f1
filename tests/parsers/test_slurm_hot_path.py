"""The Slurm family's cheaper tests decide what their plain definitions decide.

``_KILLED`` is written so that every alternative opens on a literal (re then scans a line for those
letters only), the context patterns and ``gpu_model`` run behind substring tests, and a bare launcher kill
line skips ``_killed``'s tests: here each is compared with its definition on the real records, edge cases
and random text.
"""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from logstat.parsers import slurm
from logstat.parsers.base import RunBuilder

from tests.parsers.random_text import joined
from tests.parsers.test_family_shortcuts import REAL

#: the definition of a bare launcher kill line
LAUNCHER_KILL_DEFINITION = re.compile(r"Killing subprocess \d+")
#: the definition: a killed process, named anywhere in the line
KILLED_DEFINITION = re.compile(r"\bKilled\b|oom[-_]kill|signal 9\b|SIGKILL|Killing subprocess")


def _gpu_model_by_definition(text: str) -> str | None:
    """``gpu_model`` without its substring test."""
    match = slurm._A100.search(text)
    if match:
        form = (match["form"] or match["form2"]).upper()
        return f"A100-{form}-{match['mem'] or match['mem2']}GB"
    match = slurm._V100.search(text)
    if match:
        form = match["form"].upper()
        return f"V100-{form}-{match['mem']}GB" if match["mem"] else f"V100-{form}"
    match = slurm._H100.search(text)
    if match:
        return "H100-PCIE" if "pcie" in (match["rest"] or "").lower() or "PCIe" in text else "H100-SXM"
    return None


def _same(text: str) -> None:
    assert bool(slurm._KILLED.search(text)) == bool(KILLED_DEFINITION.search(text)), text
    assert slurm.gpu_model(text) == _gpu_model_by_definition(text), text
    if "SLURM_" not in text:
        assert slurm._ENV.search(text) is None, text
    if "MiB" not in text:
        assert slurm._SMI_MEMORY.search(text) is None, text


def test_shortcuts_equal_their_definitions_on_real_lines():
    assert sum(bool(KILLED_DEFINITION.search(record)) for record in REAL) >= 9  # the fixtures' failures
    assert sum(_gpu_model_by_definition(record) is not None for record in REAL) >= 2
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
        "Killing subprocess",
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
    "Killed", "Kill", "ed", "oom", "-", "_", "kill", "signal 9", "SIGKILL", "Killing subprocess", " ", "x", "9",
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


def _takes_the_kill_shortcut(text: str, monkeypatch: pytest.MonkeyPatch) -> bool:
    """Whether parse_line sends ``text`` (a first line, outside a traceback) to ``_launcher_killed``."""
    taken = []
    monkeypatch.setattr(slurm, "_launcher_killed", lambda *args: taken.append(args))
    slurm.parse_line(text, 1, RunBuilder(path="x"))
    return bool(taken)


@pytest.mark.parametrize(
    "text",
    ["Killing subprocess 1", "Killing subprocess ", "Killing subprocess 12 ", " Killing subprocess 1",
     "Killing subprocess 1\n", "Killing subprocess ١٢", "Killing subprocess ²", "Killing subprocess ½",
     "Killing subprocess 1a", "Killing subprocess  1", "Killing subprocess", "killing subprocess 1"],
)  # fmt: skip
def test_the_kill_shortcut_takes_what_its_pattern_matches(text, monkeypatch):
    assert _takes_the_kill_shortcut(text, monkeypatch) == bool(LAUNCHER_KILL_DEFINITION.fullmatch(text))


@settings(max_examples=300, deadline=None)
@given(joined(["Killing subprocess ", "1", "9", "١", "²", "½", "Ⅻ", " ", "\n", "a"], max_size=6))
def test_the_kill_shortcut_takes_what_its_pattern_matches_on_random_pieces(text):
    with pytest.MonkeyPatch.context() as monkeypatch:
        assert _takes_the_kill_shortcut(text, monkeypatch) == bool(LAUNCHER_KILL_DEFINITION.fullmatch(text))


# --- the traceback's exception line ------------------------------------------------------------------


@settings(max_examples=500, deadline=None)
@given(
    joined(
        ["Error", "Exception", "Exit", "a", "A", "_", ".", ":", " ", "\t", "é", "9", "File", "("],
        max_size=10,
    )
)
def test_a_space_before_the_first_colon_means_no_exception_line(text):
    if " " in text.partition(":")[0]:  # _traceback_line's test before the pattern
        assert slurm._EXCEPTION.match(text) is None


def test_traceback_frames_are_skipped_and_the_exception_line_read():
    lines = [
        "Traceback (most recent call last):",
        '  File "/x/run.py", line 1019, in run',
        "    elastic_launch(",
        "           ^^^^^^^",
        "ValueError",
    ]
    run = RunBuilder(path="x")
    for lineno, line in enumerate(lines, 1):
        slurm.parse_line(line, lineno, run)
    assert run.failure == ("failed", "ValueError", 5)


# --- the bare launcher kill line ---------------------------------------------------------------------


def _parse_by_definition(text: str, lineno: int, run: RunBuilder) -> None:
    """``parse_line`` with a bare kill line read by ``_killed`` itself, as before its shortcut."""
    state = run.state.setdefault(slurm.NAME, {})
    if not state.get("in_traceback") and LAUNCHER_KILL_DEFINITION.fullmatch(text):
        slurm._killed(text, lineno, run, state)
    else:
        slurm.parse_line(text, lineno, run)


_LINES = st.sampled_from(
    [
        "Killing subprocess 4443",
        "Killing subprocess 4444",
        "[INFO] [launch.py:253:sigkill_handler] Killing subprocess 4445",
        "srun: error: r7i4n2: task 3: Killed",
        "Traceback (most recent call last):",
        '  File "worker.py", line 28, in <module>',
        "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ",
        "subprocess.CalledProcessError: Command '['python']' returned non-zero exit status 1.",
        "RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB",
        "ValueError: bad",
        "slurmstepd: error: *** JOB 3007 ON r7i4n1 CANCELLED AT 2021-05-26T11:40:13 ***",
        "exits with return code = -9",
        "+ NNODES=16",
    ]
)


@settings(max_examples=300, deadline=None)
@given(st.lists(_LINES, max_size=14))
def test_bare_kill_lines_read_as_killed_reads_them(lines):
    fast, reference = RunBuilder(path="x"), RunBuilder(path="x")
    for lineno, line in enumerate(lines, 1):
        slurm.parse_line(line, lineno, fast)
        _parse_by_definition(line, lineno, reference)
    assert fast.failure == reference.failure
    assert fast.families_seen == reference.families_seen
    assert fast.facts == reference.facts
    state, expected = fast.state.get(slurm.NAME, {}), reference.state.get(slurm.NAME, {})
    assert bool(state.get("launcher_killing")) == bool(expected.get("launcher_killing"))
    assert fast.consequences == reference.consequences
