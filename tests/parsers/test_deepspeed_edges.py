"""DeepSpeed's records at their edges, through the reader: throughput and step records, the profiler's
window, the dump's precision flags and its JSON values, and the markers that bring the dump's lines.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import polars as pl
import pytest
from logstat.parsers import deepspeed, megatron, source
from logstat.parsers.base import RunBuilder
from logstat.parsers.reader import RunFiles, read_settled

from tests.conftest import FIXTURES
from tests.parsers.feeding import feed_file, feed_lines

THROUGHPUT_LINE = (
    "[2026-11-21 21:47:07,715] [INFO] [timer.py:264:stop] epoch=0/micro_step=8/global_step=4, "
    "RunningAvgSamplesPerSec=1821.7540278249066, CurrSamplesPerSec=1432.750178503156, "
    "MemAllocated=0.37GB, MaxMemAllocated=0.37GB"
)


def _rows(lines: list[str]) -> dict[int, tuple]:
    """step -> (samples/s, MiB allocated, max MiB allocated) of the rows the family reads from ``lines``."""
    run = feed_lines(deepspeed.FAMILY, lines)
    return {
        step: (row.get("samples_per_sec"), row.get("mem_allocated_mb"), row.get("mem_max_allocated_mb"))
        for step, row in run.iterations.items()
    }


def test_every_real_throughput_line_is_read_once():
    paths = [p for p in sorted(FIXTURES.rglob("*")) if p.is_file() and p.suffix in (".log", ".out")]
    lines = [
        line for p in paths for line in p.read_text(errors="replace").splitlines() if "SamplesPerSec=" in line
    ]
    # grep -rh "SamplesPerSec=" fixtures: the two CPU runs' global steps 4 and 6, one record a line
    assert len(lines) >= 4
    assert len(_rows(lines)) == len({line.split("global_step=")[1].split(",")[0] for line in lines})


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (THROUGHPUT_LINE, {4: (1432.750178503156, 0.37 * 1024, 0.37 * 1024)}),
        (
            "epoch=0/micro_step=2/global_step=1, RunningAvgSamplesPerSec=1, CurrSamplesPerSec=2",
            {1: (2.0, None, None)},
        ),
        # the memory part is all or nothing
        (
            "epoch=0/micro_step=2/global_step=1, RunningAvgSamplesPerSec=1, CurrSamplesPerSec=2, MemAllocated=3GB",
            {1: (2.0, None, None)},
        ),
        (
            "epoch= 1 /micro_step=\t2 /global_step= 3 ,RunningAvgSamplesPerSec=1e3 , CurrSamplesPerSec=-2.5 ,"
            " MemAllocated= 1 GB, MaxMemAllocated=2 GB",
            {3: (-2.5, 1024.0, 2048.0)},
        ),
        (
            "epoch=1/micro_step=2/global_step=3, RunningAvgSamplesPerSec=nan, CurrSamplesPerSec=INF",
            {3: (float("inf"), None, None)},
        ),
        ("epoch=1/micro_step=2/global_step=3, RunningAvgSamplesPerSec=1.2.3, CurrSamplesPerSec=4", {}),
        ("epoch=1/micro_step=2/global_step=3, runningAvgSamplesPerSec=1, CurrSamplesPerSec=4", {}),
        # the step counters are ASCII digits
        ("epoch=١/micro_step=2/global_step=3, RunningAvgSamplesPerSec=1, CurrSamplesPerSec=4", {}),
        # a number in other digits is one (the pattern's \d), but polars reads ASCII numbers only: none
        (
            "epoch=1/micro_step=2/global_step=3, RunningAvgSamplesPerSec=1, CurrSamplesPerSec=١.5",
            {3: (None, None, None)},
        ),
        # a number is one token: "0.3e7" is not shortened to let "GB," follow
        (
            "epoch=1/micro_step=2/global_step=3, RunningAvgSamplesPerSec=1, CurrSamplesPerSec=4, "
            "MemAllocated=0.3e7GB, MaxMemAllocated=1GB",
            {3: (4.0, 3000000.0 * 1024, 1024.0)},
        ),
        (
            "epoch=x epoch=1/micro_step=2/global_step=3, RunningAvgSamplesPerSec=1, CurrSamplesPerSec=4"
            "epoch=2/micro_step=4/global_step=5, RunningAvgSamplesPerSec=1, CurrSamplesPerSec=6",
            {3: (4.0, None, None), 5: (6.0, None, None)},
        ),
    ],
)
def test_throughput_edge_cases(text, expected):
    assert repr(_rows([text])) == repr(expected)


def test_every_real_step_line_is_read_once():
    paths = [p for p in sorted(FIXTURES.rglob("*")) if p.is_file() and p.suffix in (".out", ".err", ".log")]
    # as the reader sees them: without colour codes (fixtures/ansi/)
    texts = [re.sub(source.ESCAPE, "", p.read_bytes().decode("utf-8", errors="replace")) for p in paths]
    lines = [line for text in texts for line in text.splitlines() if "step=" in line]
    # counted independently: DeepSpeed's plain "step=N, skipped=M" progress lines (checked with grep), the
    # steps but 0 (the engine's start)
    plain = re.compile(r"(?:^|[^A-Za-z0-9_/])step=([0-9]+), skipped=[0-9]+, lr=\[")
    steps = [int(step) for line in lines for step in plain.findall(line)]
    assert len(steps) >= 18
    # each line a run of its own: a row per step record but step 0 (a step record's row has its skips)
    rows = [feed_lines(deepspeed.FAMILY, [line]).iterations for line in lines]
    assert [step for read in rows for step, row in read.items() if "skipped" in row] == [
        s for s in steps if s
    ]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("[Rank 0] step=10, skipped=2, lr=[5e-05], mom=[[0.9, 0.999]]", {10: (2, 5e-05)}),
        ("step=3, skipped=0, lr=[0.0001, 0.0001], mom=[(0.9, 0.999)]", {3: (0, 0.0001)}),
        ("step=3 , skipped=\t1 , lr=[ 2.5e-4 , 1 ]", {3: (1, 0.00025)}),
        ("step = 3, skipped=1, lr=[1]", {}),
        ("step=4, skipped=0, lr=[]", {4: (0, None)}),
        ("step=4, skipped=0, lr=[ ]", {4: (0, None)}),
        ("step=5, skipped=0, lr=[NaN]", {5: (0, float("nan"))}),
        ("step=5, skipped=0, lr=[-Inf, 1]", {5: (0, float("-inf"))}),
        ("step=5, skipped=0, lr=[1.0,]", {}),  # a trailing comma is no list
        ("step=5, skipped=0, lr=[1.0.2]", {}),
        ("step=5, Skipped=0, lr=[1.0]", {}),  # the literals keep their case
        ("global_step=5, skipped=0, lr=[1]", {}),
        ("micro/step=5, skipped=0, lr=[1]", {}),
        # the second record's skips are those since the first's
        ("step=x step=6, skipped=1, lr=[2]step=7, skipped=3, lr=[3]", {6: (1, 2.0), 7: (2, 3.0)}),
        ("step=٣, skipped=0, lr=[1]", {}),  # the counters are ASCII digits
        # a number in other digits is one (the pattern's \d), but polars reads ASCII numbers only: none
        ("step=8, skipped=0, lr=[١.5]", {8: (0, None)}),
    ],
)
def test_step_record_values(text, expected):
    run = feed_lines(deepspeed.FAMILY, [text])
    got = {step: (row.get("skipped"), row.get("lr")) for step, row in run.iterations.items()}
    assert repr(got) == repr(expected)


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
def test_scaled_values_of_the_profiler(text, unit, expected):
    assert repr(pl.select(deepspeed._scaled(pl.lit(text), unit)).item()) == repr(expected)


@pytest.mark.parametrize(
    ("text", "steps"),
    [
        ("[Rank 0] step=3, skipped=0, lr=[0.1]", [3]),
        ("xstep=3, skipped=0, lr=[0.1]", []),  # a word character before step= : another field
        ("a/step=3, skipped=0, lr=[0.1]", []),
        ("=step=3, skipped=0, lr=[0.1]", [3]),
        ("step=step=3, skipped=0, lr=[0.1]", [3]),
        ("step=3 ,\tskipped=0, lr=[ ]", []),  # ", skipped=" with one space
        ("step=3\t, skipped= 0 , lr=[ 1e-3 , 2 ]", [3]),
        ("step=3, skipped=0, lr=[0.1]step=4, skipped=0, lr=[0.2]", [3, 4]),
    ],
)
def test_step_record_edges(text, steps):
    assert sorted(feed_lines(deepspeed.FAMILY, [text]).iterations) == steps


# --- the profiler's window -----------------------------------------------------------------------------

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


def test_a_new_profile_header_starts_a_new_window_without_a_step():
    lines = PROFILE_BLOCK + ["-------- DeepSpeed Flops Profiler --------", PROFILE_FLOPS]
    assert feed_lines(deepspeed.FAMILY, lines).iterations == {}


def test_a_profile_of_an_earlier_file_still_opens_its_window_in_the_next(tmp_path):
    # the window is counted in line numbers of whichever file: the .err's first lines are inside the .out's
    out, err = tmp_path / "job-3.out", tmp_path / "job-3.err"
    out.write_text("".join(f"{line}\n" for line in ["x"] * 99 + PROFILE_BLOCK))
    err.write_text("FLOPS per GPU = 3 * fwd flops per GPU / iter latency:  12.5 TFLOPS\n")
    run = read_settled([RunFiles(key=str(out), files=(out, err))], [deepspeed.FAMILY])[0].run
    assert run.iterations[3]["logged_tflops_per_gpu"] == 12.5
    assert run.iterations[3]["line"] == 101  # the summary's step line, in the .out


# --- the dump: precision flags --------------------------------------------------------------------------

TAG = "[2021-05-26 04:38:20,033] [INFO] [config.py:752:print]"


def _dump(*attributes: str) -> list[str]:
    return [f"{TAG} DeepSpeedEngine configuration:"] + [f"{TAG}   {attribute}" for attribute in attributes]


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


def test_precision_of_another_family_is_not_taken_by_later_dump_lines(tmp_path):
    log = tmp_path / "job.log"
    lines = ["using torch.bfloat16 for parameters ...", *_dump("fp16_enabled ................. True")]
    log.write_text("".join(f"{line}\n" for line in lines))
    run = read_settled([RunFiles(key=str(log), files=(log,))], [megatron.FAMILY, deepspeed.FAMILY])[0].run
    assert run.facts["precision"] == "bf16" and run.provenance["precision"] == "megatron:1"


def test_a_relaunched_engine_states_its_precision_again():
    lines = _dump("fp16_enabled ................. True") + _dump(
        "fp16_enabled ................. False", "bfloat16_enabled ............. True"
    )
    run = feed_lines(deepspeed.FAMILY, lines)
    assert run.facts["precision"] == "bf16" and run.provenance["precision"] == "deepspeed:5"


@pytest.mark.parametrize(
    ("flags", "precision"),
    [
        (["fp16_enabled ................. False", "bf16_enabled ................. False"], "fp32"),
        (["fp16_enabled ................. False"], None),  # no bf16 flag stated: not known to be fp32
        (["fp16_enabled ................. maybe", "bf16_enabled ................. False"], None),
        (
            ["float16_config ............... enabled=False", "bfloat16_config .............. enabled=False"],
            "fp32",
        ),
        (["fp16_enabled ................. True", "fp16_enabled ................. maybe"], "fp16"),
    ],
)
def test_fp32_is_read_at_json_when_no_flag_is_on(flags, precision):
    run = feed_lines(deepspeed.FAMILY, [*_dump(*flags), f"{TAG}   json = {{", "}"])
    assert run.facts.get("precision") == precision
    if precision == "fp32":
        assert run.provenance["precision"] == f"deepspeed:{len(flags) + 2}"


# --- the dump: JSON values ------------------------------------------------------------------------------


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


def test_user_config_json_lines_read_only_for_their_keys():
    lines = _dump("steps_per_print .............. 10", "json = {") + [
        '    "train_batch_size": 8.000000e+00, ',
        '    "steps_per_print": 10, ',
        '    "wall_clock_breakdown": false, ',
        '    "fp16": {',
        '        "loss_scale": 0, ',
        '        "enabled": true',
        "    }",
        '    "train_micro_batch_size_per_gpu": 2',  # after "fp16" closed: at the top again
        "}",
        '    "gradient_accumulation_steps": 4',  # after the value closed
        "after the dump",
    ]
    run = feed_lines(deepspeed.FAMILY, lines)
    assert run.facts["global_batch_size"] == 8 and run.provenance["global_batch_size"] == "deepspeed:4"
    assert run.facts["precision"] == "fp16" and run.provenance["precision"] == "deepspeed:9"
    assert run.facts["micro_batch_size"] == 2
    assert "gas" not in run.facts


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
    # within a dump the first statement wins: the attribute's 8, not json's 16
    run = feed_lines(deepspeed.FAMILY, [*settled, '    "train_batch_size": 16, ', "}"])
    assert run.facts["global_batch_size"] == 8 and run.provenance["global_batch_size"] == "deepspeed:3"
    # without its gradient_accumulation_steps line, the dump leaves gas to the user config
    unsettled = [line for line in settled if "gradient_accumulation_steps" not in line]
    run = feed_lines(deepspeed.FAMILY, [*unsettled, '    "gradient_accumulation_steps": 2, '])
    assert run.facts["gas"] == 2
    assert run.provenance["gas"] == f"deepspeed:{len(unsettled) + 1}"


@pytest.mark.parametrize(
    ("between", "read"),
    [
        ([], True),
        (["plain line"] * 298, True),  # the key on line 300 after the attribute
        (["plain line"] * 299, False),  # on line 301
        ([f"{TAG}   steps_per_print .............. 10"], False),  # a printer's record that names something
        ([f"{TAG} names nothing"], True),
        (["[Rank 0] step=2, skipped=0, lr=[0.1]", "UNIQUE_PARAMS=1000"], True),  # other records do not end it
    ],
)
def test_a_json_value_ends_at_the_printer_or_after_300_lines(between, read):
    lines = [
        f"{TAG}   zero_config .................. {{",
        '    "offload_param": {',
        *between,
        '        "device": "cpu",',
    ]
    run = feed_lines(deepspeed.FAMILY, lines)
    assert run.facts.get("offload_param") is (True if read else None)


def test_a_json_value_is_read_across_glued_and_prefixed_lines():
    lines = [
        f"[default0]:{TAG}   zero_config .................. {{[default1]:some other rank's line",
        '12:     "offload_optimizer": {',
        '[default1]:noise[default0]:        "device": "nvme",',
        "12:     },",
        '12:     "stage": 2,',  # in zero_config again
        "12: }",
        '12:     "offload_param": null,',  # after the value closed
    ]
    run = feed_lines(deepspeed.FAMILY, lines)
    assert run.facts["offload_optimizer"] is True and run.provenance["offload_optimizer"] == "deepspeed:3"
    assert run.facts["zero_stage"] == 2
    assert "offload_param" not in run.facts


# --- the markers: the dump's lines that reach the family ------------------------------------------------


def _read(family, path: Path) -> RunBuilder:
    return read_settled([RunFiles(key=str(path), files=(path,))], [family])[0].run


def test_the_markers_bring_every_printer_record_that_matters():
    """The family is marked by the dump's header and the names it is read for, not by the printer's tag:
    what it records is what it records when every printer's record is marked."""
    every_printer_record = dataclasses.replace(
        deepspeed.FAMILY, markers=(*deepspeed.FAMILY.markers, ":print")
    )
    paths = [p for p in sorted(FIXTURES.rglob("*")) if p.is_file() and p.stat().st_size < 5e6]
    compared = 0
    for path in paths:
        routed, every = _read(deepspeed.FAMILY, path), _read(every_printer_record, path)
        assert (routed.facts, routed.provenance, routed.iterations) == (
            every.facts,
            every.provenance,
            every.iterations,
        ), path
        assert bool(routed.families_seen) == bool(every.families_seen), path
        compared += ":print" in path.read_text(errors="replace")
    assert compared >= 10  # the fixtures with a DeepSpeed dump


def test_no_record_is_left_to_python():
    assert deepspeed.FAMILY.parse_line is None
    run = feed_file(deepspeed.FAMILY, FIXTURES / "deepspeed" / "ds_zero3_offload_bf16_2cpu.log")
    assert run.families_seen[deepspeed.NAME] > 0


def test_zero_inits_count_of_the_model_it_built_is_the_logged_size():
    # deepspeed/runtime/zero/partition_parameters.py, zero.Init's __exit__ on rank 0 (via pdsh)
    built = (
        "worker-0: [2024-04-17 08:13:50,000] [INFO] [partition_parameters.py:348:__exit__] "
        "finished initializing model - num_params = 363, num_elems = 13.02B"
    )
    run = feed_lines(deepspeed.FAMILY, ["worker-0: starting", built, built.replace("13.02", "0.00")])
    assert run.facts["logged_model_size"] == 13.02
    assert run.provenance["logged_model_size"] == "deepspeed:2"
    # before 0.9: the parameters' elements, in billions, alone
    older = "[2023-01-24 09:00:00,000] [INFO] [partition_parameters.py:415:__exit__] finished initializing model with 68.98B parameters"
    assert feed_lines(deepspeed.FAMILY, [older]).facts["logged_model_size"] == 68.98


def test_deepspeed_chats_throughput_line_states_the_model_size_and_sequence_length():
    # dschat/utils/perf.py print_throughput, every step of DeepSpeed-Chat's SFT and reward model training
    line = (
        "Model Parameters: 1.316 B, Latency: 0.36s, TFLOPs: 11.34, Samples/sec: 22.12, Time/seq 0.05s, "
        "Batch Size: 8, Sequence Length: 512"
    )
    run = feed_lines(deepspeed.FAMILY, ["starting", line, line.replace("0.36s", "0.37s")])
    assert (run.facts["logged_model_size"], run.facts["seq_len"]) == (1.316, 512)
    assert run.provenance["seq_len"] == "deepspeed:3"  # restated every step: the last
    # a user's own print of a count is no DeepSpeed-Chat line
    assert feed_lines(deepspeed.FAMILY, ["Model Parameters: 1.316 B"]).facts == {}
