"""Compiled shortcuts of the HF Trainer and minGPT families read exactly what their definitions read.

minGPT's pyparsing grammars (``epoch_time``, ``peak_memory``) and ``ast.literal_eval`` stay the
definitions; the hot path reads with compiled patterns. Here both read every line of the fixtures and
the real logs, hand-made edge cases and random text. HF's metrics lines and durations have one
definition, their patterns, held to examples.
"""

from __future__ import annotations

import ast
import math
import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from logstat.parsers import hf_trainer, mingpt, source
from logstat.parsers.base import RunBuilder

from tests.conftest import FIXTURES
from tests.parsers.random_text import joined


def _real_records() -> list[str]:
    """Every record (ranks split apart, as the families get them) of the bundled logs (the real ones included)."""
    roots = [FIXTURES]
    paths = sorted(
        p
        for root in roots
        for p in root.rglob("*")
        if p.is_file() and p.suffix in (".out", ".err", ".log", ".txt")
    )
    return [
        record
        for path in paths
        for line in Path(path).read_text(encoding="utf-8", errors="replace").splitlines()
        for record in source.records(line)
    ]


REAL = _real_records()


# --- HF Trainer: train metrics block and train_runtime durations -----------------------------------


@pytest.mark.parametrize(
    ("text", "read"),
    [
        ("train_runtime            = 0:01:23.45", ("train_runtime", "0:01:23.45")),
        ("epoch =", ("epoch", "")),
        ("a=b=c", ("a", "b=c")),
        ("9x = 1", None),
        ("x y = 1", None),
    ],
)
def test_metric_line_reads_name_and_value(text, read):
    assert hf_trainer.metric_line(text) == read


@pytest.mark.parametrize(
    ("text", "parts"),
    [
        ("0:01:23.45", {"hours": 0, "minutes": 1, "seconds": 23.45}),
        ("1 day, 2:03:04.50", {"days": 1, "hours": 2, "minutes": 3, "seconds": 4.5}),
        ("2 days, 0:00:00", {"days": 2, "hours": 0, "minutes": 0, "seconds": 0}),
        ("0 : 1 :\t2", {"hours": 0, "minutes": 1, "seconds": 2}),
        ("1 day, 2:03", None),
        ("0:1:2 x", None),
        ("12", None),  # a bare number is seconds already: _runtime_seconds reads it as one
        ("", None),
    ],
)
def test_runtime_parts_of_durations(text, parts):
    # repr tells int seconds from float
    assert repr(hf_trainer.runtime_parts(text)) == repr(parts)


#: number-like text, for the dict values below
_NUMBERISH = st.from_regex(
    r"[-+]?[0-9١]{0,3}\.?[0-9]{0,3}(?:[eE][-+]?[0-9]{0,2})?|(?i:[-+]?nan|inf(inity)?)x?", fullmatch=True
)


# --- HF Trainer: logged dicts --------------------------------------------------------------------


def _same_dict(body: str) -> None:
    """Where the shortcut reads a dict, literal_eval reads the same one (equal keys, values and types)."""
    got = hf_trainer.plain_dict(body)
    if got is None:
        return
    want = ast.literal_eval(body)
    assert repr(got) == repr(want) and [type(v) for v in got.values()] == [type(v) for v in want.values()]


def test_plain_dict_equals_literal_eval_on_real_dicts():
    bodies = [
        match[0] for record in REAL for match in hf_trainer._DICT.finditer(record) if match[0].endswith("}")
    ]
    trainer = [body for body in bodies if any(key in body for key in hf_trainer._TRAINER_KEYS)]
    read = [body for body in trainer if hf_trainer.plain_dict(body) is not None]
    # every logged dict of the real logs takes the shortcut: 2021's raw floats, today's '4.705' strings
    assert len(trainer) >= 30 and read == trainer
    for body in bodies:
        _same_dict(body)


@pytest.mark.parametrize(
    ("body", "read"),
    [
        ("{'loss': 2.3, 'learning_rate': 5e-05, 'epoch': 0.1}", True),
        ("{'loss': '4.705', 'grad_norm': '1.159', 'epoch': '0.25'}", True),
        ("{'a': -0.0, 'b': -0, 'c': 1., 'd': .5, 'e': 1e400, 'f': 00.5, 'g': 0e0}", True),
        ("{'a': True, 'b': False, 'c': None, 'd': ''}", True),
        ("{'a': 1, 'a': 2}", True),
        ("{'a': 123456789012345678}", True),
        ("{'a': 1234567890123456789}", False),  # long integers: literal_eval's limits apply
        ("{'a': 007}", False),
        ("{'a': 1_000}", False),
        ("{'a': 0x10}", False),
        ("{'a': 1j}", False),
        ("{'a': +1}", False),
        ("{'a': - 1}", False),
        ("{'a': nan}", False),
        ("{'a': 'it\\'s'}", False),
        ("{'a': 'é'}", False),
        ("{'a': [1, 2]}", False),
        ("{'a': 1,'b': 2}", False),
        ("{'a' : 1}", False),
        ("{'a': 1, }", False),
        ("{'a': 1} ", False),
        ("{'a': 'b', 'c'}", False),
    ],
)
def test_plain_dict_edge_cases(body, read):
    assert (hf_trainer.plain_dict(body) is not None) == read
    _same_dict(body)


_DICT_KEYS = st.sampled_from(["'loss'", "'epoch'", "''", "'a b'", "'é'", "'it\\'s'", "1", "'x'"])
_DICT_VALUES = st.one_of(
    _NUMBERISH,
    st.from_regex(r"-?(?:0|[1-9][0-9_]{0,20})[jJ]?", fullmatch=True),
    st.sampled_from(
        ["True", "None", "False", "''", "'4.705'", "'a\\nb'", "0x1", "- 1", "[1]", "'é'", "'\t'"]
    ),
)
_DICT_SEPARATORS = st.sampled_from([", ", ", ", ", ", ",", " ,", ",  "])


@settings(max_examples=500)
@given(
    st.lists(
        st.tuples(_DICT_KEYS, st.sampled_from([": ", ": ", ":", " : "]), _DICT_VALUES, _DICT_SEPARATORS),
        min_size=1,
        max_size=5,
    ),
    st.sampled_from(["}", "}", "}", " }", "", "} ", "}}"]),
)
def test_plain_dict_equals_literal_eval_on_dict_like_text(items, end):
    body = "{" + "".join(key + colon + value + sep for key, colon, value, sep in items[:-1])
    key, colon, value, _ = items[-1]
    _same_dict(body + key + colon + value + end)


_VALUES = st.one_of(st.floats(allow_nan=False), st.integers(), st.text(max_size=8), st.booleans(), st.none())


@given(st.dictionaries(st.text(max_size=8), _VALUES, min_size=1, max_size=5))
def test_plain_dict_reads_printed_dicts_as_python_does(logged):
    body = repr(logged)
    got = hf_trainer.plain_dict(body)
    assert got is None or repr(got) == repr(ast.literal_eval(body))
    printable = all(str(k).isascii() and str(k).isprintable() for k in logged)
    finite = all(not isinstance(v, float) or math.isfinite(v) for v in logged.values())
    if printable and finite and "'" not in "".join(logged) and "\\" not in "".join(logged):
        if all(isinstance(v, float | bool) or v is None for v in logged.values()):
            assert got == logged  # what the Trainer logs always takes the shortcut


def test_dicts_without_a_trainer_key_need_not_reach_the_family():
    # the marker is a Trainer key, not "{'": a line holding dicts but no key and no other marker is
    # read as nothing (DeepSpeed's config printer: optimizer_params, aio_config, ...)
    other = [
        record
        for record in REAL
        if "{'" in record and not any(marker in record for marker in hf_trainer.FAMILY.markers)
    ]
    assert len(other) >= 20
    for lineno, record in enumerate(other, 1):
        run = RunBuilder(path="lines")
        hf_trainer.parse_line(record, lineno, run)
        assert (run.facts, run.iterations, run.families_seen, run.capturing) == ({}, {}, {}, set())
        assert run.state.get("parse_errors") is None


# --- minGPT: result lines ------------------------------------------------------------------------


def _mingpt_by_grammar(text: str) -> tuple[list, list]:
    return (
        [tokens["seconds"] for tokens, _, _ in mingpt.epoch_time.scan_string(text)],
        [tokens["mib"] for tokens, _, _ in mingpt.peak_memory.scan_string(text)],
    )


def _same_mingpt(text: str) -> None:
    got, want = (mingpt.epoch_times(text), mingpt.peak_memories(text)), _mingpt_by_grammar(text)
    assert repr(got) == repr(want), f"{text!r}: compiled {got} != grammar {want}"


def test_mingpt_results_equal_their_grammars_on_real_lines():
    found = 0
    for record in REAL:
        _same_mingpt(record)
        found += sum(map(len, _mingpt_by_grammar(record)))
    assert found >= 4  # the two result blocks of seed 004, epoch time and peak memory each


@pytest.mark.parametrize(
    "text",
    [
        "Average Epoch time: 45.65 seconds",
        "Average Peak CUDA memory: 36086.14MiB",
        "Average Epoch time:45seconds and Average Epoch time: 1e3 seconds",
        "Average Epoch time: -nan seconds",
        "Average Epoch time: infinity seconds",
        "Average Epoch time: 1.5e seconds",
        "Average Epoch time: 1.5eseconds",
        "Average Epoch time: .5\tseconds",
        "Average Epoch\ttime: 3 seconds",
        "x\tAverage Epoch time: 3 seconds",
        "Average Epoch time: ١٢ seconds",
        "Average Epoch time: 3 \r\n seconds",
        "Average Epoch time: 3 secondsAverage Epoch time: 4 seconds",
        "Average Peak CUDA memory: 12 MiB / Average Peak CUDA memory: 13.0MiBx",
        "Average Epoch time: 3 Seconds",
        "Average Epoch time: + 3 seconds",
    ],
)
def test_mingpt_results_edge_cases(text):
    _same_mingpt(text)


_MINGPT_PIECES = (
    "Average Epoch time:", "Average Peak CUDA memory:", "Average Epoch", "\ttime:", " ", "\t", "\n",
    "seconds", "MiB", "12", "3.5", ".", "e", "-", "+", "nan", "Inf", "x", "١",
)  # fmt: skip


@settings(max_examples=300)
@given(joined(_MINGPT_PIECES, max_size=12))
def test_mingpt_results_equal_their_grammars_on_random_pieces(text):
    _same_mingpt(text)


def _significant_digits_by_regex(text: str) -> int:
    """hf_trainer's definition of a final metric's precision, before its shortcut for printed numbers."""
    return len(re.sub(r"[^\d]", "", text.split("e")[0].split("E")[0]).lstrip("0"))


@pytest.mark.parametrize(
    "text",
    [
        "273.0148",
        "0.007",
        "1e-05",
        "-12.5",
        "1.5E+3",
        "",
        "0",
        "000.000",
        "abc",
        "1,234.5",
        "٣.٤",
        "1.2.3",
        "--7",
    ],
)
def test_significant_digits_edge_cases(text):
    assert hf_trainer._significant_digits(text) == _significant_digits_by_regex(text)


@settings(max_examples=500, deadline=None)
@given(st.text(alphabet="0123456789.-eE+,x ٣²", max_size=14) | st.floats().map(str))
def test_significant_digits_equal_the_regex_definition(text):
    assert hf_trainer._significant_digits(text) == _significant_digits_by_regex(text)
