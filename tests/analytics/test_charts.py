"""Charts from hand-built frames: the data each chart holds, and the files written."""

import os
import stat

import polars as pl
import pytest
from logstat.analytics.charts import (
    charts_of,
    gpu_days_chart,
    gpu_days_data,
    loss_chart,
    timer_chart,
    timer_data,
    write_charts,
)
from logstat.parsers.schema import ITERATIONS_SCHEMA, RUNS_SCHEMA, SUMMARY_SCHEMA, TIMERS_SCHEMA

RUNS = pl.DataFrame(
    [
        dict(
            path="/l/a.out",
            family="megatron",
            gpus=64,
            tp=4,
            pp=16,
            model_size_b=52.0,
            micro_batch_size=4,
            sec_per_iter=129.0,
            tokens_per_sec=1024 * 1024 / 129,
        ),
        dict(
            path="/l/b.out",
            family="megatron",
            gpus=32,
            tp=4,
            pp=8,
            model_size_b=52.0,
            micro_batch_size=4,
            sec_per_iter=250.0,
            tokens_per_sec=1024 * 1024 / 250,
        ),
        dict(path="/l/failed.out", family="megatron", gpus=16, status="failed"),
    ],
    schema={**RUNS_SCHEMA, **SUMMARY_SCHEMA},
)
ITERATIONS = pl.DataFrame(
    [
        dict(path="/l/a.out", iteration=1, loss=12.5, family="megatron", line=10),
        dict(path="/l/a.out", iteration=2, loss=11.0, family="megatron", line=20),
        dict(path="/l/b.out", iteration=1, loss=None, family="megatron", line=5),
    ],
    schema=ITERATIONS_SCHEMA,
)
TIMERS = pl.DataFrame(
    [
        dict(path="/l/a.out", iteration=None, timer="model-and-optimizer-setup", ms=336.0),
        dict(path="/l/a.out", iteration=1, timer="forward-compute", ms=30000.0),
        dict(path="/l/a.out", iteration=2, timer="forward-compute", ms=32000.0),
        dict(path="/l/a.out", iteration=3, timer="forward-compute", ms=40000.0),
        dict(path="/l/a.out", iteration=1, timer="optimizer", ms=50.0),
    ],
    schema=TIMERS_SCHEMA,
)


def chart_rows(chart) -> list[dict]:
    spec = chart.to_dict()
    (rows,) = spec["datasets"].values()
    return rows


def test_gpu_days_for_100b_tokens_by_hand():
    data = gpu_days_data(RUNS)
    assert data["run"].to_list() == ["b.out", "a.out"]  # the failed run has no throughput to draw
    a = data.filter(pl.col("run") == "a.out").row(0, named=True)
    # 100e9 tokens / (1048576 / 129 tokens/s) / 86400 s = 142.38 days; * 64 GPUs = 9112.5 GPU-days
    assert a["days"] == pytest.approx(100e9 * 129 / 1048576 / 86400)
    assert a["gpu_days"] == pytest.approx(64 * 100e9 * 129 / 1048576 / 86400)
    assert a["configuration"] == "Megatron, 52B, TP 4, no ZeRO, mbs 4, seq ?"


def test_configuration_of_a_tiny_model_is_not_0_0B():
    sizes = {"tiny": 110_336 / 1e9, "small": 12.6e6 / 1e9, "gpt2-large": 0.774}
    runs = pl.DataFrame(
        [
            dict(path=f"/l/{name}.out", family="megatron", gpus=2, model_size_b=size, tokens_per_sec=1e3)
            for name, size in sizes.items()
        ],
        schema={**RUNS_SCHEMA, **SUMMARY_SCHEMA},
    )
    configurations = dict(gpu_days_data(runs).select("run", "configuration").iter_rows())
    # sizes written as the tables write them
    assert [configurations[f"{name}.out"].split(", ")[1] for name in sizes] == ["110K", "13M", "774M"]


def test_gpu_days_chart_holds_the_runs_and_has_title_axes_legend():
    chart = gpu_days_chart(RUNS)
    spec = chart.to_dict()
    assert spec["title"] == "GPU-days to train 100B tokens vs number of GPUs"
    lines, labels = spec["layer"]
    assert lines["encoding"]["x"]["title"] == "GPUs"
    assert lines["encoding"]["y"]["title"] == "GPU-days for 100B tokens (days x GPUs)"
    assert (
        lines["encoding"]["color"]["title"]
        == "Configuration family (stack, size, TP, ZeRO, micro batch, seq)"
    )
    assert labels["encoding"]["text"]["field"] == "label"  # the run, and its status when not ok
    assert lines["encoding"]["x"]["axis"]["values"] == sorted(gpu_days_data(RUNS)["gpus"].to_list())  # drawn
    assert sorted(r["run"] for r in chart_rows(chart)) == ["a.out", "b.out"]


def test_loss_chart_holds_the_logged_losses():
    chart = loss_chart(ITERATIONS)
    assert [(r["run"], r["iteration"], r["loss"]) for r in chart_rows(chart)] == [
        ("a.out", 1, 12.5),
        ("a.out", 2, 11.0),
    ]
    assert chart.to_dict()["encoding"]["y"]["title"] == "Loss (nats per token)"


def test_timer_chart_medians_per_iteration_timers_only():
    data = timer_data(TIMERS)
    # setup (no iteration) is left out; forward-compute median of 30000, 32000, 40000
    assert data.select("run", "timer", "median_ms", "steps").rows() == [
        ("a.out", "forward-compute", 32000.0, 3),
        ("a.out", "optimizer", 50.0, 1),
    ]
    spec = timer_chart(TIMERS).to_dict()
    assert (
        spec["title"]
        == "Time per iteration by timer, median over the logged steps (the logs' timer lines, 1 run)"
    )
    assert spec["spec"]["encoding"]["x"]["title"] == "Time per iteration (ms, median)"


def test_charts_without_data_are_skipped():
    assert list(charts_of(RUNS, ITERATIONS, TIMERS)) == ["gpu_days_100b", "loss", "time_breakdown"]
    assert list(charts_of(RUNS.head(0), ITERATIONS.head(0), TIMERS.head(1))) == []


def test_chart_files_get_the_umask_mode_not_a_private_one(tmp_path):
    old_umask = os.umask(0o022)
    try:
        written = write_charts({"loss": loss_chart(ITERATIONS)}, tmp_path, formats=("html",))
    finally:
        os.umask(old_umask)
    assert [stat.S_IMODE(p.stat().st_mode) for p in written] == [0o644]
    assert [p.name for p in tmp_path.iterdir()] == ["loss.html"]


@pytest.mark.slow  # vl-convert renders PNG, SVG and the inlined HTML bundle: ~10 s on 2 busy cores
def test_write_charts_writes_every_format_and_never_overwrites(tmp_path):
    out = tmp_path / "plots"
    charts = {"loss": loss_chart(ITERATIONS)}
    written = write_charts(charts, out, formats=("html", "svg", "png"))
    assert [p.name for p in written] == ["loss.html", "loss.svg", "loss.png"]
    assert written[2].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "<svg" in written[1].read_text() and "Training loss vs iteration" in written[1].read_text()
    assert "a.out" in written[0].read_text()
    before = {p: p.read_bytes() for p in written}
    mine = out / "time_breakdown.html"
    mine.write_text("the user's own file")
    with pytest.raises(FileExistsError, match="loss.html exists"):
        write_charts(charts, out, formats=("html",))
    with pytest.raises(FileExistsError, match="time_breakdown.html exists"):
        write_charts({"time_breakdown": timer_chart(TIMERS)}, out, formats=("png", "html"))
    assert not (out / "time_breakdown.png").exists()  # nothing written when one file is in the way
    assert mine.read_text() == "the user's own file"
    assert {p: p.read_bytes() for p in written} == before
    with pytest.raises(ValueError, match="format\\(s\\) jpg unknown"):
        write_charts(charts, tmp_path / "other", formats=("jpg",))


def _runs(*rows: dict) -> pl.DataFrame:
    return pl.DataFrame(list(rows), schema={**RUNS_SCHEMA, **SUMMARY_SCHEMA})


def test_gpu_days_chart_joins_each_configuration_family_across_gpu_counts():
    ddp = dict(
        family="megatron", stack="ddp-powersgd", spec_name="ddp7b", tp=1, zero_stage=0, micro_batch_size=2
    )
    meg = dict(family="megatron-deepspeed", tp=4, pp=4, micro_batch_size=4)
    runs = _runs(
        # a DDP + PowerSGD spec run on 8 and 16 GPUs (Megatron-format logs): one family
        dict(
            path="/r/ddp7b/1/train.log",
            run_id="1",
            gpus=8,
            model_size_b=7.07,
            seq_len=1024,
            tokens_per_sec=8e3,
            **ddp,
        ),
        dict(
            path="/r/ddp7b/2/train.log",
            run_id="2",
            gpus=16,
            model_size_b=7.07,
            seq_len=1024,
            tokens_per_sec=15e3,
            **ddp,
        ),
        # a 3D run on 32 and 64 GPUs: Megatron pads the vocabulary by TP, so the two sizes differ a little
        dict(path="/l/m32.out", gpus=32, model_size_b=51.97, seq_len=2048, tokens_per_sec=4e3, **meg),
        dict(path="/l/m64.out", gpus=64, model_size_b=52.01, seq_len=2048, tokens_per_sec=8e3, **meg),
    )
    data = gpu_days_data(runs)
    families = dict(data.group_by("configuration", maintain_order=True).agg("run").iter_rows())
    assert families == {
        "Megatron + DeepSpeed 3D, 52B, TP 4, no ZeRO, mbs 4, seq 2048": ["m32.out", "m64.out"],
        "PyTorch DDP + PowerSGD, 7.1B, TP 1, ZeRO 0, mbs 2, seq 1024": ["ddp7b/1", "ddp7b/2"],
    }
    lines, _ = gpu_days_chart(runs).to_dict()["layer"]
    assert lines["mark"]["type"] == "line" and lines["encoding"]["color"]["field"] == "configuration"


def test_gpu_days_tooltips_write_tflops_and_mfu_as_the_tables_do():
    run = dict(
        path="/l/t.out", family="megatron", gpus=2, tokens_per_sec=1e3, tflops_per_gpu=0.0123, mfu=0.379
    )
    [row] = chart_rows(gpu_days_chart(_runs(run)))
    assert (row["tflops"], row["mfu"]) == ("0.0123", "37.9%")


def test_timer_chart_draws_only_runs_with_timings_each_on_its_own_axis():
    timers = pl.DataFrame(
        [
            dict(path="/l/meg.out", iteration=1, timer="forward-compute", ms=32000.0, family="megatron"),
            dict(path="/l/ds.log", iteration=2, timer="fwd", ms=0.19, family="deepspeed"),
            dict(path="/l/ds.log", iteration=2, timer="step", ms=9.34, family="deepspeed"),
            # a run whose every timer reads 0: nothing to draw, no empty panel
            dict(path="/l/zero.log", iteration=2, timer="fwd", ms=0.0, family="deepspeed"),
        ],
        schema=TIMERS_SCHEMA,
    )
    data = timer_data(timers)
    assert sorted(data["run"].unique()) == ["ds.log", "meg.out"]
    spec = timer_chart(timers).to_dict()
    assert spec["title"] == (
        "Time per iteration by timer, median over the logged steps (DeepSpeed and Megatron timer lines, 2 runs)"
    )
    assert spec["resolve"]["scale"]["x"] == "independent"


def test_timer_chart_title_names_the_runs_families():
    # DeepSpeed's engine prints "time (ms) | fwd: ..." in Megatron's format: the run is DeepSpeed's
    timers = pl.DataFrame(
        [dict(path="/l/ds.log", iteration=2, timer="fwd", ms=0.19, family="megatron")], schema=TIMERS_SCHEMA
    )
    spec = timer_chart(timers, families={"/l/ds.log": "deepspeed"}).to_dict()
    assert (
        spec["title"]
        == "Time per iteration by timer, median over the logged steps (DeepSpeed timer lines, 1 run)"
    )


def test_a_failed_runs_point_says_so_and_small_step_times_keep_their_digits():
    runs = pl.DataFrame(
        [
            dict(
                path=f"/l/{name}.out",
                family="megatron",
                status=status,
                gpus=gpus,
                tokens_per_sec=1e3,
                sec_per_iter=sec,
            )
            for name, status, gpus, sec in (("ok", "ok", 8, 0.045), ("oom", "failed", 16, 4.66))
        ],  # fmt: skip
        schema={**RUNS_SCHEMA, **SUMMARY_SCHEMA},
    )
    assert dict(gpu_days_data(runs).select("run", "label").iter_rows()) == {
        "ok.out": "ok.out",
        "oom.out": "oom.out (failed)",
    }
    _, labels = gpu_days_chart(runs).to_dict()["layer"]
    assert labels["encoding"]["text"]["field"] == "label"
    tooltip = {t.get("title", t["field"]): t for t in labels["encoding"]["tooltip"]}
    assert tooltip["s/iteration"]["format"] == ".4~g" and "status" in tooltip
