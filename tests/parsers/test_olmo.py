"""OLMo's console metrics, on the fixtures in its shapes (fixtures/olmo/); expected numbers are read off the
logs' own text here."""

from __future__ import annotations

import re
import statistics

import polars as pl
import pytest

from tests.conftest import FIXTURES
from tests.parsers.feeding import first_run as read

SHORT = FIXTURES / "olmo" / "olmo_1b-9101.out"
RESUMED = FIXTURES / "olmo" / "olmo_7b_resume-9102.out"


def steps_of(text: str) -> list[tuple[int, dict[str, float]]]:
    """Each header's step and the ``name=value`` lines after it."""
    found = re.findall(r"\[step=(\d+)/\d+(?:,epoch=\d+)?\]\n((?: {4}.*\n)+)", text)
    return [
        (
            int(step),
            {name: float(value.replace(",", "")) for name, value in re.findall(r" {4}(.+)=(.+)", body)},
        )
        for step, body in found
    ]


@pytest.mark.parametrize("path", [SHORT, RESUMED])
def test_each_header_and_its_metrics_are_a_steps_row(path):
    expected = [
        (
            step,
            metric["train/CrossEntropyLoss"],
            metric["optim/learning_rate_group0"],
            metric["optim/total_grad_norm"],
            1000 / metric["throughput/device/batches_per_second"],
            metric["throughput/device/tokens_per_second"],
        )
        for step, metric in steps_of(path.read_text(encoding="utf-8"))
    ]
    row, iterations = read(path)
    got = iterations.select("iteration", "loss", "lr", "grad_norm", "elapsed_ms", "tokens_per_sec").rows()
    assert got == expected
    assert row["family"] == "olmo" and set(iterations["family"]) == {"olmo"}
    assert row["sec_per_iter"] == pytest.approx(statistics.median(ms / 1000 for *_, ms, _ in expected[1:]))


def test_the_plan_the_count_and_the_config_are_the_runs():
    text = SHORT.read_text(encoding="utf-8")
    row, _ = read(SHORT)
    # [step=40/40] reached max_steps: the run ended
    assert (row["status"], row["train_iters"], row["last_iteration"]) == ("ok", 40, 40)
    count = re.search(r"Total number of parameters: ([\d,]+)", text)[1]
    assert row["logged_model_size"] == pytest.approx(int(count.replace(",", "")) / 1e9, rel=1e-15)
    config = {key: int(value) for key, value in re.findall(r"\b(\w+)=(\d+)\b", text.splitlines()[0])}
    assert row["global_batch_size"] == config["global_train_batch_size"]
    assert row["micro_batch_size"] == config["device_train_microbatch_size"]
    assert row["seq_len"] == config["max_sequence_length"]
    resumed, _ = read(RESUMED)
    assert (resumed["status"], resumed["train_iters"]) == ("timeout", 739328)


def test_a_scripts_own_parameter_count_is_no_olmo_run(tmp_path):
    log = tmp_path / "train.log"
    log.write_text("Total number of parameters: 124,439,808\n")
    row, _ = read(log)
    assert row["family"] == "unknown"


def test_olmo_cores_markers_metrics_and_experiment_config(tmp_path):
    # olmo_core/train/callbacks/console_logger.py: a step with metrics is marked with its eta; the others
    # plain; its trainer's and speed monitor's metric names; its scripts print the ExperimentConfig repr
    prefix = (
        "2025-01-14 09:11:08.351\taugusta-gpu-0031:0\tolmo_core.train.callbacks.console_logger:63\tINFO\t"
    )
    config = (
        "2025-01-14 09:10:02.276\taugusta-gpu-0031:0\t__main__:283\tINFO\tExperimentConfig(run_name='smoke', "
        "dataset=NumpyFSLDatasetConfig(mix='OLMoE-mix-0824', sequence_length=4096), "
        "data_loader=NumpyDataLoaderConfig(global_batch_size=2097152, seed=34521))"
    )
    lines = [config, f"{prefix}[step=9/150,epoch=0]", f"{prefix}[step=10/150,epoch=0,eta=7m56s]"]
    lines += ["    train/CE loss=11.23", "    optim/LR (group 0)=0.0004", "    optim/total grad norm=1.5"]
    lines += ["    throughput/device/BPS=0.2941", "    throughput/device/BPS (actual avg)=0.2500"]
    lines += ["    throughput/device/TPS=1,234", f"{prefix}[step=11/150,epoch=0]"]
    row, iterations = read_lines(tmp_path, lines)
    assert iterations.select("iteration", "loss", "lr", "grad_norm").rows() == [
        (9, None, None, None),
        (10, 11.23, 0.0004, 1.5),
        (11, None, None, None),
    ]
    assert iterations.filter(pl.col("iteration") == 10)["elapsed_ms"].to_list() == [1000 / 0.2941]
    assert (row["family"], row["seq_len"], row["global_batch_size"], row["train_iters"]) == (
        "olmo",
        4096,
        512,
        150,
    )
    # its loggers alone are its evidence: a run that failed before its first step
    row, _ = read_lines(
        tmp_path, [prefix.replace("callbacks.console_logger:63", "trainer:1064") + "Starting dry-run"]
    )
    assert row["family"] == "olmo"


def read_lines(tmp_path, lines: list[str]):
    log = tmp_path / "OLMo2-1B-smoke.log"
    log.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return read(log)
