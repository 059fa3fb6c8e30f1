"""HF Trainer family on real lines: the 2021 ZeRO-3 log (fixtures/bigscience, and its trimmed copy), today's (transformers 5.23) CPU runs.

Expected values were read off the files with the one-liners quoted beside them, not with the parser.
"""

import math
import re
import time
from functools import partial
from pathlib import Path

import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from logstat.parsers import engine, hf_trainer, reader, source
from logstat.parsers.base import RunBuilder

from logstat.api import load_runs
from tests.parsers import feeding
from tests.parsers.random_text import joined

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "hf_trainer"
REAL = "hf_ds_gpt2_perf_n16_bs4-mbs8.out"
PRINTER = FIXTURES / "hf_gpt2_tiny_printer_cpu.log"
TQDM_DS = FIXTURES / "hf_gpt2_tiny_ds_zero2_2cpu.log"
TORCHRUN_TQDM = FIXTURES / "hf_gpt2_tiny_torchrun_2cpu_tqdm.log"
TORCHRUN_FAILED = FIXTURES / "hf_gpt2_tiny_torchrun_2cpu_failed.log"
CONSTRUCTED_25B = FIXTURES / "constructed_hf_ds_gpt2_max_size_n4_25b.out"
DS_LAUNCHER = FIXTURES.parent / "failures" / "deepspeed-launcher-sigkill-3004.out"


def feed(path: Path) -> RunBuilder:
    return feeding.feed_file(hf_trainer.FAMILY, path)


def feed_lines(lines: list[str]) -> RunBuilder:
    return feeding.feed_lines(hf_trainer.FAMILY, lines)


@pytest.mark.parametrize("where", ["fixture", "full"])
def test_real_2021_log_final_metrics(where, request):
    path = FIXTURES / REAL if where == "fixture" else request.getfixturevalue("real_logs") / REAL
    run = feed(path)
    # grep -c "^{'train_runtime'" -> 16 (one per node); grep -n -m1 "^{'train_runtime'" ->
    # {'train_runtime': 273.0148, 'train_samples_per_second': 3.663, 'train_steps_per_second': 0.007, 'epoch': 1.0}
    assert run.facts["final_train_runtime_s"] == 273.0148
    assert run.facts["final_samples_per_sec"] == 3.663
    first = {"fixture": 581, "full": 1567}[where]  # grep -n -m1 "^{'train_runtime'"
    assert run.provenance["final_train_runtime_s"] == f"hf-trainer:{first}"
    assert run.families_seen[hf_trainer.NAME] == 16
    # the log logged no training step dict, no TrainingArguments, no --config_overrides:
    # grep -c "'loss'\|config_overrides\|TrainingArguments\|n_embd" -> 0
    assert run.iterations == {}
    assert not {"hidden_size", "num_layers", "micro_batch_size"} & run.facts.keys()
    assert run.state.get("parse_errors") is None


def test_todays_printer_log_steps_from_logging_steps():
    run = feed(PRINTER)
    # grep -n "{'loss'" -> 172, 173, 174; logging_steps=2 (line 75), logging_first_step=False (73)
    assert sorted(run.iterations) == [2, 4, 6]
    # {'loss': '4.705', 'grad_norm': '1.159', 'learning_rate': '0.0004167', 'epoch': '0.25'}
    two = run.iterations[2]
    assert (two["line"], two["loss"], two["lr"], two["grad_norm"]) == (172, 4.705, 0.0004167, 1.159)
    assert (run.iterations[6]["loss"], run.iterations[6]["lr"], run.iterations[6]["line"]) == (
        4.716,
        8.333e-05,
        174,
    )


def test_todays_printer_log_run_facts():
    run = feed(PRINTER)
    facts = run.facts
    # TrainingArguments: per_device_train_batch_size=4 (90), gradient_accumulation_steps=2 (50), max_steps=6 (80),
    # activation_checkpointing=True (7) / gradient_checkpointing=True (51), fp16=False, bf16=False, deepspeed=None
    assert facts["micro_batch_size"] == 4
    assert facts["gas"] == 2
    assert facts["train_iters"] == 6
    assert facts["activation_checkpointing"] is True
    assert facts["precision"] == "fp32"
    assert run.provenance["precision"] == "hf-trainer:120"  # the dump's closing ")"
    # "+ python hf_run.py --printer --config_overrides n_embd=64,n_layer=2,n_head=2,n_positions=128,vocab_size=128" (2)
    assert (facts["hidden_size"], facts["num_layers"], facts["num_heads"]) == (64, 2, 2)
    assert (facts["seq_len"], facts["vocab_size"]) == (128, 128)
    # "Total train batch size (w. parallel, distributed & accumulation) = 8" (167), "Number of trainable parameters = 116,480"
    assert facts["global_batch_size"] == 8
    assert facts["dp"] == 1  # 8 / (4 x 2): one process
    assert facts["logged_model_size"] == pytest.approx(116480 / 1e9)
    # final dict: 'train_runtime': '11.23' (180, 4 digits); block: "train_runtime = 0:00:11.22" (184, 4 digits,
    # truncated by log_metrics): equal precision, the first stays. samples/s: '4.276' and 4.276.
    assert facts["final_train_runtime_s"] == 11.23
    assert facts["final_samples_per_sec"] == 4.276
    assert run.state.get("parse_errors") is None


def test_the_banners_world_is_the_runs_gpus_when_nothing_splits_the_model(tmp_path):
    # trainer.py: total = per-device batch x n_gpu a process x accumulation x processes, so DP counts GPUs
    log = tmp_path / "sft-7.log"
    banner = ["***** Running training *****", "  Instantaneous batch size per device = 8"]
    banner += ["  Total train batch size (w. parallel, distributed & accumulation) = 64"]
    banner += ["  Gradient Accumulation steps = 1"]
    log.write_text("\n".join(banner) + "\n")
    row = load_runs([log]).runs.row(0, named=True)
    assert (row["dp"], row["gpus"]) == (8, 8)


def test_todays_deepspeed_run_dicts_glued_into_the_progress_bar():
    run = feed(TQDM_DS)
    # grep -o "{'[^}]*}" with grep -n: the dicts sit mid-line after tqdm's carriage returns, lines 349, 350, 351
    assert sorted(run.iterations) == [2, 4, 6]
    assert [run.iterations[s]["line"] for s in (2, 4, 6)] == [349, 350, 351]
    assert [run.iterations[s]["loss"] for s in (2, 4, 6)] == [4.71, 4.716, 4.671]
    assert run.iterations[4]["grad_norm"] == 0.7764
    # deepspeed=ds_zero2.json: DeepSpeed decides the precision, the Trainer's flags alone do not
    assert "precision" not in run.facts
    # and names the run's stack, whose own lines at the default log level say nothing of it
    assert run.facts["deepspeed_config"] == "ds_zero2.json" and "deepspeed" not in run.families_seen
    # "Total train batch size (w. parallel, distributed & accumulation) = 16": 2 processes x 4 x 2
    assert run.facts["global_batch_size"] == 16
    assert (
        run.facts["dp"] == 2 and run.provenance["dp"] == "hf-trainer:340"
    )  # 16 / (4 x 2), at the next banner line
    # 'train_runtime': '1.433' (4 digits) beats "0:00:01.43" (3); 66.977 (5 digits) beats '66.98'
    assert run.facts["final_train_runtime_s"] == 1.433
    assert run.facts["final_samples_per_sec"] == 66.977


def test_identical_dicts_from_several_nodes_are_one_step():
    # each node's local rank 0 prints the same dict: 64 GPUs on 16 nodes print every log 16 times
    first = "{'loss': 4.705, 'learning_rate': 0.0004167, 'epoch': 0.25}"
    second = "{'loss': 4.71, 'learning_rate': 0.00025, 'epoch': 0.5}"
    run = feed_lines(["logging_steps=50,", first, first, second, first, second])
    assert sorted(run.iterations) == [1, 2]  # no TrainingArguments( before: logging_steps unknown, dict order
    assert run.iterations[1]["line"] == 2 and run.iterations[2]["loss"] == 4.71

    run = feed_lines(
        ["TrainingArguments(", "logging_first_step=True,", "logging_steps=50,", ")", first, first, second]
    )
    assert sorted(run.iterations) == [1, 50]


#: a diverged run at a constant learning rate: its dicts after the NaN are one text (transformers 5's .4g)
_NAN = "{'loss': 'nan', 'grad_norm': 'nan', 'learning_rate': '0.0003', 'epoch': '1.001'}"
_FINE = "{'loss': '2.113', 'grad_norm': '0.5', 'learning_rate': '0.0003', 'epoch': '1'}"


def test_identical_dicts_one_process_prints_are_each_a_step():
    dump = ["TrainingArguments(", "local_rank=-1,", "logging_steps=10,", ")"]
    assert sorted(feed_lines([*dump, _FINE, _NAN, _NAN, _NAN]).iterations) == [10, 20, 30, 40]
    # one node (torchrun's default --nnodes 1)
    launch = ["+ torchrun --nproc_per_node 8 train.py", "TrainingArguments(", "logging_steps=10,", ")"]
    assert sorted(feed_lines([*launch, _FINE, _NAN, _NAN]).iterations) == [10, 20, 30]


def test_identical_dicts_of_several_nodes_printers_are_a_step_per_node_count():
    # PrinterCallback (disable_tqdm) prints each dict on every node's local rank 0: 2 nodes, 2 copies a step
    launch = "+ srun --nodes 2 torchrun --nnodes 2 --nproc_per_node 8 train.py --logging_steps 10"
    dump = ["TrainingArguments(", "disable_tqdm=True,", "logging_steps=10,", ")"]
    lines = [launch, *dump, _FINE, _FINE, _NAN, _NAN, _NAN, _NAN, _NAN, _NAN]
    run = feed_lines(lines)
    assert sorted(run.iterations) == [10, 20, 30, 40]
    assert [run.iterations[step]["line"] for step in (10, 20, 30, 40)] == [6, 8, 10, 12]  # each first copy
    # with the bar (ProgressCallback: some versions printed on every node too) identical dicts stay one step
    lines[2] = "disable_tqdm=False,"
    assert sorted(feed_lines(lines).iterations) == [10, 20]


def test_ms_swifts_dicts_name_their_step_of_the_plan():
    # ms-swift's logs: 'global_step/max_steps' is the step (the dicts counted would be 1, 2) and the plan
    logged = (
        "{{'loss': 1.4{0}, 'learning_rate': 2.5e-06, 'epoch': 0.0{0}, 'global_step/max_steps': '{1}/1250'}}"
    )
    run = feed_lines([logged.format(1, 5), logged.format(2, 10)])
    assert sorted(run.iterations) == [5, 10] and run.iterations[10]["loss"] == 1.42
    assert run.facts["train_iters"] == 1250


def test_dict_cut_in_the_middle_is_reported_not_read():
    run = feed_lines(
        [
            "{'loss': 2.3016, 'learning_rate': 5e-05, 'ep",
            "{'loss': 2.2, 'learning_rate': 4e-05, 'epoch': 0.2}",
        ]
    )
    assert sorted(run.iterations) == [1]
    assert run.iterations[1]["loss"] == 2.2
    assert run.state["parse_errors"] == [
        "hf-trainer:1: dict cut short, not read: \"{'loss': 2.3016, 'learning_rate': 5e-05, 'ep\""
    ]


def test_dicts_that_are_not_training_logs_are_ignored():
    # DeepSpeed's config printer writes Python dicts too (optimizer_params, aio_config); eval dicts have no 'loss'
    run = feed_lines(
        [
            "[INFO] [config.py:752:print]   optimizer_params ............. {'lr': 5e-05, 'betas': [0.9, 0.999], 'eps': 1e-08}",
            "{'eval_loss': 2.1, 'eval_runtime': 3.2, 'epoch': 1.0}",
            "{'step': 10, 'loss': 2.9431}",  # a script's own print (a loop on DeepSpeed's engine under Ray)
        ]
    )
    assert run.iterations == {} and run.facts == {}
    assert run.state.get("parse_errors") is None and hf_trainer.NAME not in run.families_seen


def test_train_metrics_block_runtime_forms():
    # metrics_format(): timedelta str + ".%02d" hundredths; a day long run prints "1 day, 2:03:04.50"
    run = feed_lines(
        [
            "***** train metrics *****",
            "  epoch                    =        1.0",
            "  train_runtime            = 1 day, 2:03:04.50",
        ]
    )
    assert run.facts["final_train_runtime_s"] == pytest.approx(86400 + 2 * 3600 + 3 * 60 + 4.50)
    run = feed_lines(
        [
            "***** train metrics *****",
            "  train_runtime = 0:01:23.45",
            "  train_samples_per_second =   12.3",
            "next",
        ]
    )
    assert run.facts["final_train_runtime_s"] == pytest.approx(83.45)
    assert run.facts["final_samples_per_sec"] == 12.3
    # the block ends at its first other line: a metric after it is not read; a progress bar or a blank
    # line between the metrics does not end it
    run = feed_lines(
        [
            "***** train metrics *****",
            "  train_runtime = 0:01:23.45",
            "",
            " 50%|█████     | 3/6 [00:05<00:05,  1.90s/it]",
            "  train_samples_per_second =   12.3",
            "next",
            "  train_steps_per_second =   0.5",
        ]
    )
    assert run.facts["final_samples_per_sec"] == 12.3 and "final_steps_per_sec" not in run.facts
    assert run.families_seen[hf_trainer.NAME] == 2  # each metric is a record of the family


def test_one_line_training_arguments_of_older_versions():
    # transformers < 4.6 printed the dataclass repr on one line; this one joins the real dump's lines the same way:
    # sed -n 7,119p hf_gpt2_tiny_printer_cpu.log | grep -v "^accelerator_config" | sed 's/,$//' | paste -sd, | sed 's/,/, /g'
    fields = [
        line.rstrip(",")
        for line in PRINTER.read_text().splitlines()[6:119]
        if not line.startswith("accelerator_config")
    ]
    run = feed_lines(["Training/evaluation parameters TrainingArguments(" + ", ".join(fields) + ")"])
    assert (run.facts["micro_batch_size"], run.facts["gas"], run.facts["train_iters"]) == (4, 2, 6)
    assert run.facts["precision"] == "fp32" and run.facts["activation_checkpointing"] is True


def test_command_line_flags_and_block_size():
    run = feed_lines(
        [
            "+ python run_clm.py --model_type gpt2 --config_overrides 'n_embd=8192,n_layer=64,n_head=32,n_positions=2048' "
            "--block_size 1024 --per_device_train_batch_size 8 --deepspeed ds_zero3.json"
        ]
    )
    assert (run.facts["hidden_size"], run.facts["num_layers"], run.facts["num_heads"]) == (8192, 64, 32)
    assert run.facts["seq_len"] == 1024  # --block_size is what is trained on; n_positions only the maximum
    assert run.facts["micro_batch_size"] == 8
    assert "precision" not in run.facts and "train_iters" not in run.facts


def test_numbers_beyond_any_float_are_noted_not_raised():
    huge = "1" + "0" * 400
    run = feed_lines(
        [
            f"+ python hf_run.py --config_overrides n_embd=nan,vocab_size={huge}",
            f"{{'loss': {huge}, 'learning_rate': -{huge}, 'epoch': 0.01}}",
            f"  Number of trainable parameters = {huge},000",
        ]
    )
    notes = run.state["parse_errors"]
    assert [note.split("=")[0] for note in notes] == [
        "hf-trainer:1: vocab_size",
        "hf-trainer:3: logged_model_size",
    ]
    assert all(note.endswith("does not fit a 64-bit integer; not recorded") for note in notes)
    assert (
        "hidden_size" not in run.facts and "vocab_size" not in run.facts
    )  # nan is no size; 10**400 no int64
    (step,) = run.iterations.values()
    assert (step["loss"], step["lr"]) == (float("inf"), float("-inf"))  # as the texts "1e400" read


def test_command_line_switches_and_logging_steps_map_later_dicts():
    run = feed_lines(
        [
            "+ deepspeed run_clm.py --fp16 --gradient_checkpointing --max_steps 20 --logging_steps 10 "
            "--gradient_accumulation_steps 4 --per_device_train_batch_size 2 --output_dir out",
            "{'loss': 9.1, 'learning_rate': 5e-05, 'epoch': 0.01}",
            "{'loss': 8.7, 'learning_rate': 5e-05, 'epoch': 0.02}",
        ]
    )
    assert run.facts["precision"] == "fp16" and run.facts["activation_checkpointing"] is True
    assert (run.facts["train_iters"], run.facts["gas"], run.facts["micro_batch_size"]) == (20, 4, 2)
    assert sorted(run.iterations) == [10, 20]


@pytest.mark.parametrize(
    "line",
    [
        "",
        "\x00\xff binary",
        "{'loss': nan_value}",
        "{'loss'",
        "TrainingArguments(garbage",
        "Overriding config: =,=,n_embd=x",
    ],
)
def test_garbage_lines_do_not_raise(line):
    run = feed_lines([line])
    assert run.facts == {} and run.iterations == {}
    assert all(error.startswith("hf-trainer:1: ") for error in run.state.get("parse_errors", []))


@settings(max_examples=30, deadline=None)
@given(
    st.lists(
        st.text(
            alphabet=st.sampled_from(list("{}'lossepoch:,0123456789.e- =_train_runtime()")), max_size=120
        ),
        min_size=1,
        max_size=10,
    )
)
def test_any_line_is_read_without_an_internal_error(texts):
    logs = [[text, "***** train metrics *****", text, "TrainingArguments(", text] for text in texts]
    for run in feeding.feed_each(hf_trainer.FAMILY, logs):
        internal = [e for e in run.state.get("parse_errors", []) if "Error:" in e]
        assert internal == []


def test_n_gpu_is_the_gpu_count_only_without_distributed_launch():
    # transformers 4.x printed "_n_gpu=4," first in the dump (sorted); with local_rank=-1 one process drives
    # all GPUs (DataParallel); a distributed launch (local_rank >= 0) prints _n_gpu=1 per process.
    single = feed_lines(["TrainingArguments(", "_n_gpu=4,", "local_rank=-1,", ")"])
    assert single.facts["gpus"] == 4
    distributed = feed_lines(["TrainingArguments(", "_n_gpu=1,", "local_rank=0,", ")"])
    assert "gpus" not in distributed.facts


def test_train_output_gives_the_final_step_and_full_precision_metrics():
    # repr of transformers.trainer_utils.TrainOutput as scripts print trainer.train()'s result (made with the
    # installed transformers: TrainOutput(global_step=6, training_loss=..., metrics={...}))
    line = (
        "TrainOutput(global_step=6, training_loss=4.710400899251302, metrics={'train_runtime': 11.2281, "
        "'train_samples_per_second': 4.276, 'train_steps_per_second': 0.534, 'total_flos': 313344.0, "
        "'train_loss': 4.710400899251302, 'epoch': 0.75})"
    )
    run = feed_lines(
        ["{'train_runtime': '11.23', 'train_samples_per_second': '4.276', 'epoch': '0.75'}", line]
    )
    assert run.facts["final_steps"] == 6
    assert run.facts["final_train_runtime_s"] == 11.2281  # 6 digits beat the dict's '11.23'
    assert run.provenance["final_train_runtime_s"] == "hf-trainer:2"
    assert (
        run.facts["final_samples_per_sec"] == 4.276
        and run.provenance["final_samples_per_sec"] == "hf-trainer:1"
    )


_ARGS_LINE_PIECES = (
    *sorted(hf_trainer._ARGS_READ),
    "_full_eval",
    "_kwargs",
    "x",
    "=",
    "True",
    "4",
    ",",
    " ",
    "\t",
    ")",
    "(",
    "\r",
)


def _the_dump_reads(record: str) -> bool:
    """Whether the TrainingArguments block reads ``record``: a field it keeps, or its closing ``)``."""
    frame = pl.DataFrame({"text": [record]})
    field = frame.select(pl.col("text").str.extract(hf_trainer._ARGS_FIELD, 1)).item()
    closes = frame.select(pl.col("text").str.contains(hf_trainer._ARGS_CLOSER)).item()
    return closes or field in hf_trainer._ARGS_READ


@settings(max_examples=400, deadline=None)
@given(joined(_ARGS_LINE_PIECES, max_size=8))
def test_the_args_block_looks_at_every_field_line_it_reads(text):
    # the block's window is searched for the lines its hint matches: every line whose field the block
    # reads (or its closing ')') must match it
    if "\r" not in text and _the_dump_reads(text):
        assert re.search(hf_trainer.ARGUMENTS.hint, text), text


def test_the_args_block_leaves_out_fields_that_only_begin_with_a_read_name():
    wanted = re.compile(hf_trainer._ARGS_LINES)
    assert wanted.search("fp16=False,") and wanted.search("  activation_checkpointing=True,")
    assert not wanted.search("fp16_full_eval=False,")
    assert not wanted.search("activation_checkpointing_kwargs=None,")


def _line(path: Path, number: int) -> str:
    return path.read_text(encoding="utf-8").splitlines()[number - 1]


def test_2021_config_override_wins_over_the_base_gpt2_config_printed_after_it():
    run = feed(CONSTRUCTED_25B)
    facts = run.facts
    # grep -n "Overriding config" -> 29..32 (one per node): "n_embd=7168,n_head=32,n_layer=40,n_positions=1024,
    # gradient_checkpointing=true,use_cache=False"; then each node's tokenizer loads the hub's gpt2 config:
    # grep -n '"n_embd"\|"n_layer"\|"gradient_checkpointing"' -> 768, 12, false (lines 43-50, ... 157-164)
    assert (facts["hidden_size"], facts["num_layers"], facts["num_heads"], facts["seq_len"]) == (
        7168,
        40,
        32,
        1024,
    )
    assert run.provenance["hidden_size"] == run.provenance["num_layers"] == "hf-trainer:32"
    assert (
        facts["activation_checkpointing"] is True
        and run.provenance["activation_checkpointing"] == "hf-trainer:32"
    )
    # not overridden: read from the printed config, after its nested task_specific_params object
    # (grep -n '"vocab_size"' -> 68, 106, 144, 182)
    assert facts["vocab_size"] == 50257 and run.provenance["vocab_size"] == "hf-trainer:182"
    # the banner (grep -n "Total optimization steps" -> 384..387) and the final dicts (388..391)
    assert facts["train_iters"] == 2 and facts["final_steps_per_sec"] == 0.017
    assert run.state.get("parse_errors") is None


def test_a_printed_config_without_override_is_the_model_and_a_later_override_replaces_it():
    block = ["Model config GPT2Config {", '  "n_embd": 768,', '  "n_layer": 12,', "}", ""]
    run = feed_lines(block)
    assert (run.facts["hidden_size"], run.facts["num_layers"]) == (768, 12)
    run = feed_lines([*block, "Overriding config: n_embd=1024,n_layer=24"])
    assert (run.facts["hidden_size"], run.facts["num_layers"]) == (1024, 24)
    assert run.provenance["hidden_size"] == "hf-trainer:6"


def test_train_steps_per_second_is_a_final_fact():
    # 2021: {'train_runtime': 273.0148, 'train_samples_per_second': 3.663, 'train_steps_per_second': 0.007, ...} (581)
    assert feed(FIXTURES / REAL).facts["final_steps_per_sec"] == 0.007
    # today: the dict's '0.692' (line 119) and the block's "train_steps_per_second   =      0.692" (3 digits each):
    # the first stays
    run = feed(TORCHRUN_TQDM)
    assert (
        run.facts["final_steps_per_sec"] == 0.692
        and run.provenance["final_steps_per_sec"] == "hf-trainer:119"
    )


def test_tqdm_rate_of_the_training_bar_last_update_wins():
    # s/it (steps over a second): sed -n 120p | tr '\r' '\n' -> "100%|██████████| 6/6 [00:08<00:00,  1.44s/it]" last,
    # the bar's closing update; the evaluation bar after it (128: "3/3 [00:00<00:00, 118.68it/s]") is another total
    run = feed(TORCHRUN_TQDM)
    assert run.facts["progress_sec_per_iter"] == 1.44
    assert run.provenance["progress_sec_per_iter"] == "hf-trainer:120"
    # it/s: sed -n 358p -> "100%|██████████| 6/6 [00:01<00:00,  4.22it/s]" last; the planned 6 steps from the banner
    run = feed(TQDM_DS)
    assert run.facts["progress_sec_per_iter"] == pytest.approx(1 / 4.22)
    assert run.provenance["progress_sec_per_iter"] == "hf-trainer:358"
    # a run that failed at step 4: its bar's last update (127) " 50%|█████     | 3/6 [00:05<00:05,  1.90s/it]"
    run = feed(TORCHRUN_FAILED)
    assert (
        run.facts["progress_sec_per_iter"] == 1.9
        and run.provenance["progress_sec_per_iter"] == "hf-trainer:127"
    )


def test_the_last_update_of_a_bar_line_longer_than_a_lines_record_count_wins():
    # tqdm writes to a file with carriage returns only: 400 updates on one line, the last one the rate
    updates = "".join(
        f"\r{n // 4:3d}%|#         | {n}/400 [00:{n // 60:02d}<00:00,  {1 + n / 1000:.2f}it/s]"
        for n in range(1, 401)
    )
    run = feed_lines(["  Total optimization steps = 400", updates])
    assert run.facts["progress_sec_per_iter"] == pytest.approx(1 / 1.4)


def test_tqdm_lines_that_are_not_the_training_bar_rate():
    run = feed_lines(
        [
            "  Total optimization steps = 6",
            "  0%|          | 0/6 [00:00<?, ?it/s]",  # no rate yet
            "Map: 100%|██████████| 64/64 [00:00<00:00, 5063.59 examples/s]",  # datasets' bar: a description
            "Downloading: 100%|██████████| 6/6 [00:00<00:00, 4.35it/s]",  # a description: not the Trainer's
            "100%|██████████| 3/3 [00:00<00:00, 118.68it/s]",  # evaluation: 3 batches, not the 6 planned steps
        ]
    )
    assert "progress_sec_per_iter" not in run.facts
    # no planned steps stated: the training bar is the one updated last before a training dict (the
    # Trainer's ProgressCallback writes its dicts through it), not another loop's bar before it
    other = "  4%|▍         | 4/100 [00:01<00:29,  3.30it/s]"
    run = feed_lines(
        [
            other,
            " 33%|███▎      | 2/6 [00:02<00:05,  1.29s/it]",
            "{'loss': 4.7, 'learning_rate': 5e-05, 'epoch': 0.5}",
            "100%|██████████| 6/6 [00:07<00:00,  1.26s/it]",
            other,
        ]
    )
    assert (
        run.facts["progress_sec_per_iter"] == 1.26
        and run.provenance["progress_sec_per_iter"] == "hf-trainer:4"
    )
    # without a dict nor planned steps, no bar is known to be the Trainer's
    assert (
        "progress_sec_per_iter"
        not in feed_lines([other, "100%|██████████| 6/6 [00:07<00:00,  1.26s/it]"]).facts
    )


_BAR_PIECES = (
    "100",
    "%|",
    "█",
    " ",
    "|",
    "6",
    "/",
    "0",
    " [",
    "00:07",
    "<",
    ", ",
    "1.26",
    "s/it",
    "it/s",
    "]",
    "?",
)


@settings(max_examples=40, deadline=None)
@given(
    st.lists(
        st.tuples(joined(_BAR_PIECES, max_size=14), joined(_BAR_PIECES, max_size=14)), min_size=1, max_size=8
    )
)
def test_any_progress_text_is_read_without_an_error(bars):
    # no error, and no rate that the training bar's pattern does not read
    logs = [
        ["  Total optimization steps = 6", other, bar, "{'loss': 4.7, 'epoch': 0.5}", bar]
        for bar, other in bars
    ]
    for (bar, other), run in zip(bars, feeding.feed_each(hf_trainer.FAMILY, logs), strict=True):
        assert run.state.get("parse_errors") is None
        rate = run.facts.get("progress_sec_per_iter")
        if rate is not None:
            assert any(re.match(hf_trainer._TRAINING_BAR, text) for text in (bar, other)) and rate > 0


def test_gpu_count_from_launchers_and_world_sizes():
    def gpus(line: str) -> tuple:
        facts = feed_lines([line]).facts
        return facts.get("gpus"), facts.get("nodes"), facts.get("gpus_per_node")

    # set -x echo of torch.distributed.run (line 3), with --nnodes, and without it (its default is one node)
    assert gpus(_line(TORCHRUN_TQDM, 3)) == (2, 1, 2)
    assert gpus(_line(TORCHRUN_FAILED, 5)) == (2, 1, 2)
    # "+ export WORLD_SIZE=2" (set -x), torch elastic's "  global_world_sizes=[2, 2]", DeepSpeed's launcher
    assert gpus(_line(TORCHRUN_FAILED, 3))[0] == 2
    assert gpus(_line(TORCHRUN_TQDM, 39))[0] == 2
    assert gpus(_line(DS_LAUNCHER, 4))[0] == 2  # "[INFO] [launch.py:170:main] dist_world_size=2"
    # DeepSpeed's comm.py mpi_discovery format, and the 2021 torch.distributed.launch flags with '='
    line = "Discovered MPI settings of world_rank=0, local_rank=0, world_size=64, master_addr=10.0.0.1, master_port=29500"
    assert gpus(line)[0] == 64
    assert gpus(
        "python -u -m torch.distributed.launch --nproc_per_node=4 --nnodes=16 --node_rank 3 run_clm.py"
    ) == (
        64,
        16,
        4,
    )
    # BigScience's srun of a quoted command: the launcher's flags are the quoted command's
    quoted = "+ srun --jobid 4242 bash -c 'python -u -m torch.distributed.launch --nproc_per_node 4 --nnodes 16 pretrain_gpt.py'"
    assert gpus(quoted) == (64, 16, 4)
    # accelerate launch: --num_processes counts the processes of every machine
    assert gpus("+ accelerate launch --num_processes 16 --num_machines 2 --machine_rank 0 run_clm.py") == (
        16,
        2,
        8,
    )
    assert gpus("+ accelerate launch --num_processes=8 --mixed_precision bf16 run_clm.py") == (8, 1, 8)
    # the example scripts' warning of a process that is not distributed: it drives n_gpu GPUs
    one = "11/13/2024 10:02:41 - WARNING - __main__ - Process rank: 0, device: cuda:0, n_gpu: 2, distributed training: False, 16-bits training: True"
    assert gpus(one)[0] == 2 and gpus(one.replace("False", "True"))[0] is None
    assert gpus(one.replace("n_gpu: 2, distributed", "n_gpu: 1distributed"))[0] == 1  # run_clm.py of 4.2x
    # accelerate launch without flags warns of the defaults it took (commands/launch.py): its world
    defaults = [
        "The following values were not passed to `accelerate launch` and had defaults used instead:",
        "\t`--num_processes` was set to a value of `4`",
        "\t\tMore than one GPU was found, enabling multi-GPU training.",
        "\t`--num_machines` was set to a value of `1`",
        "\t`--mixed_precision` was set to a value of `'no'`",
    ]
    facts = feed_lines(defaults).facts
    assert (facts["gpus"], facts["nodes"], facts.get("precision")) == (4, 1, None)
    # accelerate's --mixed_precision is the run's precision (a TrainingArguments dump's, later, wins)
    for precision in ("bf16", "fp16"):
        line = f"+ accelerate launch --mixed_precision {precision} sft.py --per_device_train_batch_size 4"
        assert feed_lines([line]).facts["precision"] == precision
        assert feed_lines([line.replace(precision, "no")]).facts.get("precision") is None
    # the deepspeed launcher (launcher/runner.py): --num_gpus a node's, --num_nodes of the hostfile's (-1: all)
    assert gpus(
        "+ deepspeed --num_gpus=8 --num_nodes=2 --hostfile hostfile run_clm.py --deepspeed ds.json"
    ) == (
        16,
        2,
        8,
    )
    assert gpus("+ deepspeed --num_gpus 8 --hostfile hostfile run_clm.py") == (None, None, 8)
    # a node's, a role's, the node count (elastic's "  group_world_size=1", line 34), DP: no GPU count
    for line in (
        _line(TORCHRUN_TQDM, 34),
        "LOCAL_WORLD_SIZE=4",
        "role_world_size=8",
        "\t self.dp_world_size=2",
        "torchrun --nproc_per_node gpu --nnodes 1:4 train.py",  # elastic range, "as many as GPUs"
    ):
        assert gpus(line)[0] is None, line
    # the whole file: the launcher, then elastic's rendezvous (line 39), the later statement recorded
    run = feed(TORCHRUN_TQDM)
    assert run.facts["gpus"] == 2 and run.provenance["gpus"] == "hf-trainer:39"
    # launch context is no evidence of the HF Trainer (a Megatron job has launchers too)
    assert feed_lines([_line(TORCHRUN_TQDM, 3), _line(TORCHRUN_TQDM, 39)]).families_seen == {}


def test_an_evaluation_inside_training_is_a_metric_of_the_step_before_it():
    # evaluation_strategy steps: the Trainer logs each evaluation's metrics (Trainer.evaluate's
    # speed_metrics("eval", ...): eval_runtime in seconds) after the step's own dict
    lines = [
        "{'loss': 3.49, 'learning_rate': 9e-06, 'epoch': 0.01}",
        "{'eval_loss': 3.59, 'eval_runtime': 30.25, 'eval_samples_per_second': 80.0, 'eval_steps_per_second': "
        "1.25, 'epoch': 0.01}",
        "{'loss': 3.48, 'learning_rate': 8e-06, 'epoch': 0.02}",
        # --do_eval's evaluation after training: not timed by train_runtime
        "{'train_runtime': 500.0, 'train_samples_per_second': 128.0, 'train_steps_per_second': 2.0, 'epoch': 0.02}",
        "{'eval_loss': 3.58, 'eval_runtime': 44.5, 'eval_samples_per_second': 80.0, 'epoch': 0.02}",
    ]
    frame = feed_lines(lines).iteration_frame
    assert frame.select("iteration", "loss", "eval_runtime_s").rows() == [(1, 3.49, 30.25), (2, 3.48, None)]


def test_moe_configs_give_the_experts_per_token_and_their_widths():
    # PretrainedConfig.to_json_string of Mixtral's and Qwen2-MoE's configs (their config.json values)
    mixtral = [
        "Model config MixtralConfig {",
        '  "intermediate_size": 14336,',
        '  "num_experts_per_tok": 2,',
        '  "num_local_experts": 8,',
        "}",
    ]
    facts = feed_lines(mixtral).facts
    assert (facts["moe_experts"], facts["moe_topk"], facts["ffn_hidden_size"]) == (8, 2, 14336)
    assert "moe_ffn_hidden_size" not in facts  # Mixtral's experts are intermediate_size wide
    qwen = [
        "Model config Qwen2MoeConfig {",
        '  "intermediate_size": 18944,',
        '  "moe_intermediate_size": 2560,',
        '  "num_experts": 64,',
        '  "num_experts_per_tok": 8,',
        '  "shared_expert_intermediate_size": 20480,',
        "}",
    ]
    facts = feed_lines(qwen).facts
    assert facts["moe_experts"] == 64
    assert (facts["moe_topk"], facts["moe_ffn_hidden_size"], facts["moe_shared_ffn_hidden_size"]) == (
        8,
        2560,
        20480,
    )


def test_mixtral_8x7b_config_gives_its_size(tmp_path):
    """Mixtral-8x7B's config.json as the Trainer prints it: every expert counted, 46,702,792,704 parameters
    (Mistral AI's "46.7B total"; formulas.llama_params' docstring derives it)."""
    config = {
        "hidden_act": '"silu"',
        "hidden_size": "4096",
        "intermediate_size": "14336",
        "max_position_embeddings": "32768",
        "num_attention_heads": "32",
        "num_experts_per_tok": "2",
        "num_hidden_layers": "32",
        "num_key_value_heads": "8",
        "num_local_experts": "8",
        "tie_word_embeddings": "false",
        "vocab_size": "32000",
    }
    log = tmp_path / "mixtral.out"
    lines = ",\n".join(f'  "{key}": {value}' for key, value in config.items())
    log.write_text(f"Model config MixtralConfig {{\n{lines}\n}}\n")
    run = load_runs([log]).runs.row(0, named=True)
    assert run["model_size_b"] * 1e9 == pytest.approx(46_702_792_704, abs=1)


def test_a_llama_style_config_gives_the_gated_mlp_and_grouped_query_attention():
    # PretrainedConfig.to_json_string (indent 2, keys sorted) of a LlamaConfig, as the Trainer logs it
    block = [
        "Model config LlamaConfig {",
        '  "hidden_act": "silu",',
        '  "hidden_size": 4096,',
        '  "intermediate_size": 14336,',
        '  "max_position_embeddings": 8192,',
        '  "model_type": "llama",',
        '  "num_attention_heads": 32,',
        '  "num_hidden_layers": 32,',
        '  "num_key_value_heads": 8,',
        '  "tie_word_embeddings": false,',
        '  "vocab_size": 128256',
        "}",
    ]
    facts = feed_lines(block).facts
    assert facts["ffn_hidden_size"] == 14336 and facts["swiglu"] is True
    assert (facts["num_heads"], facts["num_query_groups"]) == (32, 8)
    assert facts["untied_embeddings"] is True  # its own output layer: counted in the model size
    # GPT-2's config names its activation activation_function: its two-matrix MLP is no gated one
    gpt2 = feed_lines(
        [
            "Model config GPT2Config {",
            '  "activation_function": "gelu_new",',
            '  "n_embd": 768,',
            '  "tie_word_embeddings": true,',
            "}",
        ]
    )
    assert "swiglu" not in gpt2.facts
    assert gpt2.facts["untied_embeddings"] is False  # the output layer is the embedding's matrix
    gelu = feed_lines(
        ["Model config GPTNeoXConfig {", '  "hidden_act": "gelu",', '  "intermediate_size": 24576,', "}"]
    )
    assert gelu.facts["swiglu"] is False


def test_one_block_at_a_time_as_transformers_prints_them():
    """A block ends where another opens (the Trainer prints one at a time: a line opening a block is no
    line of the one open)."""
    # the config printed inside the dump ends it: the dump's last field is not read
    run = feed_lines(
        [
            "TrainingArguments(",
            "gradient_accumulation_steps=2,",
            "Model config GPT2Config {",
            '  "n_embd": 64,',
            "}",
        ]
        + ["per_device_train_batch_size=8,", ")"]
    )
    assert (run.facts["gas"], run.facts["hidden_size"]) == (2, 64) and "micro_batch_size" not in run.facts
    # a second dump's opener starts its 400 lines again
    filler = ["output_dir=out,"] * 350
    run = feed_lines(
        ["TrainingArguments(", *filler, "TrainingArguments(", *filler[:100], "max_steps=5,", ")"]
    )
    assert run.facts["train_iters"] == 5 and run.provenance["train_iters"] == "hf-trainer:453"
    # ... and without it, a field after 400 lines is not the dump's
    assert (
        "train_iters"
        not in feed_lines(["TrainingArguments(", *filler, *filler[:50], "max_steps=5,", ")"]).facts
    )


def test_block_size_and_overrides_weigh_later_configs():
    config = ["Model config GPT2Config {", '  "n_positions": 1024,', '  "n_embd": 768,', "}"]
    command = "+ python run_clm.py --per_device_train_batch_size 2 --block_size 512"
    # the command line's block size, then a config: n_positions is only the longest possible length
    run = feed_lines([command, *config])
    assert run.facts["seq_len"] == 512 and run.provenance["seq_len"] == "hf-trainer:1"
    # a config, then the block size: the later statement
    run = feed_lines([*config, command, *config])
    assert run.facts["seq_len"] == 512 and run.provenance["seq_len"] == "hf-trainer:5"
    # an override before a config keeps its key; a key it does not name is the config's
    run = feed_lines(["Overriding config: n_embd=1024", *config])
    assert (run.facts["hidden_size"], run.facts["seq_len"]) == (1024, 1024)
    assert run.families_seen[hf_trainer.NAME] == 2  # the override and the config's n_positions


def test_logging_steps_known_before_a_dict_numbers_it():
    first = "{'loss': 4.705, 'learning_rate': 0.0004167, 'epoch': 0.25}"
    second = "{'loss': 4.71, 'learning_rate': 0.00025, 'epoch': 0.5}"
    # a dump before the command line: the command line's --logging_steps sets nothing
    dump = ["TrainingArguments(", "logging_steps=5,", ")"]
    command = "+ python run.py --per_device_train_batch_size 2 --logging_steps 10"
    assert sorted(feed_lines([*dump, command, first, second]).iterations) == [5, 10]
    assert sorted(feed_lines([command, *dump, first, second]).iterations) == [5, 10]  # the dump's, later
    assert sorted(feed_lines([command, first, second]).iterations) == [10, 20]
    # a ratio of max_steps (transformers >= 4.31): ceil(20 * 0.25) = 5
    ratio = ["TrainingArguments(", "logging_steps=0.25,", "max_steps=20,", ")"]
    assert sorted(feed_lines([*ratio, first, second]).iterations) == [5, 10]
    # a dict's own step is its step, and takes no place among the numbered ones
    own = "{'loss': 1.0, 'step': 3, 'epoch': 0.1}"
    assert sorted(feed_lines([*dump, first, own, second]).iterations) == [3, 5, 10]
    # a dict printed before the dump is numbered without it
    assert sorted(feed_lines([first, *dump, second]).iterations) == [1, 10]


@pytest.mark.parametrize(
    "resume",
    [
        "[INFO|trainer.py:2161] 2024-05-02 10:00:00,000 >>   Continuing training from global step 500",  # 4.x
        "  Resuming training from checkpoint with epoch 0 and global step 500",  # transformers 5
    ],
)
def test_a_resumed_run_numbers_its_dicts_from_the_resumed_step(resume):
    first = "{'loss': 4.705, 'learning_rate': 0.0004167, 'epoch': 0.25}"
    second = "{'loss': 4.71, 'learning_rate': 0.00025, 'epoch': 0.5}"
    dump = ["TrainingArguments(", "logging_first_step=True,", "logging_steps=5,", ")"]
    assert sorted(feed_lines([*dump, resume, first, second]).iterations) == [505, 510]
    assert sorted(feed_lines([*dump, first, resume, second]).iterations) == [1, 505]
    # no logging_steps: the dicts' order, as without a resume
    assert sorted(feed_lines([resume, first, second]).iterations) == [1, 2]
    # a resume off the logging grid (an epoch's checkpoint): the Trainer logs at multiples of logging_steps
    off_grid = resume.replace("500", "781")
    assert sorted(feed_lines([*dump, off_grid, first, second]).iterations) == [785, 790]
    # the step it resumed from is a fact (the final metrics' runtime times the steps after it); the last wins
    run = feed_lines([resume, first, off_grid, second])
    assert (run.facts["resumed_step"], run.provenance["resumed_step"]) == (781, "hf-trainer:3")


def test_a_resumed_run_without_logging_steps_is_numbered_by_its_epochs_past_the_resume():
    """120,000 examples at 64 a step: 1,875 steps an epoch. Resumed at 3000, the Trainer logs at the
    multiples of logging_steps (100) past it; each dict's epoch (2 digits) is its step over 1,875."""
    banner = ["***** Running training *****", "  Num examples = 120,000", "  Num Epochs = 3"]
    banner += ["  Instantaneous batch size per device = 8", "  Gradient Accumulation steps = 1"]
    banner += ["  Total train batch size (w. parallel, distributed & accumulation) = 64"]
    banner += ["  Total optimization steps = 5,625", "  Continuing training from global step 3000"]
    steps = range(3100, 5700, 100)  # the epoch's rounding (9 steps) leaves the slope of a few dicts unsure
    dicts = [f"{{'loss': 2.5, 'learning_rate': 2e-05, 'epoch': {round(step / 1875, 2)}}}" for step in steps]
    assert sorted(feed_lines([*banner, *dicts]).iterations) == list(steps)
    # one dict alone after the resume shows no interval: the dicts' order
    assert sorted(feed_lines([*banner, dicts[0]]).iterations) == [1]


def test_bare_non_finite_floats_of_transformers_4_are_read():
    dicts = ["{'loss': 3.5, 'grad_norm': inf, 'learning_rate': 4.5e-05, 'epoch': 0.03}"]
    dicts.append("{'loss': nan, 'grad_norm': -inf, 'learning_rate': 4e-05, 'epoch': 0.06}")
    run = feed_lines(["TrainingArguments(", "logging_steps=50,", ")", *dicts])
    assert sorted(run.iterations) == [50, 100] and "parse_errors" not in run.state
    assert run.iterations[50]["grad_norm"] == math.inf and math.isnan(run.iterations[100]["loss"])
    assert run.iterations[100]["grad_norm"] == -math.inf


def test_a_logging_steps_ratio_of_an_epoch_run_is_of_the_banner_steps():
    # max_steps=-1: the Trainer computes the steps from the epochs; the banner prints them
    dump = ["TrainingArguments(", "logging_steps=0.1,", "max_steps=-1,", ")"]
    banner = "  Total optimization steps = 468"
    dicts = ["{'loss': 4.705, 'learning_rate': 0.0004167, 'epoch': 0.1}", "{'loss': 4.71, 'epoch': 0.2}"]
    assert sorted(feed_lines([*dump, banner, *dicts]).iterations) == [47, 94]


def test_an_epoch_logging_strategy_logs_at_each_epochs_end():
    dump = ["TrainingArguments(", "logging_steps=500,", "logging_strategy=IntervalStrategy.EPOCH,", ")"]
    dicts = [
        "{'loss': 0.5, 'learning_rate': 4e-05, 'epoch': 1.0}",
        "{'loss': 0.3, 'learning_rate': 2e-05, 'epoch': 2.0}",
    ]
    # transformers 4: the epochs and the optimization steps; 5 also prints the steps of an epoch
    banner_4 = ["  Num Epochs = 3", "  Total optimization steps = 2,343"]
    assert sorted(feed_lines([*dump, *banner_4, *dicts]).iterations) == [781, 1562]
    banner_5 = [
        "  Num Epochs = 3",
        "  Num update steps per epoch = 700",
        "  Total optimization steps = 2,100",
    ]
    assert sorted(feed_lines([*dump, *banner_5, *dicts]).iterations) == [700, 1400]
    # logging by steps: logging_steps, whatever the banner says of epochs
    steps = [dump[0], dump[1], "logging_strategy=steps,", ")"]
    assert sorted(feed_lines([*steps, *banner_4, *dicts]).iterations) == [500, 1000]


def test_final_metrics_copies_weigh_their_digits():
    lines = [
        "{'train_runtime': 11.2, 'train_samples_per_second': 4.276, 'epoch': 0.75}",
        "***** train metrics *****",
        "  train_runtime            = 0:00:11.22",
        "  train_samples_per_second =      4.2761",
        "  train_steps_per_second   =      0.535",
    ]
    run = feed_lines(lines)
    # 11.2 (3 digits) < 0:00:11.22 (4); 4.276 (4) < 4.2761 (5); 0.535 only in the block
    assert (run.facts["final_train_runtime_s"], run.provenance["final_train_runtime_s"]) == (
        11.22,
        "hf-trainer:3",
    )
    assert (run.facts["final_samples_per_sec"], run.provenance["final_samples_per_sec"]) == (
        4.2761,
        "hf-trainer:4",
    )
    assert run.facts["final_steps_per_sec"] == 0.535
    run = feed_lines(["***** train metrics *****", "  train_runtime = soon"])
    assert run.state["parse_errors"] == ["hf-trainer:2: train_runtime not a duration: 'soon'"]


_HOSTILE_NUMBERS = ("nan", "-inf", "1e400", "-0", "99999999999999999999999", "١٢", "1_000", "", "0x1F")


@settings(max_examples=30, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(sorted(range(1, 188))),
            st.lists(st.sampled_from(_HOSTILE_NUMBERS), min_size=8, max_size=8),
        ),
        min_size=1,
        max_size=10,
    )
)
def test_real_lines_with_hostile_numbers_are_read_without_an_error(chosen):
    # every number of a real line replaced: the reader notes what it cannot read, the frames build
    lines = PRINTER.read_text(encoding="utf-8").splitlines()
    logs = []
    for number, replacements in chosen:
        numbers = iter(replacements * 40)
        logs.append(
            [
                re.sub(
                    r"(?<![\w.])\d+(?:\.\d+)?(?![\w.])",
                    lambda _, numbers=numbers: next(numbers),
                    lines[number - 1],
                )
            ]
        )
    for run in feeding.feed_each(hf_trainer.FAMILY, logs):
        assert not [e for e in run.state.get("parse_errors", []) if "Error:" in e and "ValueError" not in e]


@pytest.mark.parametrize(
    "line",
    [
        "{" + "'loss': 1, " * 9000 + "}",
        "{'loss': " + "1" * 100_000 + "}",
        "TrainingArguments(" + "a=1, " * 20_000 + ")",
        "  Total optimization steps = " + "1," * 50_000,
        " 50%|" + "█" * 100_000 + "| 3/6 [00:05<00:05,  1.90s/it]",
        "+ python run.py --per_device_train_batch_size 2 " + "--x 1 " * 15_000,
    ],
)
def test_a_long_line_is_read_in_linear_time(line):
    started = time.perf_counter()
    feed_lines([line, "***** train metrics *****", line, "TrainingArguments(", line])
    assert time.perf_counter() - started < 10.0


#: a log whose records depend on records far before them: the arguments a dict's step and a dump's end
#: need, a dict printed again later, the digits of the final metrics' copies, an override and a block size
#: before a config, the banner's batch numbers, the training bar chosen after its last update
_FAR_APART = [
    "+ python run_clm.py --per_device_train_batch_size 2 --block_size 512 --logging_steps 10 --fp16",
    "Overriding config: n_embd=1024",
    "TrainingArguments(",
    "_n_gpu=2,",
    "bf16=False,",
    "fp16=False,",
    "logging_steps=5,",
    "local_rank=-1,",
    ")",
    "  Instantaneous batch size per device = 4",
    "  Gradient Accumulation steps = 2",
    " 10%|█         | 1/10 [00:01<00:09,  1.10s/it]",
    "{'loss': 4.705, 'learning_rate': 0.0004167, 'epoch': 0.25}",
    "  3%|▎         | 1/30 [00:00<00:05,  5.50it/s]",
    "{'loss': 4.71, 'learning_rate': 0.00025, 'epoch': 0.5}",
    "  Continuing training from global step 40",
    "100%|██████████| 10/10 [00:11<00:00,  1.25s/it]",
    "{'loss': 4.705, 'learning_rate': 0.0004167, 'epoch': 0.25}",
    "Model config GPT2Config {",
    '  "n_embd": 768,',
    '  "n_positions": 1024,',
    "}",
    "  Total train batch size (w. parallel, distributed & accumulation) = 16",
    "{'train_runtime': 11.2, 'train_samples_per_second': 4.276, 'epoch': 0.75}",
    " 67%|██████▋   | 20/30 [00:04<00:02,  5.00it/s]",
    "***** train metrics *****",
    "  train_runtime            = 0:00:11.22",
    "  train_samples_per_second =      4.276",
    "{'loss': 4.6, 'learning_rate': 0.0001, 'epoch': 1.0}",
    "  Total optimization steps = 10",
]


@pytest.mark.parametrize("batch_bytes", [1, 1000, 8000])
def test_a_log_read_in_segments_gives_the_frames_it_gives_read_whole(tmp_path, monkeypatch, batch_bytes):
    (tmp_path / "far_apart.log").write_text("".join(f"{line}\n\n" for line in _FAR_APART))
    paths = [tmp_path / "far_apart.log"]
    if batch_bytes > 1:  # a batch a line costs seconds a fixture
        paths += [*sorted(FIXTURES.glob("*.out")), *sorted(FIXTURES.glob("*.log"))]
    groups = reader.group_runs(paths)
    whole = reader.frames(reader.read_runs(groups, [hf_trainer.FAMILY]))
    assert whole[0].filter(pl.col("path").str.ends_with("far_apart.log")).select(
        "hidden_size", "seq_len", "gpus", "dp", "precision", "final_train_runtime_s", "progress_sec_per_iter"
    ).row(0) == (1024, 512, 2, 2, "fp32", 11.22, 1.25)
    far_apart = whole[1].filter(pl.col("path").str.ends_with("far_apart.log"))
    # resumed at 40: one process prints a dict once, so the first dict printed again is step 45 (its prints
    # so far are carried), the last 50
    assert far_apart["iteration"].to_list() == [5, 10, 45, 50]
    monkeypatch.setattr(engine, "FLUSH_RECORDS", 1)  # a read after every batch
    monkeypatch.setattr(source, "CHUNK_BYTES", min(batch_bytes, 4096))
    monkeypatch.setattr(source, "batches", partial(source.batches, batch_bytes=batch_bytes))
    reads = []
    read_group = engine._read_group
    monkeypatch.setattr(engine, "_read_group", lambda *args: reads.append(1) or read_group(*args))
    for got, want in zip(reader.frames(reader.read_runs(groups, [hf_trainer.FAMILY])), whole, strict=True):
        assert got.equals(want)
    assert len(reads) > 5


#: run_glue.py --do_eval without --do_train: Trainer.evaluate(), then log_metrics("eval", ...)
_EVALUATION = [
    "***** Running Evaluation *****",
    "  Num examples = 872",
    "100%|██████████| 14/14 [00:03<00:00,  4.12it/s]",
    "***** eval metrics *****",
    "  eval_loss               =     0.2451",
    "  eval_runtime            = 0:00:03.41",
]
_TRAINING = [
    "TrainingArguments(",
    "logging_steps=10,",
    ")",
    "{'loss': 2.3016, 'grad_norm': 1.23, 'learning_rate': 5e-05, 'epoch': 0.1}",
    "{'loss': 2.2016, 'grad_norm': 1.2, 'learning_rate': 4e-05, 'epoch': 0.2}",
]


def _status(tmp_path, lines: list[str]) -> tuple:
    (tmp_path / "job.out").write_text("\n".join(lines) + "\n")
    row = load_runs([tmp_path / "job.out"]).runs.row(0, named=True)
    return row["status"], row["reason"], row["reason_line"]


def test_an_evaluation_only_run_ends_with_its_metrics(tmp_path):
    assert _status(tmp_path, _EVALUATION) == ("ok", hf_trainer.EVALUATED, 4)
    # --do_predict alone: Trainer.log_metrics("predict", ...), or a script's "test" split
    for split in ("predict", "test"):
        metrics = [line.replace("eval", split) for line in _EVALUATION]
        assert _status(tmp_path, metrics) == ("ok", hf_trainer.EVALUATED, 4)


def test_an_evaluation_before_training_is_no_end_of_the_training(tmp_path):
    status, reason, line = _status(tmp_path, [*_EVALUATION, *_TRAINING])
    assert (status, line) == ("incomplete", 11) and reason.startswith("log stops after iteration 20")
    # after training, the final train metrics say the run ended, not the evaluation
    final = "{'train_runtime': 8.669, 'train_samples_per_second': 7.38, 'epoch': 1.0}"
    status, reason, line = _status(tmp_path, [*_TRAINING, final, *_EVALUATION])
    assert (status, reason, line) == ("ok", "final train metrics logged (final_train_runtime_s=8.669)", 6)


def test_a_requeued_run_resumed_into_its_log_replaces_the_steps_it_logs_again():
    # launch 1 logs steps 10-30 and is requeued; launch 2 resumes from the step-20 checkpoint into the same
    # log: its step 30 replaces launch 1's, and each row says which launch logged it
    dump = ["TrainingArguments(", "logging_steps=10,", ")"]
    first = [f"{{'loss': {loss}, 'learning_rate': 5e-05, 'epoch': 0.1}}" for loss in (3.0, 2.5, 2.0)]
    second = [f"{{'loss': {loss}, 'learning_rate': 4e-05, 'epoch': 0.2}}" for loss in (2.1, 1.9)]
    banner, resume = "***** Running training *****", "  Continuing training from global step 20"
    run = feed_lines([*dump, banner, *first, *dump, banner, resume, *second])
    rows = run.iteration_frame.select("iteration", "launch", "loss").rows()
    assert rows == [(10, 0, 3.0), (20, 0, 2.5), (30, 1, 2.1), (40, 1, 1.9)]


def test_a_run_started_again_from_scratch_into_its_log_numbers_its_dicts_from_the_start():
    dump = ["TrainingArguments(", "logging_first_step=True,", "logging_steps=10,", ")"]
    banner = "***** Running training *****"
    first = [f"{{'loss': {loss}, 'learning_rate': 5e-05, 'epoch': 0.1}}" for loss in (3.0, 2.5, 2.0)]
    again = [f"{{'loss': {loss}, 'learning_rate': 5e-05, 'epoch': 0.1}}" for loss in (3.1, 2.6)]
    run = feed_lines([*dump, banner, *first, *dump, banner, *again])
    rows = run.iteration_frame.select("iteration", "launch", "loss").rows()
    # the first launch's steps are another training's: step 20 of it is not this one's
    assert rows == [(1, 1, 3.1), (10, 1, 2.6)]
    assert "resumed_step" not in run.facts  # a start from scratch is no resume


@pytest.mark.parametrize(
    ("grad_norm", "value"),
    [
        ("tensor(1.2910, device='cuda:0')", 1.291),
        ("tensor(2.3438, device='cuda:0', dtype=torch.bfloat16)", 2.3438),
        ("tensor(0.8125, grad_fn=<NormBackward1>)", 0.8125),
        ("tensor(1.5000e+01, device='cuda:0')", 15.0),
    ],
)
def test_a_grad_norm_logged_as_a_tensor_is_its_number(grad_norm, value):
    # transformers 4.38.0 trainer.py:2012 under DeepSpeed: grad_norm = model.get_global_grad_norm() (a tensor under
    # ZeRO-3), trainer.py:2401 logs["grad_norm"] = grad_norm, and ProgressCallback.on_log (trainer_callback.py:524)
    # writes str(logs): the tensor's repr; later releases log its .item() (5.24 trainer.py:2264, 2799-2800)
    dicts = [f"{{'loss': 1.95, 'grad_norm': {grad_norm}, 'learning_rate': 1.9e-05, 'epoch': 0.1}}"]
    dicts.append(
        "{'loss': nan, 'grad_norm': tensor(nan, device='cuda:0'), 'learning_rate': 1.8e-05, 'epoch': 0.2}"
    )
    run = feed_lines(["TrainingArguments(", "logging_steps=10,", ")", *dicts])
    assert sorted(run.iterations) == [10, 20] and "parse_errors" not in run.state
    step = run.iterations[10]
    assert (step["loss"], step["lr"], step["grad_norm"]) == (1.95, 1.9e-05, value)
    assert math.isnan(run.iterations[20]["grad_norm"]) and math.isnan(run.iterations[20]["loss"])


#: a multi-line dump's fields as TrainingArguments.__str__ prints them, sorted (transformers 4.38.0
#: training_args.py:1849-1860, 5.24 training_args.py:1809-1815): 4.x's first field is _n_gpu (4.38.0
#: training_args.py:1259), 5.x's accelerator_config (_n_gpu is no field there: str(TrainingArguments(...)))
_DUMP_4 = ["_n_gpu=1,", "bf16=True,", "fp16=False,", "gradient_accumulation_steps=2,", "local_rank=0,"]
_DUMP_4 += [
    "logging_first_step=True,",
    "logging_steps=5,",
    "max_steps=-1,",
    "per_device_train_batch_size=16,",
    ")",
]
_DUMP_5 = ["accelerator_config={'split_batches': False, 'dispatch_batches': None},", *_DUMP_4[1:]]


@pytest.mark.parametrize("fields", [_DUMP_4, _DUMP_5], ids=["transformers-4", "transformers-5"])
@pytest.mark.parametrize("header", ["SFTConfig(", "DPOConfig(", "GRPOConfig(", "MyTrainingConfig("])
def test_a_training_arguments_subclass_dump_reads_as_training_arguments(fields, header):
    # TRL's configs subclass TrainingArguments (trl 0.9.6 sft_config.py:21; trl 1.16.0 base_config.py:21,
    # sft_config.py:23) and define no __str__: the dump is TrainingArguments.__str__'s, headed
    # f"{self.__class__.__name__}(" (alignment-handbook's run_sft.py logs "Training/evaluation parameters {training_args}")
    prefix = "2024-02-01 10:00:00 - INFO - __main__ - Training/evaluation parameters "
    dicts = ["{'loss': 1.6, 'grad_norm': 10.5, 'learning_rate': 2.5e-06, 'epoch': 0.01}"]
    dicts.append("{'loss': 1.495, 'grad_norm': 0.81, 'learning_rate': 1.875e-05, 'epoch': 0.06}")
    subclass = feed_lines([prefix + header, *fields, *dicts])
    assert (subclass.facts["micro_batch_size"], subclass.facts["gas"]) == (16, 2)
    assert (subclass.facts["precision"], sorted(subclass.iterations)) == ("bf16", [1, 5])
    assert subclass.provenance["micro_batch_size"] == "hf-trainer:10"
    base = feed_lines([prefix + "TrainingArguments(", *fields, *dicts])
    assert (subclass.facts, subclass.provenance) == (base.facts, base.provenance)


#: Mistral-7B's printed config: a 32k context (trl_sft_mistral_maxseq.log's model config, trimmed)
_MISTRAL = [
    "Model config MistralConfig {",
    '  "hidden_size": 4096,',
    '  "max_position_embeddings": 32768,',
    "}",
]


@pytest.mark.parametrize(
    ("stated", "length"),
    [
        # TRL's SFT script, flags made by HfArgumentParser from SFTConfig's fields: max_seq_length (trl 0.9.6
        # sft_config.py:58), max_length in later TRL (trl 1.16.0 sft_config.py:202); model_max_length: the field
        # of Alpaca's and FastChat's train.py TrainingArguments subclass
        (
            "+ accelerate launch --num_processes 8 sft.py --per_device_train_batch_size 4 --max_seq_length 2048",
            2048,
        ),
        (
            "+ accelerate launch --num_processes 8 sft.py --per_device_train_batch_size 4 --max_length 1024",
            1024,
        ),
        (
            "+ torchrun --nproc_per_node=8 train.py --per_device_train_batch_size 4 --model_max_length 4096",
            4096,
        ),
        # the dump of the config (TrainingArguments.__str__: a field a line), the class TRL's
        (["SFTConfig(", "_n_gpu=1,", "max_seq_length=2048,", "per_device_train_batch_size=16,", ")"], 2048),
        (["SFTConfig(", "_n_gpu=1,", "max_length=1024,", "per_device_train_batch_size=16,", ")"], 1024),
        # no length trained on: TRL's default None (trl 0.9.6 sft_config.py:58), a generation length (Seq2Seq)
        (["DPOConfig(", "_n_gpu=1,", "max_length=None,", "generation_max_length=128,", ")"], 32768),
    ],
)
def test_the_length_trained_on_wins_over_the_models_context(stated, length):
    # a TRL SFT run of a 32k-context model on 2048-token sequences: max_position_embeddings is only the longest
    # possible length; stated before the config (as scripts print them) or after it
    stated = [stated] if isinstance(stated, str) else stated
    for lines in ([*stated, *_MISTRAL], [*_MISTRAL, *stated]):
        assert feed_lines(lines).facts["seq_len"] == length, lines


def test_without_logging_steps_the_dicts_epochs_and_the_banner_give_their_steps():
    # no TrainingArguments printed: the Trainer's epoch is the micro-steps done over an epoch's, so a dict's
    # step is its epoch times the banner's update steps per epoch, and the dicts come every logging_steps
    def dicts(interval: int, per_epoch: int, count: int, digits: int = 2) -> list[str]:
        epochs = (round(interval * k / per_epoch, digits) for k in range(1, count + 1))
        return [
            f"{{'loss': {2 + k / 1000}, 'learning_rate': 1e-05, 'epoch': {e}}}" for k, e in enumerate(epochs)
        ]

    banner = ["***** Running training *****", "  Num Epochs = 3", "  Total optimization steps = 300"]
    assert sorted(feed_lines([*banner, *dicts(20, 100, 11)]).iterations) == list(range(20, 221, 20))
    # 469 steps an epoch (1,407 over 3 epochs), every 5, the epoch to 2 digits as transformers 4.3x prints it
    banner_469 = [banner[0], "  Num Epochs = 3", "  Total optimization steps = 1,407"]
    assert sorted(feed_lines([*banner_469, *dicts(5, 469, 59)]).iterations) == list(range(5, 296, 5))
    # transformers 5's "Num update steps per epoch"; its values are strings of 4 significant digits
    per_epoch = [banner[0], "  Num Epochs = 2", "  Num update steps per epoch = 10,000"]
    lines = [line.replace("'epoch': ", "'epoch': '").replace("}", "'}") for line in dicts(10, 10_000, 40, 6)]
    assert sorted(feed_lines([*per_epoch, *lines]).iterations) == list(range(10, 401, 10))
    # epochs that no interval fits, or no banner: the dicts' order
    uneven = [line.replace("'epoch': 0.4", "'epoch': 0.45") for line in dicts(20, 100, 3)]
    assert sorted(feed_lines([*banner, *uneven]).iterations) == [1, 2, 3]
    assert sorted(feed_lines(dicts(20, 100, 3)).iterations) == [1, 2, 3]
    # logging_first_step (Axolotl's and TRL's configs set it): a step-1 dict, then every 20
    first = "{'loss': 2.5, 'learning_rate': 1e-05, 'epoch': 0.01}"
    assert sorted(feed_lines([*banner, first, *dicts(20, 100, 11)]).iterations) == [1, *range(20, 221, 20)]
    # transformers 4 with max_steps: 300 steps of 322 an epoch count 1 epoch (300 / 1 is no epoch's steps);
    # the examples give them, ceil(ceil(41,300 / 4) / 8 processes) // 4 = 322; an evaluation's bare count
    # (10000) between the dicts is not the training's
    banner_examples = [banner[0], "  Num examples = 41,300", "  Num Epochs = 1"]
    banner_examples += ["  Instantaneous batch size per device = 4", "  Gradient Accumulation steps = 4"]
    banner_examples += ["  Total train batch size (w. parallel, distributed & accumulation) = 128"]
    banner_examples += ["  Total optimization steps = 300"]
    evaluation = ["***** Running Evaluation *****", "  Num examples = 10000", "  Batch size = 32"]
    logged = dicts(10, 322, 30, 4)
    lines = [*banner_examples, *logged[:15], *evaluation, *logged[15:]]
    assert sorted(feed_lines(lines).iterations) == list(range(10, 301, 10))


def test_a_command_line_relying_on_the_default_batch_is_read_too():
    # no --per_device_train_batch_size (the default 8): its trained length, planned steps and logging interval
    command = (
        "+ accelerate launch --num_processes 4 --num_machines 1 --mixed_precision bf16 train.py"
        " --block_size 1024 --max_steps 60 --logging_steps 20"
    )
    dicts = [f"{{'loss': '{loss}', 'learning_rate': '1e-05', 'epoch': '{epoch}'}}" for loss, epoch in
             (("3.14", "0.33"), ("3.08", "0.67"), ("3.02", "1.0"))]  # fmt: skip
    run = feed_lines([command, *dicts])
    facts = {name: run.facts.get(name) for name in ("seq_len", "train_iters", "gpus", "precision")}
    assert facts == {"seq_len": 1024, "train_iters": 60, "gpus": 4, "precision": "bf16"}
    assert sorted(run.iterations) == [20, 40, 60]
    plain = feed_lines(["+ python run_clm.py --model_name_or_path gpt2 --max_seq_length 512", *dicts])
    assert plain.facts["seq_len"] == 512


def test_the_banner_in_the_err_numbers_the_dicts_in_the_out(tmp_path):
    # trainer.py logs its banner (logger.info: stderr) while ProgressCallback writes the dicts (tqdm.write:
    # stdout): a job's .out holds the dicts, its .err the steps per epoch they are numbered by
    from logstat.api import load_runs

    dicts = [f"{{'loss': {3 - k / 100}, 'learning_rate': 1e-05, 'epoch': {k / 100}}}" for k in (1, 2, 3)]
    banner = ["***** Running training *****", "  Num Epochs = 1", "  Num update steps per epoch = 1,000"]
    (tmp_path / "sft-8123.out").write_text("\n".join([*dicts, ""]))
    (tmp_path / "sft-8123.err").write_text("\n".join([*banner, ""]))
    assert load_runs([tmp_path]).iterations["iteration"].to_list() == [10, 20, 30]
    # in one file a banner after the dicts is a later launch's: it does not number the dicts before it
    one = tmp_path / "one"
    one.mkdir()
    (one / "sft-8124.out").write_text("\n".join([*dicts, *banner, ""]))
    assert load_runs([one]).iterations["iteration"].to_list() == [1, 2, 3]


def test_the_echoed_command_in_the_err_numbers_the_dicts_in_the_out(tmp_path):
    # set -x echoes srun's command line to the .err: its --logging_steps numbers the .out's dicts
    from logstat.api import load_runs

    dicts = [f"{{'loss': {3 - k / 100}, 'learning_rate': 1e-05, 'epoch': {k / 100}}}" for k in (1, 2, 3)]
    command = "+ srun torchrun --nproc_per_node 8 train.py --max_steps 2000 --logging_steps 10"
    (tmp_path / "ft-4471223.out").write_text("\n".join([*dicts, ""]))
    (tmp_path / "ft-4471223.err").write_text(command + "\n")
    assert load_runs([tmp_path]).iterations["iteration"].to_list() == [10, 20, 30]


def test_accelerates_state_gives_the_processes():
    # accelerate's AcceleratorState.__repr__, as the no_trainer examples log it on every process
    state = ["Distributed environment: MULTI_GPU  Backend: nccl", "Num processes: 4", "Process index: 0"]
    state += ["Local process index: 0", "Device: cuda:0", "", "Mixed precision type: bf16"]
    assert feed_lines(state).facts["gpus"] == 4
    assert "gpus" not in feed_lines(["  Num processes: 4 of 8"]).facts


def test_dicts_without_an_interval_are_numbered_by_the_training_bar_before_them():
    """No logging_steps printed and epochs too coarse (0.00, 0.01, 0.01 of 9,750 steps): the Trainer's bar
    (tqdm(total=max_steps)), updated at each step's end before the step's dict is logged, counts them."""
    banner = ["***** Running training *****", "  Num examples = 52,002", "  Num Epochs = 3"]
    banner += ["  Total optimization steps = 9,750"]
    lines = list(banner)
    for step, epoch, loss in ((10, "0.00", 1.5), (20, "0.01", 1.4), (30, "0.01", 1.3)):
        lines.append(f"\r  0%|          | {step}/9750 [00:19<5:08:26,  1.90s/it]")
        lines.append(f"{{'loss': {loss}, 'grad_norm': 2.1, 'learning_rate': 6.7e-07, 'epoch': {epoch}}}")
    assert sorted(feed_lines(lines).iterations) == [10, 20, 30]
    # an evaluation's bar counts its batches, not the training's steps: the dicts' order
    other = [line.replace("/9750", "/50") for line in lines]
    assert sorted(feed_lines(other).iterations) == [1, 2, 3]


def test_trls_ppo_updates_are_steps_their_policy_loss_the_loss():
    """TRL's PPOTrainer logs each update's metrics through Trainer.log without a ``loss`` key."""
    lines = []
    for step, loss in ((1, -0.013052), (2, 0.004211)):
        lines.append(f"\r  2%|▏         | {step}/58 [01:01<58:20, 61.40s/it]")
        metrics = f"'objective/kl': 0.5, 'loss/policy_avg': {loss}, 'loss/value_avg': 0.27, 'lr': 2.9e-06"
        lines.append(f"{{'eps': 8, {metrics}, 'episode': {512 * step}, 'epoch': 0.0055}}")
    run = feed_lines(lines)
    assert {step: (row["loss"], row["lr"]) for step, row in run.iterations.items()} == {
        1: (-0.013052, 2.9e-06),
        2: (0.004211, 2.9e-06),
    }


def test_a_run_cut_off_past_its_last_dict_says_where_its_bar_got(tmp_path):
    lines = ["***** Running training *****", "  Num Epochs = 1", "  Total optimization steps = 500"]
    for step, loss in ((10, 2.56), (20, 2.47)):
        lines.append(f"\r  2%|▏         | {step}/500 [00:26<21:30,  2.63s/it]")
        lines.append(f"{{'loss': {loss}, 'learning_rate': 0.0002, 'epoch': 0.02}}")
    lines.append("\r  5%|▍         | 23/500 [00:58<21:01,  2.64s/it]")
    (tmp_path / "job.out").write_text("\n".join(lines) + "\n", encoding="utf-8")
    row = load_runs([tmp_path / "job.out"]).runs.row(0, named=True)
    # the step it got to is the bar's; its last logged step is the reason's
    assert (row["status"], row["last_iteration"], row["progress_steps"]) == ("incomplete", 23, 23)
    assert row["reason"] == (
        "log stops after iteration 20 of 500 (its progress bar at 23), with no failure or end message"
    )


def test_with_no_banner_the_bar_most_dicts_follow_numbers_them_and_is_the_plan():
    """A script at the default verbosity prints no banner: the Trainer's bar (tqdm(total=max_steps)) before
    each dict counts its step, not an evaluation's bar (its batches) before one, and its total is the plan
    (an evaluation's bar, full before the dicts: tests of _EVALUATION below)."""
    lines = []
    for step, loss in ((10, 2.56), (20, 2.47), (30, 2.41)):
        lines.append(f"\r  2%|▏         | {step}/500 [00:26<21:30,  2.63s/it]")
        lines.append(f"{{'loss': {loss}, 'learning_rate': 0.0002, 'epoch': 0.02}}")
    lines.insert(4, "\r 96%|█████████▌| 24/25 [00:03<00:00,  7.51it/s]")  # evaluation after step 20
    run = feed_lines(lines)
    assert sorted(run.iterations) == [10, 20, 30]
    assert run.facts["train_iters"] == 500


def test_the_resume_in_the_err_numbers_the_dicts_in_the_out(tmp_path):
    # the Trainer's resume notice goes to stderr with its banner (transformers 4.x: "Continuing training from
    # global step"), the dicts to stdout: the .out's dicts are after the resume at 1500, every 50 steps
    from logstat.api import load_runs

    dicts = [f"{{'loss': {1 - k / 100}, 'learning_rate': 1e-05, 'epoch': {k / 100}}}" for k in (52, 53, 55)]
    command = (
        "+ srun torchrun train.py --max_steps 3000 --logging_steps 50 --resume_from_checkpoint ckpt-1500"
    )
    banner = ["***** Running training *****", "  Num Epochs = 1", "  Total optimization steps = 3,000"]
    resume = [*banner, "  Continuing training from epoch 0", "  Continuing training from global step 1500"]
    (tmp_path / "sft-55120.out").write_text("\n".join([command, *dicts, ""]))
    (tmp_path / "sft-55120.err").write_text("\n".join([*resume, ""]))
    runs = load_runs([tmp_path])
    assert runs.iterations["iteration"].to_list() == [1550, 1600, 1650]
    assert runs.runs["resumed_step"].to_list() == [1500]
    # two banners in the .err: two launches, which of the .out's dicts are whose is not known
    twice = tmp_path / "twice"
    twice.mkdir()
    (twice / "sft-55121.out").write_text("\n".join([command, *dicts, ""]))
    (twice / "sft-55121.err").write_text("\n".join([*banner, *resume, ""]))
    assert load_runs([twice]).iterations["iteration"].to_list() == [50, 100, 150]


def test_a_command_in_a_comment_is_not_the_runs():
    # nanoGPT echoes its config file, whose comment shows how to launch it on 8 GPUs; the run used 4
    run = feed_lines(
        [
            "+ torchrun --standalone --nproc_per_node=4 train.py config/train_gpt2.py",
            "Overriding config with config/train_gpt2.py:",
            "# $ torchrun --standalone --nproc_per_node=8 train.py config/train_gpt2.py",
        ]
    )
    assert run.facts["gpus"] == 4 and run.provenance["gpus"] == "hf-trainer:1"


@pytest.mark.parametrize(
    "counts",
    [
        "trainable params: 6,553,600 || all params: 13,022,417,920 || trainable%: 0.0503",
        "trainable params: 6553600 || all params: 13022417920 || trainable%: 0.05032609261628233",  # older peft
    ],
)
def test_peft_counts_the_whole_model_where_the_banner_counts_the_adapter(counts):
    banner = "  Number of trainable parameters = 6,553,600"
    run = feed_lines([counts, "***** Running training *****", banner])
    assert (run.facts["logged_model_size"], run.provenance["logged_model_size"]) == (
        13.02241792,
        "hf-trainer:1",
    )
    # with no PEFT line the banner's count is the logged size (a full fine-tune's: every parameter trains)
    alone = feed_lines(["***** Running training *****", banner])
    assert alone.facts["logged_model_size"] == 0.0065536


def test_peft_counts_in_the_jobs_other_file_still_count(tmp_path):
    # PEFT prints to stdout (.out), the Trainer's logger its banner to stderr (.err)
    from logstat.api import load_runs

    (tmp_path / "lora-77.out").write_text(
        "trainable params: 6,553,600 || all params: 13,022,417,920 || trainable%: 0.0503\n"
    )
    (tmp_path / "lora-77.err").write_text(
        "***** Running training *****\n  Number of trainable parameters = 6,553,600\n"
    )
    row = load_runs([tmp_path]).runs.row(0, named=True)
    assert row["model_size_b"] == 13.02241792


def test_a_steps_dict_with_the_runtime_so_far_is_a_step_not_the_final_metrics():
    # transformers 5 with --include_num_input_tokens_seen: Trainer.log adds speed_metrics("train", start_time,
    # num_tokens=...) to every logged dict; the final dict has the run's train_loss, no loss
    lines = [
        "{'loss': '1.464', 'grad_norm': '0.8125', 'learning_rate': '1.9e-05', 'epoch': '0.025', "
        "'num_input_tokens_seen': 2621440, 'train_runtime': '31.83', 'train_tokens_per_second': '82357.2'}",
        "{'loss': '1.402', 'grad_norm': '0.7891', 'learning_rate': '1.8e-05', 'epoch': '0.05', "
        "'num_input_tokens_seen': 5242880, 'train_runtime': '60.41', 'train_tokens_per_second': '86788.3'}",
        "{'train_runtime': '1198', 'train_samples_per_second': '21.37', 'train_steps_per_second': '0.334', "
        "'train_loss': '1.211', 'epoch': '1'}",
    ]
    run = feed_lines(lines)
    assert run.facts["final_train_runtime_s"] == 1198
    assert run.provenance["final_train_runtime_s"] == "hf-trainer:3"
    assert run.iteration_frame["loss"].to_list() == [1.464, 1.402]


@pytest.mark.parametrize(
    ("config", "gated"),
    [
        # a gated MLP by its architecture, whatever the activation: Gemma's is GELU
        (['  "hidden_act": "gelu_pytorch_tanh",', '  "model_type": "gemma",'], True),
        (['  "model_type": "llama",'], True),  # no activation printed
        (['  "activation_function": "gelu_new",', '  "model_type": "gpt2",'], None),
        (['  "hidden_act": "gelu",', '  "model_type": "gpt_neox",'], False),
    ],
)
def test_a_model_configs_type_says_whether_its_mlp_is_gated(config, gated):
    run = feed_lines(["Model config LlamaConfig {", '  "hidden_size": 4096,', *config, "}"])
    assert run.facts.get("swiglu") == gated


def test_unsloths_banner_states_the_gpus_and_batches():
    # Unsloth 2025's patched training loop; its model loader's "Num GPUs = 8." counts the devices it sees
    lines = [
        "==((====))==  Unsloth 2025.3.19: Fast Qwen2 patching. Transformers: 4.50.0.",
        "   \\\\   /|    NVIDIA H100 80GB HBM3. Num GPUs = 8. Max memory: 79.1 GB. Platform: Linux.",
        "==((====))==  Unsloth - 2x faster free finetuning | Num GPUs used = 1",
        "   \\\\   /|    Num examples = 10,000 | Num Epochs = 1 | Total steps = 500",
        "O^O/ \\_/ \\    Batch size per device = 4 | Gradient accumulation steps = 4",
        "\\        /    Data Parallel GPUs = 1 | Total batch size (4 x 4 x 1) = 16",
        ' "-____-"     Trainable parameters = 68,812,800/14,770,033,664 (0.47% trained)',
    ]
    facts = feed_lines(lines).facts
    stated = dict(gpus=1, micro_batch_size=4, gas=4, dp=1, global_batch_size=16, train_iters=500)
    assert {name: facts.get(name) for name in stated} == stated
    assert facts["logged_model_size"] == 14.770033664  # the whole model's, not the adapter's


def test_unsloths_total_steps_let_its_bar_number_the_dicts():
    # no logging_steps printed and no epochs to fit: the bar before each dict counts to Unsloth's total
    banner = ["==((====))==  Unsloth - 2x faster free finetuning | Num GPUs used = 1"]
    banner.append("   \\\\   /|    Num examples = 10,000 | Num Epochs = 1 | Total steps = 500")
    lines = [*banner, "  0%|          | 0/500 [00:00<?, ?it/s]"]
    for step in range(1, 16):
        lines.append(f"  {step // 5}%|          | {step}/500 [00:{step * 3:02d}<20:00,  3.00s/it]")
        if step % 5 == 0:
            lines.append(f"{{'loss': 1.{step}, 'grad_norm': 0.4, 'learning_rate': 0.0001}}")
    run = feed_lines(lines)
    assert run.iteration_frame.sort("iteration")["iteration"].to_list() == [5, 10, 15]


def test_transformers_3_logged_its_dicts_as_json_with_their_step():
    # 3.0's Trainer._log: iterator.write(json.dumps({**logs, "step": global_step})) under the nested
    # "Iteration" bar, the cursor moved up to it (\x1b[A); its end: "Training completed. ..."
    bar = "\rIteration:  90%|█████████ | 2119/2342 [05:25<00:33,  6.63it/s]\x1b[A"
    lines = [
        "07/21/2020 14:02:44 - INFO - transformers.trainer -     Instantaneous batch size per GPU = 2",
        bar + '{"loss": 3.44496862411499, "learning_rate": 4.7e-05, "epoch": 0.17, "step": 100}',
        bar + '{"loss": 3.3939822524785996, "learning_rate": 4.4e-05, "epoch": 0.34, "step": 200}',
        "07/21/2020 14:20:45 - INFO - transformers.trainer -   ",
        "",
        "Training completed. Do not forget to share your model on huggingface.co/models =)",
    ]
    run = feed_lines(lines)
    assert run.iteration_frame.select("iteration", "loss").rows() == [
        (100, 3.44496862411499),
        (200, 3.3939822524785996),
    ]
    assert run.facts["micro_batch_size"] == 2  # 2.x's wording of the banner's line
    assert run.completion[:2] == (lines[-1], 6)


@pytest.mark.parametrize(
    "warning",
    [
        # run_clm 4.1x, 4.2x, 4.3x on: the block it trains on where the tokenizer's is longer
        "The tokenizer picked seems to have a very large `model_max_length` (2048). Picking 1024 instead. "
        "You can change that default value by passing --block_size xxx.",
        "The chosen tokenizer supports a `model_max_length` that is longer than the default `block_size` value "
        "of 1024. If you would like to use a longer `block_size` up to `tokenizer.model_max_length` you can "
        "override this default with `--block_size xxx`.",
        "The tokenizer picked seems to have a very large `model_max_length` (1000000000000000019884624838656). "
        "Using block_size=1024 instead. You can change that default value by passing --block_size xxx.",
    ],
)
def test_run_clms_chosen_block_is_the_sequence_length(warning):
    prefix = "11/02/2021 10:00:00 - WARNING - __main__ - "
    config = ["Model config GPT2Config {", '  "n_positions": 2048,', "}"]
    run = feed_lines([*config, prefix + warning])
    assert run.facts["seq_len"] == 1024  # not the model's 2048 positions


def test_a_trainer_runs_gpus_are_its_data_parallel_ranks():
    # no banner (the script leaves transformers at WARNING): micro x accumulation x GPUs is the batch
    command = (
        "+ torchrun --nproc_per_node=4 --master_port=29501 train.py --per_device_train_batch_size 4 "
        "--gradient_accumulation_steps 8 --fsdp 'full_shard auto_wrap'"
    )
    lines = [command, "{'loss': 1.2, 'learning_rate': 2e-05, 'epoch': 0.1}"]
    row = load_runs_of(lines).runs.row(0, named=True)
    assert (row["tp"], row["pp"], row["dp"], row["global_batch_size"]) == (1, 1, 4, 128)


def test_a_trainer_run_that_failed_before_its_first_step_is_data_parallel_too():
    command = "+ torchrun --nproc_per_node=4 train.py --per_device_train_batch_size 4 --deepspeed ds_z2.json"
    banner = ["***** Running training *****", "  Instantaneous batch size per device = 4"]
    resume = [
        "Traceback (most recent call last):",
        '  File "/opt/conda/lib/python3.10/site-packages/torch/serialization.py", line 1004, in load',
        "RuntimeError: PytorchStreamReader failed reading zip archive: failed finding central directory",
    ]
    row = load_runs_of([command, *banner, *resume]).runs.row(0, named=True)
    assert (row["status"], row["iterations"], row["tp"], row["pp"], row["dp"]) == ("failed", 0, 1, 1, 4)
    # where Megatron was seen (an arguments dump that states nothing), its parallelism is not the Trainer's
    megatron = [
        "------------------------ arguments ------------------------",
        "-------------------- end of arguments ---------------------",
    ]
    row = load_runs_of([*megatron, command, *banner, *resume]).runs.row(0, named=True)
    assert (row["tp"], row["pp"]) == (None, None)


def test_a_trainer_run_got_to_its_returned_step_and_its_bar_counted_further(tmp_path):
    # 4.0 at WARNING: no banner, no logging_steps; Trainer.train() returns the global step it got to
    bar = [
        f"{n * 100 // 2000:3d}%|          | {n}/2000 [00:{n // 100:02d}<10:00,  3.28it/s]"
        for n in (1990, 2000)
    ]
    done = ["{'loss': 0.31, 'learning_rate': 1e-06, 'epoch': 2.99}", *bar]
    done.append("TrainOutput(global_step=2000, training_loss=0.2731, metrics={'train_runtime': 609.6})")
    assert load_runs_of(done).runs.row(0, named=True)["last_iteration"] == 2000
    # a failed run's planned bar (the banner's max_steps) counted past its last logged dict: how far it got
    banner = ["***** Running training *****", "  Total optimization steps = 36816"]
    dicts = [f"{{'loss': 0.6{n}, 'learning_rate': 2e-05, 'epoch': 0.0{n}}}" for n in (1, 2)]
    bars = [f"  4%|▎         | {n}/36816 [10:46<4:34:09,  2.15it/s]" for n in (1375, 1376)]
    failed = [*banner, *dicts, *bars, "torch.cuda.OutOfMemoryError: CUDA out of memory."]
    row = load_runs_of(failed).runs.row(0, named=True)
    assert (row["status"], row["iterations"], row["last_iteration"], row["progress_steps"]) == (
        "failed",
        2,
        1376,
        1376,
    )


def load_runs_of(lines: list[str]):
    """The frames of a log of ``lines`` read with every family."""
    import tempfile

    with tempfile.TemporaryDirectory() as directory:
        log = Path(directory) / "train.log"
        log.write_text("".join(f"{line}\n" for line in lines), encoding="utf-8")
        return load_runs([log])


@pytest.mark.parametrize(
    ("module", "family"), [("trainer.py:593", "hf-trainer"), ("configuration_utils.py:733", "deepspeed")]
)
def test_a_line_of_the_trainers_module_in_the_explicit_format_is_its_run(tmp_path, module, family):
    # transformers' enable_explicit_format, a ZeRO-3 offload run the host's OOM killer ended before step one
    from logstat.api import load_runs

    lines = [
        "[2024-06-02 10:11:12,345] [INFO] [comm.py:637:init_distributed] Initializing TorchBackend in DeepSpeed"
        " with backend nccl",
        f"[INFO|{module}] 2024-06-02 10:11:40,101 >> Using auto half precision backend",
        "slurmstepd: error: Detected 1 oom_kill event in StepId=5512345.0. Some of the step tasks have been OOM"
        " Killed.",
    ]
    (tmp_path / "train-5512345.out").write_text("\n".join(lines) + "\n")
    row = load_runs([tmp_path]).runs.row(0, named=True)
    assert (row["family"], row["status"]) == (family, "failed")


@pytest.mark.parametrize(
    ("lines", "facts"),
    [
        (  # Axolotl's log format, its planned steps; a pydantic error before training
            [
                "[2024-06-03 01:06:04,020] [DEBUG] [axolotl.normalize_config:79] [PID:20311] [RANK:0] bf16 support "
                "detected, enabling for this configuration.",
                "[2024-06-03 01:06:06,020] [DEBUG] [axolotl.calculate_total_num_steps:416] [PID:20311] [RANK:0] "
                "total_num_steps: 2210",
            ],
            {"train_iters": 2210},
        ),
        (  # Axolotl's config: a job's cat of its YAML, the JSON it logs; the length it trains on
            [
                "sequence_len: 4096",
                "pad_to_sequence_len: true",
                "[axolotl.train:62] [PID:1] [RANK:0] loading",
            ],
            {"seq_len": 4096},
        ),
        (['  "sequence_len": 8192,', "[axolotl.train:62] [PID:1] [RANK:0] loading"], {"seq_len": 8192}),
        (  # LLaMA-Factory's, 0.9.1 on and before, its world size
            [
                "[INFO|2025-02-11 14:02:29] llamafactory.hparams.parser:383 >> Process rank: 0, world size: 8, "
                "device: cuda:0, distributed training: True, compute dtype: torch.bfloat16",
                "12/09/2024 04:11:17 - INFO - llamafactory.data.loader - Loading dataset alpaca_en.json...",
            ],
            {"gpus": 8},
        ),
        (  # Unsloth's model loader's banner (its patched Trainer refused before its own banner)
            ["==((====))==  Unsloth 2024.8: Fast Qwen2 patching. Transformers = 4.44.0."],
            {},
        ),
    ],
)
def test_the_fine_tuning_tools_own_lines_are_a_trainer_run(tmp_path, lines, facts):
    from logstat.api import load_runs

    error = "ValueError: Undefined dataset my_data in dataset_info.json."
    (tmp_path / "sft-4401.out").write_text(
        "\n".join([*lines, "Traceback (most recent call last):", error, ""])
    )
    row = load_runs([tmp_path]).runs.row(0, named=True)
    assert (row["family"], row["status"], row["reason"]) == ("hf-trainer", "failed", error)
    assert {fact: row[fact] for fact in facts} == facts


def test_a_notebooks_table_and_bar_are_its_steps_and_plan(tmp_path):
    # NotebookProgressCallback's output as text (Colab's copy of a cell's output): the bar's label, the
    # table's header and a row a logged step; an evaluation's step may say "No log" of the training loss
    losses = [1.914470, 1.896189, 1.821101]
    table = [
        "Step\tTraining Loss\tValidation Loss",
        *(f"{step}\t{loss:.6f}\t2.1" for step, loss in zip((1, 2, 3), losses, strict=True)),
    ]
    lines = [" [4/4 01:02:08, Epoch 0/1]", *table, "4\tNo log\t2.0", "468.4412 seconds used for training."]
    log = tmp_path / "Alpaca_Llama3_8b.txt"
    log.write_text("\n".join(lines) + "\n")
    result = load_runs([log])
    row = result.runs.row(0, named=True)
    assert result.iterations.select("iteration", "loss").rows() == [
        (1, 1.91447),
        (2, 1.896189),
        (3, 1.821101),
        (4, None),
    ]
    assert (row["family"], row["train_iters"], row["last_iteration"], row["status"]) == (
        "hf-trainer",
        4,
        4,
        "ok",
    )
    assert row["progress_sec_per_iter"] == (3600 + 2 * 60 + 8) / 4
    # a table of epochs is no step's, nor its rows after another header
    log.write_text("Epoch\tTraining Loss\tValidation Loss\n1\t1.5\t1.6\n")
    assert load_runs([log]).iterations.height == 0


def test_a_loop_whose_training_bar_reached_its_planned_steps_ended(tmp_path):
    # run_clm_no_trainer: the Trainer's banner, then tqdm(range(max_train_steps)) updated at each step's end
    banner = [
        "11/02/2023 14:04:47 - INFO - __main__ - ***** Running training *****",
        "11/02/2023 14:04:47 - INFO - __main__ -   Total optimization steps = 1803",
    ]
    bars = [
        f"{done * 100 // 1803:3d}%|          | {done}/1803 [00:08<35:01,  1.17s/it]" for done in (7, 1210)
    ]
    saved = "Model weights saved in /scratch/out/gpt2-wikitext103/model.safetensors"
    log = tmp_path / "run_clm_no_trainer.log"
    log.write_text("\n".join([*banner, *bars, saved, "100%|██████████| 1803/1803 [35:09<00:00,  1.17s/it]"]))
    row = load_runs([log]).runs.row(0, named=True)
    assert (row["status"], row["reason"]) == (
        "ok",
        "its training progress bar reached the planned 1803 steps",
    )
    assert (row["train_iters"], row["progress_steps"], row["reason_line"]) == (1803, 1803, 6)
    log.write_text("\n".join([*banner, *bars, saved]))
    assert load_runs([log]).runs.row(0, named=True)["status"] == "incomplete"
