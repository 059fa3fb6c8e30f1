"""The hints of HF's TrainingArguments and model config blocks and of DeepSpeed's JSON values
(``Block.hint``): polars (Rust regex)
searches the raw lines of a block's window for them, and only the records of the lines they match are
the block's. Each must match every raw line holding a record its block reads, whatever the launcher
prefixes, glued ranks, carriage returns and whitespace (Python's, which Rust's ``\\s`` is not) around it.
"""

from __future__ import annotations

import re

import polars as pl
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from logstat.parsers import deepspeed, hf_trainer
from logstat.parsers.kinds import PYTHON_SPACE
from logstat.parsers.records import passes

from tests.parsers.feeding import records_of
from tests.parsers.random_text import joined

#: every character Python's ``str.strip()`` removes (and ``re``'s ``\s`` matches)
_CHARACTERS = [chr(code) for code in range(0x110000) if not 0xD800 <= code < 0xE000]  # no surrogates
PYTHON_WHITESPACE = "".join(c for c in _CHARACTERS if c.isspace())
# whitespace that launchers and loggers write, and the odd ones where Python and Rust disagree
_SPACE = (" ", " ", " ", "\t", "\x0b", "\x0c", "\x1c", "\x1f", "\x85", "\xa0", "\u2028", "\u3000")
_SPACES = joined(_SPACE, max_size=4)
_PREFIX = ("12: ", "0: ", "[default3]:", "[rank7]:", "10.0.0.2: ", "localhost: ", "node12: ", " ")
_PREFIXES = joined(_PREFIX, max_size=3)
_TAG = st.sampled_from(["[default0]:", "[rank1]:", "[default12]:"])
# text around a record: its neighbours' records, or anything (names, dots, parentheses, separators)
_NOISE = joined(
    ["a", "fp16", "_", ".", "..", "=", ")", "(", ":", "[", "]", "0", "é", "\r", *" \t\xa0\x1c"], max_size=8
)


def _value(draw) -> str:
    return draw(
        st.text(
            alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\n\x1b"), max_size=6
        )
    )


@st.composite
def _args_record(draw) -> str:
    """A record the TrainingArguments block reads: a read field's ``name=value`` or its closing ``)``."""
    body = draw(
        st.one_of(
            st.just(")"),
            st.sampled_from(sorted(hf_trainer._ARGS_READ)).map(lambda name: name + "="),
        )
    )
    if body != ")":
        body += _value(draw) + draw(st.sampled_from(["", ","]))
    return draw(_SPACES) + body + draw(_SPACES)


@st.composite
def _raw_line(draw, record: st.SearchStrategy[str]) -> str:
    """``record`` as polars holds it in a raw line: prefixed, maybe glued between other ranks' records,
    maybe one of several carriage-return pieces (a CR before the line's LF is dropped by the reader)."""
    line = draw(_PREFIXES) + draw(record)
    if draw(st.booleans()):
        line = draw(_NOISE) + draw(_TAG) + line
    if draw(st.booleans()):
        line += draw(_SPACES) + draw(_TAG) + draw(_NOISE)
    if draw(st.booleans()):
        line = draw(_NOISE) + "\r" + line
    if draw(st.booleans()):
        line += "\r" + draw(_NOISE)
    return line.removesuffix("\r")


def _polars_matches(pattern: str, line: str) -> bool:
    return bool(pl.Series([line]).str.contains(pattern)[0])


def _polars_group(pattern: str, text: str, group: int) -> str | None:
    return pl.Series([text]).str.extract(pattern, group)[0]


def _args_block_reads(record: str) -> bool:
    """Whether the TrainingArguments block reads ``record``: a field it keeps, or its closing ``)``."""
    return _polars_matches(hf_trainer._ARGS_CLOSER, record) or (
        _polars_group(hf_trainer._ARGS_FIELD, record, 1) in hf_trainer._ARGS_READ
    )


@st.composite
def _config_record(draw) -> str:
    """A line of a printed model config: a key the block reads, another key, or a closing brace."""
    key = draw(st.sampled_from([*hf_trainer._CONFIG_KEYS, "bos_token_id", "task_specific_params"]))
    body = draw(st.one_of(st.just("}"), st.just(f'"{key}": {_value(draw)},')))
    return draw(st.sampled_from(["", "  ", "    "])) + body + draw(st.sampled_from(["", ",", " "]))


def _config_block_reads(record: str) -> bool:
    """Whether the open model config block does anything with ``record`` (a key it reads, or its end)."""
    return record[:1] == "}" or _polars_group(hf_trainer._CONFIG_JSON, record, 1) in hf_trainer._CONFIG_KEYS


@st.composite
def _json_record(draw) -> str:
    """A line of a DeepSpeed JSON value: a key it reads, a key opening an object, another key, a brace."""
    key = draw(st.sampled_from([*sorted(deepspeed.JSON_VALUE_KEYS), "fp16", "zero_optimization", "params"]))
    colon = draw(_SPACES) + ":" + draw(_SPACES)
    body = draw(
        st.one_of(st.just("}"), st.just(f'"{key}"{colon}{{'), st.just(f'"{key}"{colon}{_value(draw)},'))
    )
    return draw(_SPACES) + body + draw(st.sampled_from(["", ",", " "]))


def _json_value_reads(record: str) -> bool:
    """Whether the JSON values' block takes ``record`` as one of its own (``JSON_LINE``: a record that
    closes an object, a key opening one, a key the values are read for)."""
    return _polars_matches(deepspeed.JSON_LINE, record)


_SETTINGS = settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@_SETTINGS
@given(_raw_line(_args_record()))
def test_the_args_capture_matches_every_line_the_block_reads(line):
    assume(any(_args_block_reads(record) for record in records_of([line])))
    assert _polars_matches(hf_trainer._ARGS_LINES, line), repr(line)


@_SETTINGS
@given(joined(["fp16", "bf16=", ")", " ", ".", "\t", ":", "[rank1]:", "\r", "x", "\xa0"], max_size=None))
def test_the_args_capture_matches_every_line_of_random_pieces_the_block_reads(line):
    line = line.removesuffix("\r")
    if any(_args_block_reads(record) for record in records_of([line])):
        assert _polars_matches(hf_trainer._ARGS_LINES, line), repr(line)


@_SETTINGS
@given(_raw_line(_config_record()))
def test_the_config_capture_matches_every_line_the_block_reads(line):
    assume(any(_config_block_reads(record) for record in records_of([line])))
    assert _polars_matches(hf_trainer._CONFIG_LINES, line), repr(line)


@_SETTINGS
@given(_raw_line(_json_record()))
def test_the_json_hint_matches_every_line_the_json_value_reads(line):
    assume(any(_json_value_reads(record) for record in records_of([line])))
    assert _polars_matches(deepspeed.JSON_LINES, line), repr(line)


def test_python_space_is_what_python_strips():
    # the patterns' whitespace class is Python's, written for Rust's regex engine
    matched = pl.Series(_CHARACTERS).str.contains(f"^{PYTHON_SPACE}$")
    assert "".join(c for c, hit in zip(_CHARACTERS, matched, strict=True) if hit) == PYTHON_WHITESPACE


def _block_takes(block, line: str) -> bool:
    """Whether the block takes one of ``line``'s records in a window: the line passes the block's hint,
    the record its body or closing test."""
    records = pl.DataFrame({"text": records_of([line])})
    taken = records.select(taken=(passes(block.body) | passes(block.closes)).any()).item()
    return taken and _polars_matches(block.hint, line)


def test_the_lines_the_hints_let_through_are_left_to_the_blocks_tests():
    # the hints are literals (polars finds them fast), the tests after them leave out what the blocks skip
    args_lines = [
        "INFO: using fp16 for the model",
        "some_call(x)",
        "    eval_steps=None,",
        "    fp16_full_eval=False,",
    ]
    for line in args_lines:
        assert not _block_takes(hf_trainer.ARGUMENTS, line), line
    assert _polars_matches(hf_trainer._ARGS_LINES, ")")
    assert _polars_matches(hf_trainer._ARGS_LINES, "x[rank0]: )\u3000[rank1]:fp16=True,")
    assert re.search(hf_trainer._ARGS_LINES, "12: \x1cfp16=True,")  # Python's re reads it alike
    # the model config block ends at its own closing brace only, not at a nested object's
    for line in ["  },", "    }", "x}"]:
        assert not _block_takes(hf_trainer.CONFIG, line), line
    for line in ["}", "[default3]:}", "12: }", "x\r}"]:
        assert _polars_matches(hf_trainer._CONFIG_LINES, line), line
        assert _block_takes(hf_trainer.CONFIG, line), line
    # a JSON value: a brace inside a record, a one-line dict and other keys change nothing
    for line in ["x}", "{'lr': 0.001, 'betas': [0.9, 0.999]}", '  "partition_activations": false,', "  {"]:
        assert not _block_takes(deepspeed.JSON_VALUES, line), line
    for line in ["    },", "12:   }", '  "fp16": {', '"zero_optimization"\t:  {']:
        assert _polars_matches(deepspeed.JSON_LINES, line), line
        assert _block_takes(deepspeed.JSON_VALUES, line), line
