"""The shared grammar pieces, each alone, on real lines."""

import shlex

import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from logstat.parsers import grammar
from logstat.parsers.grammar import literal
from logstat.parsers.kinds import pipe_fields

from tests.conftest import FIXTURES
from tests.parsers.random_text import joined

# fixtures/bigscience/meg_ds_zero_gpt2_perf_n16_nbs48_ms48.out, first iteration line
OLD_ITERATION = (
    " iteration        1/    1000 | elapsed time per iteration (ms): 121899.8 | learning rate: 1.875E-05 |"
    " lm loss: 1.252221E+01 | loss scale: 1024.0 | number of skipped iterations:   0 | number of nan iterations:   0 |"
)


def _fields(text: str) -> dict[str, str]:
    """``kinds.pipe_fields`` of one record: name -> value text, in the order of the fields."""
    frame = pl.DataFrame({"order": [0], "text": [text]}).lazy()
    found = pipe_fields(frame, pl.col("text")).sort("position").collect()
    return dict(zip(found["name"], found["value"], strict=True))


def test_pipe_record_reads_names_and_numbers():
    fields = {name: float(value) for name, value in _fields(OLD_ITERATION).items()}
    assert fields["elapsed time per iteration (ms)"] == 121899.8
    assert fields["learning rate"] == 1.875e-05
    assert fields["lm loss"] == 12.52221
    assert fields["number of skipped iterations"] == 0


def test_pipe_record_skips_non_numbers_and_reads_nan_inf():
    fields = _fields(" | learning rate: N/A | grad norm: nan | loss scale: inf | x: -2 |")
    assert fields == {"grad norm": "nan", "loss scale": "inf", "x": "-2"}


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # a name holds no ":" or "=", starts at a letter and is stripped and lower-cased
        (" | 12 Lm Loss : 3.5 | a=b: 1 | c: d: 2 |", {"lm loss": "3.5", "b": "1", "d": "2"}),
        # a repeated name keeps its first place and its last value
        (" | x: 1 | y: 2 | x: 3 |", {"x": "3", "y": "2"}),
        # a value followed by anything but spaces before the next "|" is no number
        (" | a: 1.5e | b: 1 2 | c: .5 | d: 5. | e: 1E+3 |", {"c": ".5", "d": "5.", "e": "1E+3"}),
        ("no fields here", {}),
    ],
)
def test_pipe_fields_edge_cases(text, expected):
    assert _fields(text) == expected


def test_literal_values():
    assert literal("None") is None and literal("True") is True and literal("False") is False
    assert literal("8192") == 8192 and literal("1e-08") == 1e-08 and literal("cosine") == "cosine"


def _literal_by_trying(text: str):
    """``literal`` without its shortcuts: every conversion is tried in turn."""
    value = text.strip()
    if value.lower() in ("none", "null", ""):
        return None
    if value.lower() in ("true", "false"):
        return value.lower() == "true"
    for convert in (int, float):
        try:
            return convert(value)
        except ValueError:
            pass
    return value


@pytest.mark.parametrize(
    "text",
    [
        " NULL ",
        "TRUE",
        "8192",
        "-3",
        "+4",
        "1_000",
        "0.02",
        "1e-08",
        "5.",
        ".5",
        "1.5.2",
        "NaN",
        "-inf",
        "Infinity",
        "infinit",
        "cosine",
        "gpt2",
        "/data/x.json",
        "[1, 2]",
        "\u0661\u0662",  # other decimal digits: int() reads them
        "\u0661.5",
        "\uff11",
        "\u00b2",  # a digit that is no decimal digit: a string
        "\u0130nf",
        "\u212a",
        "1" * 5000,  # beyond int()'s digit limit: float() reads it
    ],
)
def test_literal_reads_what_trying_each_conversion_reads(text):
    assert repr(literal(text)) == repr(_literal_by_trying(text))


@settings(max_examples=500, deadline=None)
@given(
    joined(
        [
            "1",
            "0",
            "42",
            ".",
            "e",
            "E",
            "-",
            "+",
            "_",
            " ",
            "nan",
            "INF",
            "inity",
            "none",
            "True",
            "x",
            "\u0661",
        ],
        max_size=8,
    )
    | st.text(max_size=8)
)
def test_literal_on_random_text(text):
    assert repr(literal(text)) == repr(_literal_by_trying(text))


def test_positive_int_is_a_count_or_none():
    assert grammar.positive_int("8") == 8 and grammar.positive_int(" 64 ") == 64
    for not_a_count in ("0", "-2", "1.5", "True", "", "eight"):
        assert grammar.positive_int(not_a_count) is None


@pytest.mark.parametrize(
    ("line", "flags"),
    [
        # the shape of a `set -x` echo of run_clm.py (HF) and of minGPT's bench command
        (
            "+ python run_clm.py --config_overrides 'n_embd=64,n_layer=2' --block_size=32 --fp16 --max_steps 5",
            dict(config_overrides="n_embd=64,n_layer=2", block_size="32", fp16="", max_steps="5"),
        ),
        # a quoted command's flags (srun bash -c '...'), over the outer ones
        (
            "srun --jobid 42 --nodes 2 bash -c 'torchrun --nnodes 16 --nodes 3 train.py --fp16'",
            dict(jobid="42", nodes="3", nnodes="16", fp16=""),
        ),
        # an unclosed quote: split on spaces, quotes kept
        ("--name 'a b --gpus 8", dict(name="'a", gpus="8")),
        # a printed argv (LLaMA-Factory's launch failing: subprocess's CalledProcessError)
        (
            "subprocess.CalledProcessError: Command '['torchrun', '--nnodes', '1', '--nproc_per_node', '4',"
            " '/opt/launcher.py', 'sft.yaml']' returned non-zero exit status 1.",
            dict(nnodes="1", nproc_per_node="4"),
        ),
        # a comment after the command is none of its flags
        (
            "+ sbatch -N4 --ntasks-per-node=1 run.sh   # each task runs torchrun --nproc_per_node 8",
            {"ntasks-per-node": "1"},
        ),
    ],
)
def test_command_line_flags_of_an_echoed_launch(line, flags):
    assert grammar.command_line_flags(line) == flags


def _words_by_shlex(text: str) -> list[str]:
    """The words ``command_line_flags`` reads, as defined: shlex's (plain splitting where quotes do not
    close); its shortcut must give exactly these."""
    try:
        return shlex.split(text)
    except ValueError:
        return text.split()


def test_command_line_flags_of_every_real_line_are_shlex_flags():
    roots = [FIXTURES]
    lines = [
        line
        for root in roots
        for path in sorted(root.rglob("*"))
        if path.is_file()
        for line in path.read_text(encoding="utf-8", errors="replace").splitlines()
        if "--" in line
    ]
    # counted independently: the fixtures echo launch commands with --flags (grep -c -- ' --')
    assert sum(" --" in line for line in lines) > 50
    for line in lines:
        assert grammar._shell_words(line) == _words_by_shlex(line), line


@pytest.mark.parametrize(
    "text",
    [
        "python train.py --a 1 --b=2 --c",
        "python train.py --name 'x y' --z \"q r\"",
        "--a b\\ c --d",
        "--a\tb\r\n--c d",
        "--a\x0bb --c",  # vertical tab: str.split splits there, shlex does not
        "--a\xa0b --c",
        "--a\x1cb",
        "--a \u2003b",
        "--a 'open",
        "--a \\",
        "",
    ],
)
def test_command_line_flags_edge_cases(text):
    assert grammar._shell_words(text) == _words_by_shlex(text)


@settings(max_examples=500, deadline=None)
@given(
    joined(
        [
            "--",
            "-",
            "a",
            "b1",
            "=",
            " ",
            "\t",
            "\r",
            "\n",
            "'",
            '"',
            "\\",
            "\x0b",
            "\x0c",
            "\x1f",
            "\xa0",
            "\x85",
            "#",
            ";",
            "é",
        ],
        max_size=25,
    )
)
def test_command_line_flags_of_random_text_are_shlex_flags(text):
    assert grammar._shell_words(text) == _words_by_shlex(text)
