"""OLMo's console metrics, on the fixtures in its shapes (fixtures/olmo/); expected numbers are read off the
logs' own text here."""

from __future__ import annotations

import re
import statistics

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
