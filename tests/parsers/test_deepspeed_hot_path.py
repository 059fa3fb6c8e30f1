"""DeepSpeed's hot path on real lines and edge cases.

- ``throughput_records`` (``_THROUGHPUT_LINE``) on every throughput line of the fixtures and edge cases.
- The shortcuts ``parse_line`` takes before calling a reader (the profiler window, the precision flags
  only on their own names, the JSON value reader only for its keys) change no fact or iteration.
- The config printer's lines reach the family only where they can change what it records (its markers).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from logstat.parsers import deepspeed, grammar
from logstat.parsers.base import RunBuilder
from logstat.parsers.kinds import order_key
from logstat.parsers.source import records

from tests.conftest import FIXTURES
from tests.parsers.feeding import feed_file, feed_lines
from tests.parsers.random_text import joined

THROUGHPUT_LINE = (
    "[2026-11-21 21:47:07,715] [INFO] [timer.py:264:stop] epoch=0/micro_step=8/global_step=4, "
    "RunningAvgSamplesPerSec=1821.7540278249066, CurrSamplesPerSec=1432.750178503156, "
    "MemAllocated=0.37GB, MaxMemAllocated=0.37GB"
)


def _throughput_lines() -> list[str]:
    roots = [FIXTURES]
    lines = []
    for root in roots:
        for path in sorted(p for p in root.rglob("*") if p.is_file()):
            text = Path(path).read_text(encoding="utf-8", errors="replace")
            lines += [line for line in text.splitlines() if "SamplesPerSec=" in line]
    return lines


def test_every_real_throughput_line_is_read_once():
    lines = _throughput_lines()
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
    assert repr(list(deepspeed.throughput_records(text))) == repr(expected)


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


# --- the dump lines that reach the family ---------------------------------------------------------

BENCH_HEAD = FIXTURES.parent / "bench-corpus" / "golden" / "inputs" / "head-big.out"
TAG = "[2021-05-26 04:38:20,033] [INFO] [config.py:752:print]"


def _paths() -> list[Path]:
    paths = [p for p in sorted(FIXTURES.rglob("*")) if p.is_file()]
    return paths + ([BENCH_HEAD] if BENCH_HEAD.is_file() else [])


def _routed(record: str) -> bool:
    """Whether the reader hands ``record`` to the family (outside a capture)."""
    return any(marker in record for marker in deepspeed.FAMILY.markers)


def _reads(record: str) -> bool:
    """Whether a print record of ``record`` is the dump's header or an attribute the family reads."""
    tags = list(deepspeed._PRINT_TAG.finditer(record))
    for index, tag in enumerate(tags):
        body = record[tag.end() : tags[index + 1].start() if index + 1 < len(tags) else len(record)]
        field = ("json", "") if "json = " in body else grammar.dotted(body.strip())
        if body.strip().startswith(deepspeed._DUMP_HEADER) or (field and field[0] in deepspeed._NAMES_READ):
            return True
    return False


def _print_records() -> list[str]:
    found = set()
    for path in _paths():
        for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
            if ":print" in line:
                found.update(record for record in records(line) if deepspeed._PRINT_TAG.search(record))
    return sorted(found)


def _every_record(path: Path) -> RunBuilder:
    """The family fed every record of ``path``: no marker decides which."""
    run = RunBuilder(path=str(path))
    run.files.append(str(path))
    for lineno, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
        for index, record in enumerate(records(line)):
            run.position, run.event_index = order_key(0, lineno, index), 0
            deepspeed.parse_line(record, lineno, run)
    return run.settle()


def test_only_the_dump_lines_the_family_reads_reach_it():
    routed_by_reads = {(True, True): 0, (False, False): 0}
    for record in _print_records():
        reads, routed = _reads(record), _routed(record)
        assert reads == routed, f"{record!r}: reads {reads}, routed {routed}"
        routed_by_reads[reads, routed] += 1
    # most of a dump is attributes the family does not read: they stay in polars
    assert routed_by_reads[False, False] > routed_by_reads[True, True] > 50
    # and what the family records from the lines it is handed is what it records from every line
    for path in (p for p in sorted(FIXTURES.rglob("*")) if p.is_file() and p.stat().st_size < 5e6):
        routed_run, every = feed_file(deepspeed.FAMILY, path), _every_record(path)
        assert (routed_run.facts, routed_run.provenance, routed_run.iterations) == (
            every.facts,
            every.provenance,
            every.iterations,
        ), path
        assert bool(routed_run.families_seen) == bool(every.families_seen), path


@settings(max_examples=500, deadline=None)
@given(
    st.sampled_from(["", " ", "   ", "\t"]),
    st.sampled_from(sorted(deepspeed._NAMES_READ | {"steps_per_print", "zero_allow_untested_optimizer"})),
    joined([" ", "\t", ".", "..."], min_size=1, max_size=5),
    joined(["8", "True", "{", " ", "x", "[1, 2]"], max_size=3),
)
def test_a_dump_line_reaches_the_family_if_it_names_an_attribute_the_family_reads(
    indent, name, filler, value
):
    """DeepSpeed's printer writes spaces and dots between a name and its value; the reader takes tabs
    too (other whitespace right after a name is no printer's, and is not routed)."""
    record = f"{TAG}{indent}{name}{filler}{value}"
    if name not in deepspeed._NAMES_READ:
        assert not _routed(record), repr(record)
    elif _reads(record):
        assert _routed(record), repr(record)
