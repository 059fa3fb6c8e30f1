"""The seed's tables from hand-built runs frames (schema of logstat.parsers.schema)."""

import polars as pl
import pytest
from logstat.analytics.tables import COLUMNS, parse_columns, render_tables
from logstat.parsers.schema import RUNS_SCHEMA, SUMMARY_SCHEMA

SCHEMA = {**RUNS_SCHEMA, **SUMMARY_SCHEMA}
SOURCE = "median of {} logged step times after the first 1"


def run(**fields) -> dict:
    return fields


def frame(*rows: dict) -> pl.DataFrame:
    return pl.DataFrame(list(rows), schema=SCHEMA)


MEG_52B = run(
    path="/logs/meg_gpt2_perf_n16.out",
    family="megatron",
    status="ok",
    gpus=64,
    tp=4,
    pp=16,
    dp=1,
    gas=256,
    micro_batch_size=4,
    global_batch_size=1024,
    seq_len=1024,
    model_size_b=51.966533632,
    sec_per_iter=129.0,
    # 51.966533632 * 8 * 1024 * 1024 / (129 * 64e3) = 52.80
    tflops_per_gpu=51.966533632 * 8 * 1024 * 1024 / (129 * 64e3),
    tokens_per_sec=1024 * 1024 / 129,
    mfu=52.80 / 125,
    warmup_skipped=1,
    sec_per_iter_source=SOURCE.format(7),
)
MEG_18B = run(
    path="/logs/meg_18b.out",
    family="megatron",
    status="ok",
    gpus=16,
    dp=1,
    pp=8,
    gas=64,
    micro_batch_size=4,
    global_batch_size=256,
    model_size_b=18.1,
    sec_per_iter=90.46,
    tflops_per_gpu=26.12,
    warmup_skipped=1,
    sec_per_iter_source=SOURCE.format(3),
)
MEG_FAILED = run(path="/logs/meg_oom.out", family="megatron", status="failed", gpus=32, model_size_b=7.5)
HF = run(
    path="/logs/hf.out",
    family="hf-trainer",
    status="ok",
    gpus=64,
    zero_stage=3,
    offload_optimizer=True,
    offload_param=False,
    micro_batch_size=8,
    global_batch_size=512,
    model_size_b=0.35,
    sec_per_iter=0.6613,
    tflops_per_gpu=9.96,
    sec_per_iter_source="global batch / final train_samples_per_second",
)


def test_one_table_per_stack_sorted_by_gpus_with_the_seed_columns():
    text = render_tables(frame(HF, MEG_52B, MEG_FAILED, MEG_18B))
    assert text.split("\n")[:8] == [
        "### Megatron",
        "",
        "| GPUs | Size |  DP |  PP | PP Chunks | Mic-BS | Glob-BS | Throughput | TFlops | Notes                 |",
        "| ---: | ---: | --: | --: | --------: | -----: | ------: | ---------: | -----: | --------------------- |",
        "|   16 |  18B |   1 |   8 |        64 |      4 |     256 |      90.5s |   26.1 | meg_18b.out           |",
        "|   32 | 7.5B |     |     |           |        |         |       fail |        | meg_oom.out (failed)  |",
        "|   64 |  52B |   1 |  16 |       256 |      4 |    1024 |       129s |   52.8 | meg_gpt2_perf_n16.out |",
        "",
    ]
    assert "### HF Trainer + DeepSpeed" in text
    hf_rows = [line for line in text.split("\n") if "hf.out" in line]
    assert hf_rows == [
        "|   64 | 350M |    3 | Y        | N        |      8 |     512 |     0.661s |   10.0 | hf.out |"
    ]


def test_legend_names_the_statistic_and_the_formula():
    text = render_tables(frame(MEG_52B, MEG_18B, HF))
    legends = [line for line in text.split("\n") if line.startswith("_")]
    assert len(legends) == 2
    assert legends[0].startswith(
        "_Throughput = seconds per iteration (one global batch): median of the logged step times after the first 1;"
    )
    assert "seed formula `Size * f * 2 * seq * Glob-BS / (Throughput * GPUs * 1e3)`, f = 4" in legends[0]
    assert "global batch / final train_samples_per_second" in legends[1]


def test_chosen_columns_apply_to_every_table():
    columns = parse_columns("gpus, Size,TFlops,MFU,Days 100B,GPU-days 100B")
    assert columns == ("GPUs", "Size", "TFlops", "MFU", "Days 100B", "GPU-days 100B")
    text = render_tables(frame(MEG_52B, HF), columns=columns)
    # 100e9 / (1048576 / 129) / 86400 = 142.4 days, * 64 = 9113 GPU-days; MFU 52.8 / 125 = 42.2%
    assert "|   64 |  52B |   52.8 | 42.2% |       142 |          9113 |" in text
    assert "Days 100B = 100e9 / tokens per second / 86400 (seed 000)" in text
    assert text.count("| GPUs | Size | TFlops |") == 2


def test_unknown_column_is_named_with_the_valid_ones():
    with pytest.raises(ValueError, match=r"unknown column\(s\) Speed; choose from GPUs, Size, TP"):
        parse_columns("GPUs,Speed")
    assert parse_columns(None) is None


def test_pipes_in_cells_are_escaped_and_the_table_stays_rectangular():
    odd = dict(MEG_18B, path="/logs/a|b.out")
    lines = [line for line in render_tables(frame(odd)).split("\n") if line.startswith("|")]
    assert "a\\|b.out" in lines[2]
    widths = {len(line) for line in lines}
    assert len(widths) == 1


def test_unknown_family_gets_its_own_table_and_empty_frame_prints_nothing():
    text = render_tables(frame(dict(MEG_18B, family="nanogpt")))
    assert text.startswith("### Other (nanogpt)\n")
    assert render_tables(frame()) == ""


def test_every_column_renders_on_a_frame_of_nulls():
    nulls = frame(run(path="/x.out"))
    headers = [c.header for c in COLUMNS.values()]
    text = render_tables(nulls, columns=headers)
    row = [line for line in text.split("\n") if line.startswith("|")][2]
    cells = dict(zip(headers, (c.strip() for c in row.strip("|").split("|")), strict=True))
    assert cells.pop("Throughput") == "fail"
    assert cells.pop("Notes") == "x.out"
    assert set(cells.values()) == {""}


def test_an_ok_run_without_step_times_is_not_marked_fail():
    epochs_only = frame(run(path="/mingpt.log", family="mingpt", status="ok", gpus=8))
    row = [line for line in render_tables(epochs_only).split("\n") if line.startswith("|")][2]
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert "fail" not in cells
    assert cells[0] == "8" and cells[-1] == "mingpt.log"


def test_size_of_a_model_under_a_million_parameters_is_in_thousands_not_0M():
    # the tiny DDP spec: 2*(12*64^2 + 13*64) + 128*64 + 32*64 + 2*64 = 110,336 parameters
    tiny = frame(run(path="/tiny.log", family="megatron", status="ok", gpus=2, model_size_b=110_336 / 1e9))
    text = render_tables(tiny, columns=("GPUs", "Size", "Notes"))
    assert "|    2 | 110K | tiny.log |" in text
    assert "0M" not in text


def test_memory_prediction_beside_the_logged_peak_and_the_utilizations():
    # hand-set summary values: 41.27 GB predicted, 60.5 GB logged (ratio 0.682), MFU 0.3123, HFU 0.4164
    zero = dict(
        MEG_18B,
        model_state_gb_pred=41.27,
        mem_logged_gb=60.5,
        mem_pred_ratio=41.27 / 60.5,
        mfu=0.3123,
        hfu=0.4164,
        logged_tflops_per_gpu=97.46,
    )
    columns = parse_columns("GPUs,TFlops Logged,MFU,HFU,Mem pred/logged")
    assert columns == ("GPUs", "TFlops Logged", "MFU", "HFU", "Mem pred/logged")
    text = render_tables(frame(zero, dict(MEG_18B, path="/logs/other.out", gpus=32)), columns=columns)
    assert "|   16 |          97.5 | 31.2% | 41.6% | 41.3/60.5 GB (0.68) |" in text
    assert "|   32 |               |       |       |                     |" in text  # nothing known: empty
    assert "Mem pred/logged = ZeRO model-state estimate per GPU (16 bytes/param) / the logged peak" in text
    assert "MFU = model FLOPs (eq. 3 without recomputation, PaLM's definition)" in text
