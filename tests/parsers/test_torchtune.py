"""torchtune's training bar, metric logger lines, resolved config and final checkpoint, on fixtures in its
print formats (fixtures/torchtune/); the expected numbers are computed here from the records' own text."""

from __future__ import annotations

import json
import re
import statistics

import pytest
from logstat.parsers import torchtune

from logstat.api import load_runs
from tests.conftest import FIXTURES
from tests.parsers.feeding import feed_lines, line_of

LOGS = FIXTURES / "torchtune"
LORA = LOGS / "torchtune_lora_single_device-6101.out"
DISTRIBUTED = LOGS / "torchtune_full_distributed_oom-6102.out"
BAR = re.compile(
    r"^(\d+)\|(\d+)\|Loss: ([\d.]+):\s+\d+%\|[^|]*\|\s*(\d+)/(\d+) \[[^,]*,\s*([\d.]+)(s/it|it/s)\]"
)
METRICS = re.compile(r"Step (\d+) \| loss:([\d.]+) lr:([\d.e-]+) ")


def _records(path) -> list[str]:
    """The file's records: tqdm's refreshes are carriage-return separated, a print glued after a bar's ``]``."""
    text = path.read_text(encoding="utf-8").replace("]Step ", "]\nStep ")
    return re.split(r"[\r\n]", text)


def _steps(path) -> dict[int, dict[str, float]]:
    """Per step, the loss and tqdm's rate (seconds a step) of the bar refresh counting it in its epoch."""
    found = {}
    for record in _records(path):
        if (bar := BAR.match(record)) and (int(bar[1]) - 1) * int(bar[5]) + int(bar[4]) == int(bar[2]):
            rate = float(bar[6])
            seconds = rate if bar[7] == "s/it" else 1 / rate
            found.setdefault(int(bar[2]), {"loss": float(bar[3]), "elapsed_ms": seconds * 1000})
    return found


def test_a_single_device_lora_run_is_a_row_per_bar_step_and_ends_at_its_final_checkpoint():
    steps = _steps(LORA)
    result = load_runs([LORA], warmup=1)
    row = result.runs.row(0, named=True)
    assert (row["family"], row["status"], row["iterations"], row["last_iteration"]) == (
        "torchtune",
        "ok",
        60,
        60,
    )
    assert row["reason"] == "INFO:torchtune.utils._logging:Saving final epoch checkpoint."
    its = result.iterations.sort("iteration")
    assert its["iteration"].to_list() == sorted(steps) == list(range(1, 61))
    assert its["loss"].to_list() == [steps[step]["loss"] for step in sorted(steps)]
    times = [steps[step]["elapsed_ms"] for step in sorted(steps)]
    assert its["elapsed_ms"].to_list() == pytest.approx(times)
    assert row["sec_per_iter"] == pytest.approx(statistics.median(times[1:]) / 1000)


def test_the_resolved_config_and_the_single_device_recipe_are_the_runs_facts():
    row = load_runs([LORA]).runs.row(0, named=True)
    facts = {
        "gpus": 1, "dp": 1, "tp": 1, "pp": 1, "micro_batch_size": 2, "gas": 4, "global_batch_size": 8,
        "seq_len": 2048, "precision": "bf16", "activation_checkpointing": True,
    }  # fmt: skip
    assert {name: row[name] for name in facts} == facts
    provenance = json.loads(row["provenance"])
    lines = {
        "gpus": "Running LoRAFinetuneRecipeSingleDevice", "micro_batch_size": "batch_size: 2",
        "gas": "gradient_accumulation_steps: 4", "seq_len": "  max_seq_len: 2048",
    }  # fmt: skip
    assert {name: provenance[name] for name in lines} == {
        name: f"torchtune:{line_of(LORA, text)}" for name, text in lines.items()
    }


def test_a_distributed_run_counts_steps_across_epochs_and_fails_of_its_ranks_oom():
    steps = _steps(DISTRIBUTED)
    result = load_runs([DISTRIBUTED])
    row = result.runs.row(0, named=True)
    assert (row["family"], row["status"], row["iterations"]) == ("torchtune", "failed", 32)
    assert row["reason"].startswith("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 3.91 GiB.")
    # tune run's --nproc_per_node is torchrun's: one node of 4; FSDP: DP is the GPUs
    assert (row["gpus"], row["dp"], row["global_batch_size"], row["seq_len"]) == (4, 4, 32, 4096)
    assert row["activation_checkpointing"] is False
    its = result.iterations.sort("iteration")
    # the second epoch's bar counts from 1 again: its steps are 21-32
    assert its["iteration"].to_list() == sorted(steps) == list(range(1, 33))
    assert its["elapsed_ms"].to_list() == pytest.approx([steps[step]["elapsed_ms"] for step in sorted(steps)])
    logged = {int(m[1]): float(m[3]) for m in METRICS.finditer(DISTRIBUTED.read_text(encoding="utf-8"))}
    assert its["lr"].to_list() == [logged[step] for step in sorted(steps)]


def test_a_bar_refresh_showing_the_step_before_is_not_that_steps_record():
    # pbar.update(1) refreshes with the last step's description, then set_description with the new one
    stale = "1|4|Loss: 1.5:   8%|▊         | 5/60 [00:25<04:35,  5.01s/it]"
    own = "1|5|Loss: 1.4:   8%|▊         | 5/60 [00:25<04:35,  5.01s/it]"
    run = feed_lines(torchtune.FAMILY, [stale, own])
    assert run.iteration_frame["iteration"].to_list() == [5]
    assert run.iteration_frame["loss"].to_list() == [1.4]
    # a bar cut off after its description still names its step
    cut = feed_lines(torchtune.FAMILY, ["2|61|Loss: 0.93"])
    assert cut.iteration_frame["iteration"].to_list() == [61]


def test_config_lines_outside_a_resolved_config_are_not_torchtunes():
    lines = [
        "batch_size: 16",  # another program's YAML
        "gradient_accumulation_steps: 8",
        "Step 3 | loss is low",  # no metric logger's fields
        "Saving final epoch checkpoint. (a user's print, mid-line)",
    ]
    run = feed_lines(torchtune.FAMILY, lines)
    assert run.iteration_frame is None or run.iteration_frame.height == 0
    assert run.facts == {}
    assert run.completion is None


def test_a_run_whose_last_step_ends_its_last_epoch_ran_to_its_end(tmp_path):
    # before 0.5 the checkpointer says nothing of the final epoch: the config's epochs of the bar's steps
    lines = LORA.read_text(encoding="utf-8").splitlines()
    older = tmp_path / "tune-0.4.out"
    older.write_text("\n".join(line for line in lines if "final epoch" not in line) + "\n", encoding="utf-8")
    row = load_runs([older]).runs.row(0, named=True)
    assert (row["train_epochs"], row["steps_per_epoch"], row["train_iters"]) == (1, 60, 60)
    assert (row["status"], row["reason"]) == ("ok", "reached the planned 60 iterations")
    # a run stopped at an epoch's end short of its planned epochs did not reach them
    failed = load_runs([DISTRIBUTED]).runs.row(0, named=True)
    assert (failed["train_epochs"], failed["steps_per_epoch"], failed["train_iters"]) == (3, 20, 60)


def test_a_run_resumed_from_an_epochs_checkpoint_starts_past_it():
    config = [
        "INFO:torchtune.utils._logging:Running LoRAFinetuneRecipeSingleDevice with resolved config:",
        "",
        "epochs: 3",
        "resume_from_checkpoint: true",
        "",
    ]
    steps = [
        f"2|{step}|Loss: 1.0:   5%|▌         | {step - 20}/20 [00:05<01:35,  5.00s/it]" for step in (21, 22)
    ]
    run = feed_lines(torchtune.FAMILY, [*config, *steps])
    assert (run.facts["resumed_step"], run.provenance["resumed_step"]) == (20, "torchtune:6")
    # a first step that starts no epoch (a metric line every 10 steps): no resume said
    logged = ["Step 10 | loss:1.2 lr:2e-05 tokens_per_second_per_gpu:1500.0 ", *steps]
    assert "resumed_step" not in feed_lines(torchtune.FAMILY, [*config, *logged]).facts
