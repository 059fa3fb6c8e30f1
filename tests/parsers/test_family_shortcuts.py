"""HF Trainer's and minGPT's records at their edges.

minGPT's result lines, on edge cases with the values they hold. HF's logged dicts are read column-wise when they are plain literals, by
``ast.literal_eval`` otherwise: through the reader, every dict's step row holds what Python reads of the
dict it printed (whose non-finite floats are the names nan and inf). HF's metrics lines and durations have one definition, their patterns, held to examples.
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from logstat.parsers import fairseq, hf_trainer, mingpt
from logstat.parsers.base import RunBuilder

from tests.conftest import FIXTURES
from tests.parsers.feeding import feed_each, records_of


def _real_records() -> list[str]:
    """Every record (ranks split apart, as the families get them) of the bundled logs (the real ones included)."""
    roots = [FIXTURES]
    paths = sorted(
        p
        for root in roots
        for p in root.rglob("*")
        if p.is_file() and p.suffix in (".out", ".err", ".log", ".txt")
    )
    lines = [
        line
        for path in paths
        for line in Path(path).read_text(encoding="utf-8", errors="replace").splitlines()
    ]
    return records_of(lines)


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


def _python_number(value: Any) -> float | None:
    """What a step row holds of a dict value: a number's float, a string's ``float`` (commas dropped),
    nothing for a bool, None or anything else."""
    if isinstance(value, str):
        try:
            return float(value.replace(",", ""))
        except ValueError:
            return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def _python_step(body: str) -> tuple | None:
    """Python's reading of a training dict: its own step (or None), the loss, learning rate and grad
    norm; None when the dict is no training step."""
    try:  # Python's reading of a dict it printed: its non-finite floats print as the names nan, inf
        logged = eval(body, {"__builtins__": {}}, {"nan": math.nan, "inf": math.inf})  # noqa: S307
    except Exception:  # noqa: BLE001 - not a literal: noted, no step
        return None
    if not isinstance(logged, dict) or "loss" not in logged:
        return None
    # the Trainer adds the epoch to a training dict and logs the rate with the loss: one with neither is a script's
    if not {"epoch", "learning_rate"} & logged.keys():
        return None
    if "train_runtime" in logged or "train_samples_per_second" in logged:
        return None
    step = logged.get("step")
    if isinstance(step, int) and not -(2**63) <= step < 2**63:  # the frames' int64: noted, no row
        return None
    numbers = [_python_number(logged.get(key)) for key in ("loss", "learning_rate", "grad_norm")]
    return (int(step) if isinstance(step, int) else None, *numbers)


def _expected_rows(line: str) -> list[tuple]:
    """The step rows of a log of one line, as Python reads the dicts the family finds in it: a dict
    without its own step is the n-th distinct one; a step's row keeps each column's first value."""
    rows: dict[int, list] = {}
    distinct: dict[str, int] = {}
    for body in re.findall(hf_trainer._DICT, line):
        if not any(key in body for key in hf_trainer._TRAINER_KEYS) or not body.endswith("}"):
            continue
        read = _python_step(body)
        if read is None:
            continue
        step = (
            read[0] if read[0] is not None else distinct.setdefault(" ".join(body.split()), len(distinct) + 1)
        )
        row = rows.setdefault(step, [None, None, None])
        rows[step] = [old if old is not None else new for old, new in zip(row, read[1:], strict=True)]
    return sorted((step, *row) for step, row in rows.items())


def _read_each(bodies: list[str]) -> list[RunBuilder]:
    """Each body as the one line of a log of its own, the logs read together through the reader."""
    return feed_each(hf_trainer.FAMILY, [[body] for body in bodies])


def _step_rows(run: RunBuilder) -> list[tuple]:
    return [
        (step, row.get("loss"), row.get("lr"), row.get("grad_norm")) for step, row in run.iterations.items()
    ]


def _same_steps(bodies: list[str]) -> None:
    """Through the reader, the step rows of a log of each body are Python's reading of its dicts
    (``repr``: nan, -0.0)."""
    for body, run in zip(bodies, _read_each(bodies), strict=True):
        assert repr(_step_rows(run)) == repr(_expected_rows(body)), body


def test_real_dicts_are_read_as_python_reads_them():
    # fairseq's JSON records (its family's) hold "loss" and "epoch" too
    records = [record for record in REAL if fairseq.JSON_STEP not in record]
    bodies = [match[0] for record in records for match in re.finditer(hf_trainer._DICT, record)]
    trainer = [body for body in bodies if any(key in body for key in hf_trainer._TRAINER_KEYS)]
    # 2021's raw floats, today's '4.705' strings
    training = [body for body in trainer if "'loss'" in body and body.endswith("}")]
    assert len(trainer) >= 30 and len(training) >= 12
    _same_steps(sorted(set(trainer)))


@pytest.mark.parametrize(
    "body",
    [
        "{'loss': 2.3, 'learning_rate': 5e-05, 'epoch': 0.1}",
        "{'loss': '4.705', 'grad_norm': '1.159', 'epoch': '0.25'}",
        "{'loss': '4,705', 'learning_rate': ' 1e-3 ', 'grad_norm': '1_0'}",
        "{'loss': -0.0, 'learning_rate': 1., 'grad_norm': .5, 'epoch': 1e400}",
        "{'loss': -0, 'learning_rate': 00.5, 'grad_norm': 0e0}",
        "{'loss': True, 'learning_rate': None, 'grad_norm': ''}",
        "{'loss': 1, 'loss': 2}",
        "{'loss': 1, 'step': 123456789012345678}",
        "{'loss': 1, 'step': 1234567890123456789}",  # long integers: literal_eval's limits apply
        "{'loss': 1, 'step': 10000000000000000000}",  # beyond int64: noted, no row
        "{'loss': 1, 'step': True}",
        "{'loss': 1, 'step': 7.0}",
        "{'loss': 007}",
        "{'loss': 1_000}",
        "{'loss': 0x10}",
        "{'loss': 1j}",
        "{'loss': +1}",
        "{'loss': - 1}",
        "{'loss': nan}",
        "{'loss': 'it\\'s'}",
        "{'loss': 'é'}",
        "{'loss': 'nan'}",
        "{'loss': 'Infinity'}",
        "{'loss': '١٢'}",
        "{'loss': [1, 2]}",
        "{'loss': 1,'epoch': 2}",
        "{'loss' : 1}",
        "{'loss': 1, }",
        "{'loss': 'b', 'c'}",
        "{'loss'}",
    ],
)
def test_dict_edge_cases_are_read_as_python_reads_them(body):
    _same_steps([body])


_DICT_KEYS = st.sampled_from(
    ["'loss'", "'epoch'", "'step'", "'grad_norm'", "''", "'a b'", "'é'", "'it\\'s'", "1"]
)
_DICT_VALUES = st.one_of(
    st.from_regex(
        r"[-+]?[0-9١]{0,3}\.?[0-9]{0,3}(?:[eE][-+]?[0-9]{0,2})?|(?i:[-+]?nan|inf(inity)?)x?", fullmatch=True
    ),
    st.from_regex(r"-?(?:0|[1-9][0-9_]{0,20})[jJ]?", fullmatch=True),
    st.sampled_from(
        ["True", "None", "False", "''", "'4.705'", "'a\\nb'", "0x1", "- 1", "[1]", "'é'", "'\t'", "'1,5'"]
    ),
)
_DICT_SEPARATORS = st.sampled_from([", ", ", ", ", ", ",", " ,", ",  "])


@settings(max_examples=40, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.lists(
                st.tuples(
                    _DICT_KEYS, st.sampled_from([": ", ": ", ":", " : "]), _DICT_VALUES, _DICT_SEPARATORS
                ),
                min_size=1,
                max_size=5,
            ),
            st.sampled_from(["}", "}", "}", " }", "} ", "}}"]),
        ),
        min_size=1,
        max_size=12,
    )
)
def test_dict_like_text_is_read_as_python_reads_it(dicts):
    bodies = []
    for items, end in dicts:
        body = "{'loss': 1, 'epoch': 1, " + "".join(
            key + colon + value + sep for key, colon, value, sep in items[:-1]
        )
        key, colon, value, _ = items[-1]
        bodies.append(body + key + colon + value + end)
    _same_steps(bodies)


_VALUES = st.one_of(st.floats(allow_nan=False), st.integers(), st.text(max_size=8), st.booleans(), st.none())


@settings(max_examples=40, deadline=None)
@given(st.lists(st.dictionaries(st.text(max_size=8), _VALUES, max_size=4), min_size=1, max_size=12))
def test_printed_dicts_are_read_as_python_reads_them(extras):
    logged = [{"loss": 1.5, "epoch": 0.5, **extra} for extra in extras]
    _same_steps([repr(one) for one in logged])


def test_dicts_without_a_trainer_key_are_no_records_of_the_family():
    # the marker is a Trainer key, not "{'": a line holding dicts but no key and no other marker is
    # read as nothing (DeepSpeed's config printer: optimizer_params, aio_config, ...)
    other = sorted(
        {
            record
            for record in REAL
            if "{'" in record and not any(marker in record for marker in hf_trainer.FAMILY.markers)
        }
    )
    assert len(other) >= 20
    for run in _read_each(other):
        assert (run.facts, run.iterations, run.families_seen) == ({}, {}, {})
        assert run.state.get("parse_errors") is None


# --- minGPT: result lines ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "seconds", "mib"),
    [
        ("Average Epoch time: 45.65 seconds", [45.65], []),
        ("Average Peak CUDA memory: 36086.14MiB", [], [36086.14]),
        ("Average Epoch time:45seconds and Average Epoch time: 1e3 seconds", [45, 1000.0], []),
        ("Average Epoch time: -nan seconds", [float("nan")], []),
        ("Average Epoch time: infinity seconds", [float("inf")], []),
        ("Average Epoch time: 1.5e seconds", [], []),
        ("Average Epoch time: 1.5eseconds", [], []),
        ("Average Epoch time: .5\tseconds", [0.5], []),
        ("Average Epoch\ttime: 3 seconds", [], []),  # a tab inside the literal
        ("x\tAverage Epoch time: 3 seconds", [3], []),
        ("Average Epoch time: ١٢ seconds", [12], []),  # any digit float() reads
        ("Average Epoch time: 3 \r\n seconds", [3], []),
        ("Average Epoch time: 3 secondsAverage Epoch time: 4 seconds", [3, 4], []),
        ("Average Peak CUDA memory: 12 MiB / Average Peak CUDA memory: 13.0MiBx", [], [12, 13.0]),
        ("Average Epoch time: 3 Seconds", [], []),
        ("Average Epoch time: + 3 seconds", [], []),
    ],
)
def test_mingpt_results_edge_cases(text, seconds, mib):
    assert repr((mingpt.epoch_times(text), mingpt.peak_memories(text))) == repr((seconds, mib))


@pytest.mark.parametrize(
    ("text", "digits"),
    [
        ("273.0148", 7),
        ("0.007", 1),
        ("1e-05", 1),
        ("-12.5", 3),
        ("1.5E+3", 2),
        ("0:00:11.22", 4),  # the metrics block's runtime: hundredths
        ("1 day, 2:03:04.50", 8),
        ("", 0),
        ("0", 0),
        ("000.000", 0),
        ("abc", 0),
        ("1,234.5", 5),
        ("٣.٤", 2),  # every digit Python's re calls one
        ("100000.0", 7),
    ],
)
def test_significant_digits_of_final_metric_copies(text, digits):
    # of the copies of a final metric (the final dict's, the metrics block's), the one with the most wins
    assert hf_trainer._significant_digits(text) == digits
