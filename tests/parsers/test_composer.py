"""Composer's console-logger blocks, on the fixtures in its shapes (fixtures/composer/) and single
blocks; expected numbers are read off the blocks' own text here."""

from __future__ import annotations

import re
import statistics

import pytest

from tests.conftest import FIXTURES
from tests.parsers.feeding import first_run as read

BATCHES = FIXTURES / "composer" / "mpt_125m-8101.out"
EPOCHS = FIXTURES / "composer" / "mpt_1b_epochs-8102.out"


def metric(block: str, key: str) -> float:
    return float(re.search(rf"^\t Train {re.escape(key)}: (\S+)$", block, re.MULTILINE)[1])


def blocks(text: str) -> list[tuple[str, str]]:
    """(header, body) of each training block: the header line and its ``Train`` lines."""
    found = re.findall(r"^(\[(?:epoch=\d+\]\[)?batch=[\d/]+\]:)\n((?:\t Train .*\n)+)", text, re.MULTILINE)
    return [(header, body) for header, body in found]


def test_each_batch_block_is_its_steps_row():
    text = BATCHES.read_text(encoding="utf-8")
    expected = [
        (
            int(re.search(r"batch=(\d+)/", header)[1]),
            metric(body, "loss/train/total"),
            metric(body, "lr-DecoupledAdamW/group0"),
            metric(body, "l2_norm/grad/global"),
            1000 / metric(body, "throughput/batches_per_sec"),
            metric(body, "throughput/tokens_per_sec"),
        )
        for header, body in blocks(text)
    ]
    row, iterations = read(BATCHES)
    got = iterations.select("iteration", "loss", "lr", "grad_norm", "elapsed_ms", "tokens_per_sec").rows()
    assert got == expected
    assert set(iterations["family"]) == {"composer"}
    # [batch=60/60] reached max_duration's 60 batches: the run ended
    assert (row["family"], row["status"], row["train_iters"], row["last_iteration"]) == (
        "composer",
        "ok",
        60,
        60,
    )
    assert row["micro_batch_size"] == 8
    assert row["sec_per_iter"] == pytest.approx(statistics.median(ms / 1000 for *_, ms, _ in expected[1:]))


def test_an_epochs_block_counts_its_step_from_the_epochs_start():
    text = EPOCHS.read_text(encoding="utf-8")
    headers = re.findall(r"^\[epoch=(\d+)\]\[batch=(\d+)/(\d+)\]:$", text, re.MULTILINE)
    row, iterations = read(EPOCHS)
    assert iterations["iteration"].to_list() == [(int(e) - 1) * int(t) + int(b) for e, b, t in headers]
    assert iterations["loss"].to_list() == [metric(body, "loss/train/total") for _, body in blocks(text)]
    # an epochs' plan names no steps; the out-of-memory error is the cause, not Slurm's task failure
    assert row["train_iters"] is None
    assert row["status"] == "failed" and "CUDA out of memory" in row["reason"]


def test_evaluations_and_other_units_are_no_steps(tmp_path):
    log = tmp_path / "train.log"
    log.write_text(
        "[batch=1/10]:\n\t Train loss/train/total: 5.2500\n"
        "[Eval batch=2/2]:\n\t Eval metrics/eval/LanguageCrossEntropy: 4.1000\n"
        "[token=4096/8192]:\n\t Train loss/train/total: 4.7500\n",
        encoding="utf-8",
    )
    row, iterations = read(log)
    # the token block's metrics are of no step it names: they join the last step logged, not a step of
    # their own, and the evaluation's are not read
    assert iterations.select("iteration", "loss").rows() == [(1, 5.25)]
    assert row["family"] == "composer"


@pytest.mark.parametrize("logger", ["llmfoundry.command_utils.train", "__main__"])
def test_llm_foundrys_done_after_fit_ends_the_run(tmp_path, logger):
    # an epochs' plan names no steps: only the train script's last line says fit() returned
    header = "2024-03-14 08:15:04,200: rank0[7713][MainThread]: INFO:"
    lines = ["[epoch=2][batch=60/60]:", "\t Train loss/train/total: 1.2500", f"{header} {logger}: Done."]
    log = tmp_path / "sft.log"
    log.write_text("\n".join(lines) + "\n", encoding="utf-8")
    row, _ = read(log)
    assert (row["status"], row["reason_line"]) == ("ok", 3)
    # a script of another name saying "Done." is no end of Composer's
    log.write_text("\n".join([*lines[:2], f"{header} my_data.prep: Done."]) + "\n", encoding="utf-8")
    assert read(log)[0]["status"] == "incomplete"


@pytest.mark.parametrize("path", [BATCHES, EPOCHS])
def test_the_logged_config_states_the_runs_shape(path):
    text = path.read_text(encoding="utf-8")

    def key(name: str) -> str:  # a top-level key's value: unindented
        return re.search(rf"^{name}: (\S+)$", text, re.MULTILINE)[1]

    row, _ = read(path)
    assert row["seq_len"] == int(key("max_seq_len"))  # not the model's, indented: the same here
    assert row["global_batch_size"] == int(key("global_train_batch_size"))
    assert row["micro_batch_size"] == int(key("device_train_microbatch_size"))
    assert row["gpus"] == int(key("n_gpus"))
    # a plan in batches ("60ba") is the steps; in epochs ("2ep") none
    duration = key("max_duration")
    assert row["train_iters"] == (int(duration[:-2]) if duration.endswith("ba") else None)
    assert row["provenance"]["seq_len"].startswith("composer:")


def test_a_token_duration_blocks_step_is_its_batches_done_plus_one(tmp_path):
    # max_duration in tokens: the header counts tokens; the trainer's timestamp, logged as the batch began,
    # counts the batches done before it
    blocks = [
        (f"[token={2048 * 512 * batch}/26214400000]:", batch - 1, 9.0 - batch / 10) for batch in (10, 20, 30)
    ]
    log = tmp_path / "train.log"
    log.write_text(
        "".join(
            f"{header}\n\t Train time/batch: {done}\n\t Train loss/train/total: {loss:.4f}\n"
            for header, done, loss in blocks
        )
    )
    _, iterations = read(log)
    assert iterations.select("iteration", "loss").rows() == [
        (done + 1, round(loss, 4)) for _, done, loss in blocks
    ]


def test_the_launchers_word_that_its_ranks_finished_is_a_clean_exit(tmp_path):
    # composer/cli/launcher.py after a run in tokens (no step's count reaches a plan): each rank's exit 0
    steps = ["[token=52428800/52428800]:", "\t Train time/batch: 399", "\t Train loss/train/total: 3.1200"]
    finished = [f"INFO:composer.cli.launcher:Rank {rank} finished successfully." for rank in range(4)]
    log = tmp_path / "composer-77.log"
    log.write_text("\n".join([*steps, *finished]) + "\n")
    row, _ = read(log)
    assert (row["family"], row["status"], row["reason_line"]) == ("composer", "ok", 4)
    # a rank that crashed after it: the run failed
    crashed = ["Traceback (most recent call last):", '  File "train.py", line 3', "ValueError: bad"]
    log.write_text("\n".join([*steps, *finished[:2], *crashed]) + "\n")
    row, _ = read(log)
    assert (row["status"], row["reason"]) == ("failed", "ValueError: bad")


def test_composers_own_config_states_the_world_as_nodes_of_gpus(tmp_path):
    # the console logger's ``Config:`` (trainer.py's num_nodes, num_gpus_per_node), after llm-foundry's
    # config block ended at "Starting training..."; an indented key is another config's
    info = "2024-03-26 17:02:45,911: rank0[1121][MainThread]: INFO: __main__:"
    lines = [f"{info} Logging config", "max_seq_len: 2048", "trainer:", "  num_nodes: 4"]
    lines += [f"{info} Starting training...", "*" * 30, "Config:", "composer_version: 0.20.1"]
    lines += ["num_gpus_per_node: 8", "num_nodes: 2", "rank_zero_seed: 17", "*" * 30]
    lines += ["[batch=1/50]:", "\t Train loss/train/total: 2.0000"]
    log = tmp_path / "train.log"
    log.write_text("\n".join(lines) + "\n", encoding="utf-8")
    row, _ = read(log)
    assert (row["nodes"], row["gpus_per_node"], row["gpus"], row["seq_len"]) == (2, 8, 16, 2048)
    # an llm-foundry that logs its config only as Composer's hyperparameters: the same keys, under Config:
    config = ["*" * 30, "Config:", "device_train_microbatch_size: 8", "global_train_batch_size: 256"]
    config += ["max_duration: 50ba", "max_seq_len: 2048", "model:", "  max_seq_len: 4096", "*" * 30]
    log.write_text(
        "\n".join([*config, "[batch=1/50]:", "\t Train loss/train/total: 2.0"]) + "\n", encoding="utf-8"
    )
    row, _ = read(log)
    shape = ("micro_batch_size", "global_batch_size", "train_iters", "seq_len", "family")
    assert tuple(row[name] for name in shape) == (8, 256, 50, 2048, "composer")
