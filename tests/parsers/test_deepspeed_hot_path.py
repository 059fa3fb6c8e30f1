"""DeepSpeed's hot path reads exactly what its definitions read.

- ``throughput_records`` (the compiled ``_THROUGHPUT_LINE``) against the ``throughput_record`` grammar
  through ``scan``: every throughput line of the fixtures and the real logs, edge cases, random text.
- The shortcuts ``parse_line`` takes before calling a reader (the profiler window, the precision flags
  only on their own names, the JSON value reader only for its keys) change no fact or iteration.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from logstat.parsers import deepspeed
from logstat.parsers.base import RunBuilder

from tests.conftest import FIXTURES
from tests.parsers.feeding import feed_file, feed_lines
from tests.parsers.random_text import joined

THROUGHPUT_LINE = (
    "[2026-11-21 21:47:07,715] [INFO] [timer.py:264:stop] epoch=0/micro_step=8/global_step=4, "
    "RunningAvgSamplesPerSec=1821.7540278249066, CurrSamplesPerSec=1432.750178503156, "
    "MemAllocated=0.37GB, MaxMemAllocated=0.37GB"
)


def _by_grammar(text: str) -> list[tuple]:
    """What ``throughput_record`` reads, through ``scan`` (the path before the compiled pattern)."""
    return [
        (
            tokens["global_step"],
            tokens["curr_samples_per_sec"],
            tokens.get("mem_allocated_gb"),
            tokens.get("max_mem_allocated_gb"),
        )
        for tokens in deepspeed.scan(deepspeed.throughput_record, deepspeed._THROUGHPUT_ANCHOR, text)
    ]


def _same(text: str) -> None:
    got, want = list(deepspeed.throughput_records(text)), _by_grammar(text)
    # nan != nan: compare the reprs, which also tell int from float
    assert repr(got) == repr(want), f"{text!r}: compiled {got} != grammar {want}"


def _throughput_lines() -> list[str]:
    roots = [FIXTURES]
    lines = []
    for root in roots:
        for path in sorted(p for p in root.rglob("*") if p.is_file()):
            text = Path(path).read_text(encoding="utf-8", errors="replace")
            lines += [line for line in text.splitlines() if "SamplesPerSec=" in line]
    return lines


def test_every_real_throughput_line_reads_the_same():
    lines = _throughput_lines()
    for line in lines:
        _same(line)
    # grep -rc "SamplesPerSec=" fixtures: 4 lines (two CPU runs, global steps 4 and 6), one record each
    assert len(lines) >= 4
    assert sum(len(list(deepspeed.throughput_records(line))) for line in lines) == len(lines)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (THROUGHPUT_LINE, [(4, 1432.750178503156, 0.37, 0.37)]),
        (
            "epoch=0/micro_step=2/global_step=1, RunningAvgSamplesPerSec=1, CurrSamplesPerSec=2",
            [(1, 2.0, None, None)],
        ),
        # the memory part is all or nothing, as pyparsing's Optional
        (
            "epoch=0/micro_step=2/global_step=1, RunningAvgSamplesPerSec=1, CurrSamplesPerSec=2, MemAllocated=3GB",
            [(1, 2.0, None, None)],
        ),
        (
            "epoch= 1 /micro_step=\t2 /global_step= 3 ,RunningAvgSamplesPerSec=1e3 , CurrSamplesPerSec=-2.5 ,"
            " MemAllocated= 1 GB, MaxMemAllocated=2 GB",
            [(3, -2.5, 1.0, 2.0)],
        ),
        (
            "epoch=1/micro_step=2/global_step=3, RunningAvgSamplesPerSec=nan, CurrSamplesPerSec=INF",
            [(3, float("inf"), None, None)],
        ),
        ("epoch=1/micro_step=2/global_step=3, RunningAvgSamplesPerSec=1.2.3, CurrSamplesPerSec=4", []),
        ("epoch=1/micro_step=2/global_step=3, runningAvgSamplesPerSec=1, CurrSamplesPerSec=4", []),
        (
            "epoch=١/micro_step=2/global_step=3, RunningAvgSamplesPerSec=1, CurrSamplesPerSec=4",
            [],
        ),  # integer is ASCII
        (
            "epoch=1/micro_step=2/global_step=3, RunningAvgSamplesPerSec=1, CurrSamplesPerSec=١.5",
            [(3, 1.5, None, None)],
        ),
        # a number is one token: "0.37" is not shortened to let "GB," follow
        (
            "epoch=1/micro_step=2/global_step=3, RunningAvgSamplesPerSec=1, CurrSamplesPerSec=4, MemAllocated=0.3e7GB, MaxMemAllocated=1GB",
            [(3, 4.0, 3000000.0, 1.0)],
        ),
        (
            "epoch=x epoch=1/micro_step=2/global_step=3, RunningAvgSamplesPerSec=1, CurrSamplesPerSec=4"
            "epoch=2/micro_step=4/global_step=5, RunningAvgSamplesPerSec=1, CurrSamplesPerSec=6",
            [(3, 4.0, None, None), (5, 6.0, None, None)],
        ),
    ],
)
def test_throughput_edge_cases(text, expected):
    _same(text)
    assert repr(list(deepspeed.throughput_records(text))) == repr(expected)


_PIECES = (
    "epoch=",
    "/micro_step=",
    "/global_step=",
    ", RunningAvgSamplesPerSec=",
    ", CurrSamplesPerSec=",
    ", MemAllocated=",
    "GB, MaxMemAllocated=",
    "GB",
    "GB,",
    ",",
    "/",
    "=",
    "7",
    "12",
    " ",
    "\t",
    "\r",
    "\n",
    "1e-4",
    "-2.5",
    ".5",
    "5.",
    "nan",
    "Inf",
    "e",
    "+",
    "x",
)


@settings(max_examples=400, deadline=None)
@given(joined(_PIECES, max_size=30))
def test_random_throughput_like_text_reads_the_same(text):
    _same(text)


@settings(max_examples=300, deadline=None)
@given(
    st.integers(0, 170),
    st.sampled_from([" ", "  ", "\t", "", "\n"]),
    st.text("0123456789.,/= eGB-", max_size=8),
)
def test_real_throughput_line_with_changes_reads_the_same(cut, space, noise):
    start = THROUGHPUT_LINE.index("epoch=")
    position = start + cut
    _same(THROUGHPUT_LINE[:position] + space + noise + THROUGHPUT_LINE[position:])


# --- the shortcuts of parse_line -------------------------------------------------------------------

PROFILE_BLOCK = [
    "-------------------------- DeepSpeed Flops Profiler --------------------------",
    "Profile Summary at step 3:",
    "world size:                                                             2       ",
    "iter latency:                                                           392.2 us",
]
PROFILE_FLOPS = "FLOPS per GPU = 3 * fwd flops per GPU / iter latency:                   158.61 MFLOPS"


@pytest.mark.parametrize("gap", [0, 55, 56, 57, 200])
def test_the_profile_window_ends_where_it_did(gap):
    # header on line 1; "FLOPS per GPU" on line 4 + gap + 1 is read while it is at most 60 lines later
    lines = PROFILE_BLOCK + ["plain line"] * gap + [PROFILE_FLOPS]
    run = feed_lines(deepspeed.FAMILY, lines)
    inside = len(lines) - 1 <= 60
    assert (3 in run.iterations) == inside  # the profiled micro-batch's latency is no step time: not recorded
    assert run.iterations.get(3, {}).get("logged_tflops_per_gpu") == (158.61e6 / 1e12 if inside else None)
    assert run.facts["gpus"] == 2


def test_a_profile_of_an_earlier_file_still_opens_its_window_in_the_next():
    # the window is counted in line numbers of whichever file: a second file's first lines are inside it
    run = RunBuilder(path="job")
    for lineno, line in enumerate(PROFILE_BLOCK, 100):
        deepspeed.parse_line(line, lineno, run)
    deepspeed.parse_line("FLOPS per GPU = 3 * fwd flops per GPU / iter latency:  12.5 TFLOPS", 1, run)
    assert run.settle().iterations[3]["logged_tflops_per_gpu"] == 12.5


def _dump(*attributes: str) -> list[str]:
    tag = "[2021-05-26 04:38:20,033] [INFO] [config.py:752:print]"
    return [f"{tag} DeepSpeedEngine configuration:"] + [f"{tag}   {attribute}" for attribute in attributes]


def test_precision_read_on_its_own_lines_only():
    lines = _dump(
        "amp_enabled .................. False",
        "fp16_enabled ................. True",
        "gradient_clipping ............ 1.0",
        "bfloat16_enabled ............. False",
    )
    run = feed_lines(deepspeed.FAMILY, lines)
    assert run.facts["precision"] == "fp16"
    assert run.provenance["precision"] == "deepspeed:3"  # stated on the fp16_enabled line, not later


def test_precision_of_another_family_is_not_taken_by_later_dump_lines():
    run = RunBuilder(path="job")
    run.set_fact("precision", "bf16", "megatron", 1)
    for lineno, line in enumerate(
        _dump("fp16_enabled ................. True", "steps_per_print .............. 10"), 2
    ):
        deepspeed.parse_line(line, lineno, run)
    assert run.facts["precision"] == "bf16" and run.provenance["precision"] == "megatron:1"


def test_a_relaunched_engine_states_its_precision_again():
    lines = _dump("fp16_enabled ................. True") + _dump(
        "fp16_enabled ................. False", "bfloat16_enabled ............. True"
    )
    run = feed_lines(deepspeed.FAMILY, lines)
    assert run.facts["precision"] == "bf16" and run.provenance["precision"] == "deepspeed:5"


def test_json_value_lines_open_objects_for_any_key_and_read_theirs():
    lines = _dump("zero_config .................. {") + [
        '    "stage": 3, ',
        '    "unknown_block": {',
        '        "device": "cpu", ',
        "    }, ",
        '    "offload_param": {',
        '        "device": "cpu", ',
        "    }, ",
        '    "offload_optimizer": null',
        "}",
    ]
    run = feed_lines(deepspeed.FAMILY, lines)
    assert run.facts["zero_stage"] == 3
    assert run.facts["offload_param"] is True and run.provenance["offload_param"] == "deepspeed:8"
    assert run.facts["offload_optimizer"] is False
    assert deepspeed.NAME not in run.capturing


def test_user_config_json_lines_read_only_for_their_keys():
    lines = _dump("steps_per_print .............. 10", "json = {") + [
        '    "train_batch_size": 8.000000e+00, ',
        '    "steps_per_print": 10, ',
        '    "wall_clock_breakdown": false, ',
        '    "fp16": {',
        '        "loss_scale": 0, ',
        '        "enabled": true',
        "    }",
        "}",
        "after the dump",
    ]
    run = feed_lines(deepspeed.FAMILY, lines)
    assert run.facts["global_batch_size"] == 8 and run.provenance["global_batch_size"] == "deepspeed:4"
    assert run.facts["precision"] == "fp16" and run.provenance["precision"] == "deepspeed:9"
    assert deepspeed.NAME not in run.capturing


# --- the plain print record ------------------------------------------------------------------------

BENCH_HEAD = FIXTURES.parent / "bench-corpus" / "golden" / "inputs" / "head-big.out"


def _print_reads(text: str, *, plain: bool, monkeypatch: pytest.MonkeyPatch) -> tuple[int, list[tuple]]:
    """What ``_read_print_tags`` hands on for ``text``: its count and each ``_read_print_value`` call,
    with the one-search ``_PLAIN_PRINT_RECORD`` (``plain``) or the general path alone."""
    reads: list[tuple] = []
    with monkeypatch.context() as patch:
        patch.setattr(deepspeed, "_read_print_value", lambda run, state, *args: reads.append(args))
        if not plain:
            patch.setattr(deepspeed, "_PLAIN_PRINT_RECORD", re.compile(r"(?!)"))
        run = RunBuilder(path="job")
        count = deepspeed._read_print_tags(run, deepspeed._state(run), text, 7)
    return count, reads


def _same_print_reads(text: str, monkeypatch: pytest.MonkeyPatch) -> None:
    plain = _print_reads(text, plain=True, monkeypatch=monkeypatch)
    general = _print_reads(text, plain=False, monkeypatch=monkeypatch)
    assert plain == general, f"{text!r}: plain {plain} != general {general}"


def _print_lines() -> list[str]:
    roots = [FIXTURES]
    paths = [p for root in roots for p in sorted(root.rglob("*")) if p.is_file()]
    paths += [BENCH_HEAD] if BENCH_HEAD.is_file() else []
    lines = []
    for path in paths:
        text = Path(path).read_text(encoding="utf-8", errors="replace")
        lines += [line for line in text.splitlines() if ":print" in line]
    return lines


def test_every_real_print_line_reads_the_same(monkeypatch):
    lines = _print_lines()
    for line in lines:
        _same_print_reads(line, monkeypatch)
    # most real print lines take the one search (the test would pass, uselessly, if none did); a clean
    # checkout has 725 print lines (fixtures, the real logs included), the bench head adds many more when built
    plain = sum(1 for line in lines if deepspeed._PLAIN_PRINT_RECORD.search(line))
    assert len(lines) >= 700 and plain > len(lines) // 2


TAG = "[2021-05-26 04:38:20,033] [INFO] [config.py:752:print]"


@pytest.mark.parametrize(
    "record",
    [
        "   train_batch_size ............. 512   ",
        "   name ..... .5",
        "   name .......5",
        "   name  value  with  spaces",
        "   name ..... ",
        "   name .....",
        "   name  ",  # no value: the general path strips the record to "name", which has no filler
        "name   ",
        "   name  x ",
        "   name . value",
        "   name value",
        "   json = {",
        "   json  = {",
        "   json ..... {",
        " DeepSpeedEngine configuration:",
        " DeepSpeedEngine  configuration:",
        "   name ..... value\t",
        "   name\t..... value",
        "   name ..... [1, 2]",
        "   name ..... value[2021-05-26 04:38:20,034] [INFO] [engine.py:1:__init__] other",
        "   name ..... value[2021-05-26 04:38:20,034] [INFO] [config.py:752:print]   other ..... 1",
        "   name ..... value\xa0",
        "   name ..... value\x1c",
        "   name ..... välue",
        "   9name ..... value",
        "   name ..... value\r",
        "",
    ],
)
def test_print_record_edge_cases(record, monkeypatch):
    _same_print_reads(TAG + record, monkeypatch)
    _same_print_reads("[config.py:1:print_user_config]" + record, monkeypatch)


_PRINT_PIECES = (
    TAG,
    "[config.py:12:print_user_config]",
    ":print",
    "[2021-05-26 04:38:20,034]",
    " ",
    "  ",
    ".",
    "....",
    "\t",
    "\r",
    "\xa0",
    "\x1c",
    "name",
    "_x9",
    "7",
    "json = ",
    "DeepSpeedEngine configuration",
    "{",
    "}",
    "[",
    "]",
    "'a': 1,",
    "=",
    "é",
)


@settings(max_examples=400, deadline=None)
@given(joined(_PRINT_PIECES, max_size=20))
def test_random_print_like_text_reads_the_same(text):
    with pytest.MonkeyPatch.context() as monkeypatch:
        _same_print_reads(text, monkeypatch)


# --- the dismissal of an attribute the dump reader does not read -----------------------------------

_OPEN_JSON = f"{TAG}   zero_config .................. {{"

#: lines that leave the dump in each state ``_dismissible`` tells apart: no dump yet, a dump started,
#: a JSON value open (capture on), one whose capture the reader ended with its file, and a dump header
#: read while a value was open (its path reset, the capture still on).
_DUMP_STATES = {
    "no dump": [],
    "dump started": [f"{TAG} DeepSpeedEngine configuration:"],
    "json open": [f"{TAG} DeepSpeedEngine configuration:", _OPEN_JSON, '    "stage": 3, '],
    "capture ended by the reader": [f"{TAG} DeepSpeedEngine configuration:", _OPEN_JSON, "end of file"],
    "header inside a value": [_OPEN_JSON, f"{TAG} DeepSpeedEngine configuration:"],
}


def _after(lines: list[str], text: str, *, dismiss: bool, monkeypatch: pytest.MonkeyPatch) -> tuple:
    """Everything ``parse_line`` leaves in a run fed ``lines`` and then ``text``, with the dismissal
    of unread attributes (``dismiss``) or with every plain record handed to ``_read_print_value``."""
    with monkeypatch.context() as patch:
        if not dismiss:
            patch.setattr(deepspeed, "_dismissible", lambda *args: False)
        run = RunBuilder(path="job")
        for lineno, line in enumerate(lines, 1):
            if line == "end of file":
                run.capture(deepspeed.NAME, on=False)  # what the reader does at the end of a file
            else:
                deepspeed.parse_line(line, lineno, run)
        deepspeed.parse_line(text, len(lines) + 1, run)
    return (
        run.facts,
        run.provenance,
        run.iterations,
        run.families_seen,
        repr(run.state),
        run.capturing,
        run.capture_lines,
    )


def _same_after_dismissal(text: str, monkeypatch: pytest.MonkeyPatch) -> None:
    for state, lines in _DUMP_STATES.items():
        fast = _after(lines, text, dismiss=True, monkeypatch=monkeypatch)
        full = _after(lines, text, dismiss=False, monkeypatch=monkeypatch)
        assert fast == full, f"{text!r} after {state}: dismissed {fast} != read {full}"


def test_every_real_print_line_is_dismissed_exactly(monkeypatch):
    lines = sorted(set(_print_lines()))
    dismissed = 0
    for line in lines:
        _same_after_dismissal(line, monkeypatch)
        plain = deepspeed._PLAIN_PRINT_RECORD.search(line)
        dismissed += plain is not None and plain["name"] not in deepspeed._NAMES_READ
    # the fast path is taken (the test would pass, uselessly, if no line reached it)
    assert dismissed > len(lines) // 3


@pytest.mark.parametrize(
    "record",
    [
        "   steps_per_print .............. 10",
        "   steps_per_print .............. {",
        "   steps_per_print .............. {  ",
        "   steps_per_print .............. 10 ",
        "   steps_per_print .............. ",
        "   steps_per_print ..............",
        "   steps_per_print  {",
        "   steps_per_print .............. { 'a': 1 }",
        "   train_batch_size ............. 512",
        "   zero_config .................. {",
        "   fp16_enabled ................. True",
        "   json ......................... {",
        "   world_size ................... 2",
        "   name ..... value step=3, skipped=0 SamplesPerSec= UNIQUE_PARAMS=7",
    ],
)
def test_print_records_are_dismissed_exactly(record, monkeypatch):
    _same_after_dismissal(TAG + record, monkeypatch)


# --- the JSON key pattern ----------------------------------------------------------------------------

#: the definition of ``_JSON_KEY``: the value lazy, its trailing spaces left to the pattern's end.
_LAZY_JSON_KEY = re.compile(r'"(\w+)"\s*:\s*([^,\s][^,]*?)?\s*,?\s*$')


def _same_json_key(text: str) -> None:
    def read(pattern: re.Pattern[str]) -> tuple | None:
        match = pattern.search(text)
        return None if match is None else (match.start(), match.group(1), (match.group(2) or "").strip())

    assert read(deepspeed._JSON_KEY) == read(_LAZY_JSON_KEY), repr(text)


def test_every_real_json_line_reads_the_same_key():
    roots = [FIXTURES]
    paths = [p for root in roots for p in sorted(root.rglob("*")) if p.is_file()]
    paths += [BENCH_HEAD] if BENCH_HEAD.is_file() else []
    lines = set()
    for path in paths:
        text = Path(path).read_text(encoding="utf-8", errors="replace")
        lines.update(line.strip() for line in text.splitlines() if '":' in line)
    for line in lines:
        _same_json_key(line)
    assert len(lines) > 20


@settings(max_examples=500, deadline=None)
@given(joined(['"', "key", "stage", ":", ",", " ", "\t", "\n", "\xa0", "{", "}", "3", "null"], max_size=None))
def test_random_json_like_text_reads_the_same_key(text):
    _same_json_key(text)


# --- patterns opened on their literal, and _bool ------------------------------------------------------


def _config_lines() -> list[str]:
    roots = [FIXTURES]
    paths = [p for root in roots for p in sorted(root.rglob("*")) if p.is_file()]
    paths += [BENCH_HEAD] if BENCH_HEAD.is_file() else []
    lines = set()
    for path in paths:
        text = Path(path).read_text(encoding="utf-8", errors="replace")
        lines.update(line for line in text.splitlines() if "offload_" in line or "enabled=" in line)
    return sorted(lines)


#: the definitions of the keyed patterns: ``\b`` before the key, where re tries every position.
_WORD_KEY_DEFINITIONS = {
    **{key: (re.compile(rf"\b{key}=(\w+)"), pattern) for key, pattern in deepspeed._PYDANTIC_FLAGS.items()},
    **{
        key: (re.compile(rf"\b{key}=(None|\w+\([^)]*\))"), pattern)
        for key, pattern in deepspeed._ZERO_CONFIG_OFFLOADS.items()
    },
}


def _same_keyed_reads(text: str) -> None:
    for key, (definition, pattern) in _WORD_KEY_DEFINITIONS.items():
        want = [(m.span(), m.group(1)) for m in definition.finditer(text)]
        assert [(m.span(), m.group(1)) for m in pattern.finditer(text)] == want, (key, text)


def test_keyed_patterns_read_every_real_line_as_their_definitions():
    lines = _config_lines()
    for line in lines:
        _same_keyed_reads(line)
    assert any("offload_param=" in line for line in lines) and any("enabled=" in line for line in lines)


@settings(max_examples=400, deadline=None)
@given(
    joined(
        [
            "offload_param=",
            "offload_optimizer=",
            "enabled=",
            "None",
            "x",
            "_",
            "é",
            " ",
            "=",
            "(",
            ")",
            "True",
        ],
        max_size=12,
    )
)
def test_keyed_patterns_read_random_text_as_their_definitions(text):
    _same_keyed_reads(text)


def _bool_definition(text: str) -> bool | None:
    word = text.strip().split()[0].rstrip(",").lower() if text.strip() else ""
    return {"true": True, "false": False}.get(word)


@settings(max_examples=300, deadline=None)
@given(joined(["true", "False", "TRUE,", ",", " ", "\t", "\xa0", "\x1c", "x", "İ"], max_size=6))
def test_bool_reads_as_its_definition(text):
    assert deepspeed._bool(text) == _bool_definition(text)


# --- JSON values that can change nothing are not read --------------------------------------------------


def _fed(path: Path) -> tuple:
    run = feed_file(deepspeed.FAMILY, path)
    return run.facts, run.provenance, run.iterations, run.families_seen, run.state.get("parse_errors")


def test_skipping_settled_json_values_changes_no_result(monkeypatch):
    roots = [FIXTURES]
    paths = [p for root in roots for p in sorted(root.rglob("*")) if p.is_file()]
    skipped = []
    opened = deepspeed._read_print_value

    def count_skips(run, state, name, value, lineno):
        opened(run, state, name, value, lineno)
        skipped.append(value.endswith("{") and deepspeed.NAME not in run.capturing)

    for path in paths:
        with monkeypatch.context() as patch:
            patch.setattr(deepspeed, "_read_print_value", count_skips)
            fast = _fed(path)
        with monkeypatch.context() as patch:
            patch.setattr(deepspeed, "_json_value_facts", lambda name: frozenset(["a fact never set"]))
            every_value_read = _fed(path)
        assert fast == every_value_read, path
    assert sum(skipped) >= 2  # the skip is taken (the fixtures' DeepSpeed dumps end with a settled json = {)


def test_a_user_config_is_read_while_a_fact_it_states_is_open():
    settled = _dump(
        "fp16_enabled ................. True",
        "train_batch_size ............. 8",
        "train_micro_batch_size_per_gpu  4",
        "gradient_accumulation_steps .. 2",
        "zero_optimization_stage ...... 1",
        "zero_config .................. offload_param=None offload_optimizer=None",
        "json = {",
    )
    run = feed_lines(deepspeed.FAMILY, [*settled, '    "train_batch_size": 16, ', "}"])
    assert deepspeed.NAME not in run.capturing and run.facts["global_batch_size"] == 8
    # without its gradient_accumulation_steps line, the dump leaves gas to the user config
    unsettled = [line for line in settled if "gradient_accumulation_steps" not in line]
    run = feed_lines(deepspeed.FAMILY, [*unsettled, '    "gradient_accumulation_steps": 2, '])
    assert deepspeed.NAME in run.capturing and run.facts["gas"] == 2
    assert run.provenance["gas"] == f"deepspeed:{len(unsettled) + 1}"


def _first_label_by_loop(stripped: str) -> str | None:
    """The definition ``_PROFILE_LABEL`` replaced: the first label of the table the line starts with."""
    return next((label for label in deepspeed._PROFILE_LABELS if stripped.startswith(label)), None)


@pytest.mark.parametrize(
    "text",
    [
        *PROFILE_BLOCK,
        "params of model = params per GPU * mp_size:                             2.63 K  ",
        "params of model:   1.2 B",
        "params of model = 3",
        "data parallel size:   2",
        "samples/second:    20397.83",
        "  world size: 4",
        "world size",
        "",
    ],
)
def test_profile_label_is_the_first_label_of_the_table(text):
    stripped = text.strip()
    match = deepspeed._PROFILE_LABEL.match(stripped)
    assert (None if match is None else match.group()) == _first_label_by_loop(stripped)


@settings(max_examples=300, deadline=None)
@given(joined([*deepspeed._PROFILE_LABELS, "params of model", " ", "=", ":", "x"], max_size=5))
def test_profile_label_of_random_text_is_the_first_label_of_the_table(text):
    stripped = text.strip()
    match = deepspeed._PROFILE_LABEL.match(stripped)
    assert (None if match is None else match.group()) == _first_label_by_loop(stripped)
