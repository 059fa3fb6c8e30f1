"""Compiled patterns on the hot path read exactly what their pyparsing grammars read.

DeepSpeed's ``step=`` lines are read with ``_STEP_LINE``, the compiled form of ``step_record``; the
grammar stays the definition, and here both read every ``step=`` line of the fixtures and the real
logs, hand-made edge cases, and random variations of real lines. Likewise Megatron's ``key: value |``
fields (``grammar._PIPE_FIELD`` and ``pipe_fields``) and iteration headers (``megatron._ITERATION_HEADER``).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from logstat.parsers import deepspeed, grammar, reader, source
from logstat.parsers.base import Family

from tests.conftest import FIXTURES
from tests.parsers.random_text import joined


def _by_grammar(text: str) -> list[tuple]:
    """What ``step_record`` reads, through the reader's ``scan`` (the path before the compiled pattern)."""
    out = []
    for tokens in deepspeed.scan(deepspeed.step_record, deepspeed._STEP_ANCHOR, text):
        out.append((tokens["step"], tokens["skipped"], tokens["lr"][0] if tokens.get("lr") else None))
    return out


def _same(text: str) -> None:
    got, want = list(deepspeed.step_records(text)), _by_grammar(text)
    # nan != nan: compare the reprs, which also tell int from float
    assert repr(got) == repr(want), f"{text!r}: compiled {got} != grammar {want}"


def _log_lines(keep) -> list[str]:
    """Every line of the bundled logs (the real ones included) for which ``keep(line)`` holds."""
    roots = [FIXTURES]
    lines = []
    for root in roots:
        for path in sorted(
            p for p in root.rglob("*") if p.is_file() and p.suffix in (".out", ".err", ".log", ".txt")
        ):
            # as the reader sees them: without colour codes (fixtures/ansi/)
            text = source.without_escapes(Path(path).read_bytes()).decode("utf-8", errors="replace")
            lines += [line for line in text.splitlines() if keep(line)]
    return lines


def _step_lines() -> list[str]:
    return _log_lines(lambda line: "step=" in line)


def test_every_real_step_line_reads_the_same():
    lines = _step_lines()
    for line in lines:
        _same(line)
    # counted independently: DeepSpeed's plain "step=N, skipped=M" progress lines (18 in the fixtures
    # and real logs today, checked with grep), each read once
    plain = re.compile(r"(?:^|[^A-Za-z0-9_/])step=[0-9]+, skipped=[0-9]+, lr=\[")
    expected = sum(len(plain.findall(line)) for line in lines)
    assert expected >= 18
    assert sum(len(list(deepspeed.step_records(line))) for line in lines) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("[Rank 0] step=10, skipped=2, lr=[5e-05], mom=[[0.9, 0.999]]", [(10, 2, 5e-05)]),
        ("step=3, skipped=0, lr=[0.0001, 0.0001], mom=[(0.9, 0.999)]", [(3, 0, 0.0001)]),
        ("step=3 , skipped=\t1 , lr=[ 2.5e-4 , 1 ]", [(3, 1, 0.00025)]),
        ("step = 3, skipped=1, lr=[1]", []),
        ("step=4, skipped=0, lr=[]", [(4, 0, None)]),
        ("step=4, skipped=0, lr=[ ]", [(4, 0, None)]),
        ("step=5, skipped=0, lr=[NaN]", [(5, 0, float("nan"))]),
        ("step=5, skipped=0, lr=[-Inf, 1]", [(5, 0, float("-inf"))]),
        ("step=5, skipped=0, lr=[1.0,]", []),  # a trailing comma is no list
        ("step=5, skipped=0, lr=[1.0.2]", []),
        ("step=5, Skipped=0, lr=[1.0]", []),  # the literals keep their case
        ("global_step=5, skipped=0, lr=[1]", []),
        ("micro/step=5, skipped=0, lr=[1]", []),
        ("step=x step=6, skipped=1, lr=[2]step=7, skipped=1, lr=[3]", [(6, 1, 2.0), (7, 1, 3.0)]),
        ("step=٣, skipped=0, lr=[1]", []),  # integer is ASCII digits
        ("step=8, skipped=0, lr=[١.5]", [(8, 0, 1.5)]),  # number's \d is any digit, as float() reads it
    ],
)
def test_edge_cases(text, expected):
    _same(text)
    assert repr(list(deepspeed.step_records(text))) == repr(expected)


_PIECES = (
    "step=",
    "step",
    "=",
    "7",
    "12",
    ", skipped=",
    ",",
    " skipped=",
    "3",
    ", lr=",
    "[",
    "]",
    " ",
    "\t",
    "\r",
    "1e-4",
    "-2.5",
    ".5",
    "5.",
    "nan",
    "INF",
    "e",
    "+",
    "/",
    "_",
    "x",
    ", mom=[0.9]",
)


@settings(max_examples=400, deadline=None)
@given(joined(_PIECES, max_size=24))
def test_random_step_like_text_reads_the_same(text):
    _same(text)


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 40), st.sampled_from([" ", "  ", "\t", ""]), st.text("0123456789.,[] e-", max_size=8))
def test_real_line_with_changes_reads_the_same(cut, space, noise):
    line = "[2021-06-10 20:47:51,885] [INFO] [logging.py:60:log_dist] [Rank 0] step=10, skipped=0, lr=[6e-05, 6e-05], mom=[(0.9, 0.999)]"
    start = line.index("step=")
    position = start + cut
    _same(line[:position] + space + noise + line[position:])


def _pipe_matches(pattern, text: str) -> list[tuple]:
    """Where each field starts and ends, its stripped name and its value."""
    return [(m.start(), m.end(), m["name"].strip(), m["value"]) for m in pattern.finditer(text)]


def _pipe_lines() -> list[str]:
    return _log_lines(lambda line: "|" in line and ":" in line)


def test_pipe_fields_pattern_finds_what_the_grammar_token_finds():
    lines = _pipe_lines()
    found = 0
    for line in lines:
        want = _pipe_matches(grammar.pipe_field.re, line)
        assert _pipe_matches(grammar._PIPE_FIELD, line) == want, line
        found += len(want)
    # counted independently: every "elapsed time per iteration (ms): <number> |" field is one of them
    elapsed = sum(len(re.findall(r"elapsed time per iteration \(ms\): [0-9.]+ \|", line)) for line in lines)
    assert elapsed > 100
    assert found > elapsed


@pytest.mark.parametrize(
    "text",
    [
        " | lm loss: 1.5 | grad norm: nan | loss scale: INF | x: -2 | learning rate: N/A |",
        "name  \t : 5 |",
        "a b: 1: 2 | c = 3: 4 | d: 5",
        "abc\n: 7 |",
        "K: 1 | ſ: 2 | é: 3 |",
        "iteration 3/ 10 | consumed samples: 96 | elapsed time per iteration (ms): 12.5 | x: 1e5|",
    ],
)
def test_pipe_fields_pattern_edge_cases(text):
    assert _pipe_matches(grammar._PIPE_FIELD, text) == _pipe_matches(grammar.pipe_field.re, text)


@settings(max_examples=400, deadline=None)
@given(
    joined(
        [
            "a",
            "Lm loss",
            " ",
            "\t",
            ":",
            "|",
            "=",
            "\n",
            "1",
            "2.5",
            "-",
            "e3",
            "nan",
            "inf",
            "N/A",
            "K",
            "é",
            "\x1c",
        ],
        max_size=30,
    )
)
def test_pipe_fields_pattern_on_random_text(text):
    assert _pipe_matches(grammar._PIPE_FIELD, text) == _pipe_matches(grammar.pipe_field.re, text)


def _pipe_fields_by_grammar(text: str) -> dict[str, float]:
    """``pipe_fields`` spelled out from the grammar token: names stripped and lower case, the last of a
    repeated name wins, digits only (with a sign) read as an int, any other number as a float."""
    out: dict[str, float] = {}
    for match in grammar.pipe_field.re.finditer(text):
        value = match["value"]
        digits = value[1:] if value[:1] in "+-" else value
        out[match["name"].strip().lower()] = int(value) if digits.isdigit() else float(value)
    return out


def test_pipe_fields_of_every_real_line_are_the_grammar_fields():
    for line in _pipe_lines():
        # repr: tells 1 from 1.0 and compares nan
        assert repr(grammar.pipe_fields(line)) == repr(_pipe_fields_by_grammar(line)), line


@pytest.mark.parametrize(
    "text",
    [
        " | a: 1 | A : 2.0 | b: -3 | c: +4 | d: 1e3 | e: NaN | f: -inf | g: 5. | h: .5 |",
        "name: 1 | name: 2 |",  # the last value of a repeated name
        "x: \u0661\u0662 | y: \u0661.5 |",  # other decimal digits, as int() and float() read them
        "",
    ],
)
def test_pipe_fields_edge_cases(text):
    assert repr(grammar.pipe_fields(text)) == repr(_pipe_fields_by_grammar(text))


def _header_matches(pattern, text: str) -> list[tuple]:
    return [(m.start(), m.end(), m["step"], m["train_iters"]) for m in pattern.finditer(text)]


def test_a_record_polars_splits_off_is_routed_by_its_own_markers(tmp_path, monkeypatch):
    """A launcher prefix is not part of the record: a marker only in the prefix (a host named like one)
    routes the line nowhere, and a marker in the record routes it to its family, so the reader needs no
    search of its own. A line Python splits (glued ranks) keeps the mask of the whole line."""
    monkeypatch.setattr(source, "PYTHON_SEARCH_BYTES", 0)  # polars' search, as on a big file
    log = tmp_path / "job-1.out"
    log.write_text("alpha1: nothing\nalpha1: beta here\n0: alpha\n[default0]:alpha[default1]:x\n")
    got = list(
        source.routed_records(
            log,
            (b"alpha", b"beta"),
            ((b"alpha",), (b"beta",)),
            lambda: False,
            source.SourceReport(path=str(log)),
        )
    )
    assert got == [
        (1, "alpha1: nothing", 0, "nothing", False),
        (2, "alpha1: beta here", 0b10, "beta here", False),
        (3, "0: alpha", 0b01, "alpha", False),
        (4, "[default0]:alpha[default1]:x", 0b01, None, False),
    ]
    seen = []
    family = Family(name="alpha", markers=("alpha",), parse_line=lambda text, n, run: seen.append((n, text)))
    reader.read_run(reader.RunFiles(key=str(log), files=(log,)), [family])
    assert seen == [(3, "alpha"), (4, "alpha")]


def test_routed_lines_masks_marked_and_captured_lines(tmp_path, monkeypatch):
    """Each line's mask names the routes whose markers it holds; an unmarked line read while a block
    is open has mask 0. Colour codes are gone before the search: one inside a marker hides nothing."""
    monkeypatch.setattr(source, "PYTHON_SEARCH_BYTES", 0)  # polars' search, as on a big file
    log = tmp_path / "job-1.out"
    lines = [
        "alpha here",
        "nothing",
        "beta and alpha",
        "OPEN",
        "plain inside",
        "beta inside",
        "CLOSE",
        "beta al\x1b[0mpha",
    ]
    log.write_text("\n".join(lines) + "\n")
    routes = ((b"alpha",), (b"beta",), (b"OPEN", b"CLOSE"))
    needles = (b"alpha", b"beta", b"OPEN", b"CLOSE")
    state = {"open": False}
    got = []
    for lineno, text, mask in source.routed_lines(
        log, needles, routes, lambda: state["open"], source.SourceReport(path=str(log))
    ):
        got.append((lineno, text, mask))
        state["open"] = text == "OPEN" or (state["open"] and text != "CLOSE")
    assert got == [
        (1, "alpha here", 0b001),
        (3, "beta and alpha", 0b011),
        (4, "OPEN", 0b100),
        (5, "plain inside", 0),
        (6, "beta inside", 0b010),
        (7, "CLOSE", 0b100),
        (8, "beta alpha", 0b011),
    ]


@pytest.mark.parametrize(
    ("text", "unit", "expected"),
    [
        (" 2.63 K ", "", 2630.0),
        ("377.89 us", "s", 377.89e-6),
        ("1.5T", "", 1.5e12),
        ("52 B", "", 52e9),
        ("3\tM", "", 3e6),
        ("nan", "", float("nan")),
        ("-INF G", "", float("-inf")),
        ("1e", "", None),
        ("2.5 KB", "", None),
        ("12 k", "", None),  # prefixes keep their case
        ("", "", None),
    ],
)
def test_scaled_edge_cases(text, unit, expected):
    assert repr(deepspeed._scaled(text, unit)) == repr(expected)


def _by_layout(layout: grammar.PipeLayout, text: str) -> dict[str, float] | None:
    """What a layout reads of ``text`` (None: it does not read it); a value text ``pipe_number`` refuses
    is no number, so no field."""
    values = layout.values(text)
    if values is None:
        return None
    out: dict[str, float] = {}
    for name, value in zip(layout.names, values, strict=True):
        try:
            out[name] = grammar.pipe_number(value)
        except ValueError:
            pass
    return out


def _layout_reads_as_pipe_fields(layout: grammar.PipeLayout, text: str) -> bool:
    """Whether ``layout`` reads ``text``; when it does, it must read what ``pipe_fields`` reads."""
    read = _by_layout(layout, text)
    if read is not None:
        # repr: tells 1 from 1.0, -0.0 from 0.0, and compares nan; the order of the keys counts too
        assert repr(list(read.items())) == repr(list(grammar.pipe_fields(text).items())), (layout, text)
    return read is not None


def _records(line: str) -> list[str]:
    """Records as Megatron cuts them from a line: from the first ``|``, to the end or to the last ``|``."""
    record = line[line.index("|") :]
    return [record, record[: record.rfind("|") + 1]]


def test_pipe_layouts_of_real_lines_read_what_pipe_fields_reads():
    """A layout built from each real record reads that record, and every other real record it reads,
    as pipe_fields does."""
    records = sorted({record for line in _pipe_lines() for record in _records(line)})
    layouts = {}
    for record in records:
        layout = grammar.pipe_layout(record)
        if layout is not None:
            assert _layout_reads_as_pipe_fields(layout, record)
            layouts.setdefault(layout.names, layout)
    # the iteration, timer and memory lines of the real logs have a few dozen layouts
    assert len(layouts) > 10
    read = sum(
        _layout_reads_as_pipe_fields(layout, record) for layout in layouts.values() for record in records
    )
    assert read > len(layouts)


@pytest.mark.parametrize(
    ("template", "text", "reads"),
    [
        (" | a: 1 | b c: 2.5 |", " | a: 3 | b c: 4e5 |", True),
        (" | a: 1 | b c: 2.5 |", "| a :\t-3\r|\x0bb c:+4 ", True),  # any whitespace, either end
        (" | a: 1 | b c: 2.5 |", " | A: 3 | b c: 4 |", False),  # names as written: the key would match...
        (" | s: 1 |", " | \u017f: 1 |", False),  # ... but ſ (which matches s ignoring case) keys as ſ
        (" | K: 1 |", " | \u212a: 1 |", False),
        (" | a: 1 |", " | a: 1.2.3 |", True),  # no number: no field
        (" | a: 1 |", " | a: +-5 |", True),
        (" | a: 1 |", " | a: 1e |", True),
        (" | a: 1 |", " | a: . |", True),
        (" | a: 1 |", " | a: -0 |", True),
        (" | a: 1 |", " | a: 1e999 |", True),
        (" | a: 1 |", " | a: nan |", False),  # a number the loose value leaves to pipe_fields
        (" | a: 1 |", " | a: \u0661 |", False),
        (" | a: 1 |", " | a: 1_0 |", False),
        (" | a: 1 |", " x | a: 1 |", False),  # text before the first "|"
        (" | a: 1 |", " | a: 1 | x", False),  # text after the last field
        (" | a: 1 |", " | a: 1 || ", False),
        (" | a: 1 |", " | a: 1 \n| ", True),
        (" | a: 1 | b: 2", " | a: 1 \n| b\n: 2\n", True),
        (" | a: 1 |", " | a=b: 1 |", False),
        (" | a: 1 |", " | a: 1 : 2 |", False),
        (" | a: 1 |", " | a: 1" + "0" * 5000 + " |", False),  # too long for int(): pipe_fields raises
    ],
)
def test_pipe_layout_edge_cases(template, text, reads):
    layout = grammar.pipe_layout(template)
    assert _layout_reads_as_pipe_fields(layout, template)
    assert _layout_reads_as_pipe_fields(layout, text) is reads


@pytest.mark.parametrize(
    "template",
    [
        " | a: 1 | a: 2 |",  # a repeated name keeps its last value
        " | a: 1 | A: 2 |",
        " | learning rate: N/A | b: 2 |",  # a field that is no number
        " | a: nan |",
        " | a: 1 | = b: 2 |",
        "",
        " | no fields |",
    ],
)
def test_records_without_a_layout(template):
    assert grammar.pipe_layout(template) is None


_LAYOUT_PIECES = (
    "|",
    " | ",
    "a",
    "b c",
    "A",
    "x",
    ":",
    ": ",
    " ",
    "\t",
    "\n",
    "=",
    "1",
    "25",
    ".",
    "-",
    "+",
    "e",
    "E",
    "nan",
    "_",
    "\u017f",
)


@settings(max_examples=600, deadline=None)
@given(
    st.lists(st.sampled_from(["a", "b c", "lm loss", "A", "\u017f"]), min_size=1, max_size=4, unique=True),
    joined(_LAYOUT_PIECES, max_size=30),
    st.lists(
        st.tuples(
            st.sampled_from([" ", "", "\t", "\n "]),
            st.sampled_from(["1", "-0", "2.5e-3", "1.2.3", "+-1", "e", "nan", "7 x"]),
        ),
        min_size=4,
        max_size=4,
    ),
)
def test_pipe_layout_on_random_text(names, text, spaced_values):
    """A layout of random names reads random text, and records of its names with random spacing and
    values, as pipe_fields does."""
    template = "".join(f" | {name}: 1" for name in names) + " |"
    layout = grammar.pipe_layout(template)
    if {name.lower() for name in names} != set(layout.names if layout else ()):
        assert layout is None  # names that lower-case alike
        return
    _layout_reads_as_pipe_fields(layout, text)
    record = "".join(
        f"|{space}{name}{space}:{space}{value}{space}"
        for name, (space, value) in zip(names, spaced_values, strict=False)
    )
    _layout_reads_as_pipe_fields(layout, " " + record)
    _layout_reads_as_pipe_fields(layout, record + "|")
