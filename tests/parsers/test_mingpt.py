"""minGPT/Lightning benchmark family on the result blocks quoted in the minGPT DeepSpeed benchmark README (fixtures/mingpt/README.md)."""

from pathlib import Path

import pytest
from logstat.parsers import mingpt
from logstat.parsers.base import RunBuilder

from tests.parsers.feeding import feed_file, feed_lines

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "mingpt"


def feed(path: Path) -> RunBuilder:
    return feed_file(mingpt.FAMILY, path)


def test_zero3_20b_result_block():
    # seed 004 lines 66-69: python benchmark.py --n_layer 21 --n_head 16 --n_embd 8192 --gpus 8 --precision 16
    # --limit_train_batches 120 --batch_size 1 / Average Epoch time: 45.65 seconds / Average Peak CUDA memory: 36086.14MiB
    run = feed(FIXTURES / "mingpt_zero3_20b.log")
    assert run.facts["avg_epoch_time_s"] == 45.65
    assert run.facts["peak_memory_mib"] == 36086.14
    assert run.provenance["avg_epoch_time_s"] == "mingpt:3"
    assert (run.facts["num_layers"], run.facts["num_heads"], run.facts["hidden_size"]) == (21, 16, 8192)
    assert (run.facts["gpus"], run.facts["gpus_per_node"], run.facts["nodes"]) == (8, 8, 1)
    assert run.facts["micro_batch_size"] == 1
    assert run.facts["precision"] == "fp16"
    # the command names no strategy: the ZeRO stage is not in this log (the README's heading is not)
    assert "zero_stage" not in run.facts and "offload_optimizer" not in run.facts
    assert run.completion is not None and run.completion[1] == 3


def test_zero3_offload_45b_result_block():
    # seed 004 lines 76-80: ... --n_layer 56 ... --cpu_offload / Average Epoch time: 3039.97 seconds /
    # Average Peak CUDA memory: 14186.86MiB / CPU Virtual Memory:  used = 867.61 GB, percent = 91.8%
    run = feed(FIXTURES / "mingpt_zero3_offload_45b.log")
    assert run.facts["avg_epoch_time_s"] == 3039.97
    assert run.facts["peak_memory_mib"] == 14186.86
    assert run.facts["num_layers"] == 56
    assert run.facts["offload_optimizer"] is True
    assert "micro_batch_size" not in run.facts  # no --batch_size on that command line


def test_strategy_and_nodes_from_the_training_command():
    # seed 004 line 27, with Lightning's --num_nodes added as a multi-node launch would
    run = RunBuilder(path="train")
    line = (
        "python train.py --n_layer 15 --n_head 16 --n_embd 3072 --gpus 8 --num_nodes 2 --precision 16 --batch_size 1 "
        "--strategy deepspeed_stage_3"
    )
    mingpt.parse_line(line, 1, run)
    assert run.facts["zero_stage"] == 3
    assert (run.facts["gpus"], run.facts["nodes"]) == (16, 2)


def test_results_of_two_ranks_glued_in_one_line():
    run = RunBuilder(path="glued")
    mingpt.parse_line("Average Epoch time: 45.05 secondsAverage Peak CUDA memory: 7796.98MiB", 4, run)
    assert (run.facts["avg_epoch_time_s"], run.facts["peak_memory_mib"]) == (45.05, 7796.98)


@pytest.mark.parametrize(
    "line",
    [
        "",
        "\x00\x01 binary",
        "Average Epoch time: seconds",
        "Average Epoch time: 45.6",
        "Average Peak CUDA memory: lots",
        "python benchmark.py --n_layer",
        "python benchmark.py --n_layer 'unterminated --gpus x",
    ],
)
def test_garbage_lines_record_nothing(line):
    run = RunBuilder(path="garbage")
    mingpt.parse_line(line, 1, run)
    assert run.facts == {}
    assert run.state.get("parse_errors") is None


@pytest.mark.parametrize(
    ("flags", "facts"),
    [
        ("", {}),  # a shape flag left out is not read (positive_int("") would be None anyway)
        ("--block_size 2048 --vocab_size 50257", {"seq_len": 2048, "vocab_size": 50257}),
        ("--block_size 0 --vocab_size true", {}),  # not positive counts
        ("--block_size", {}),  # a bare switch
    ],
)
def test_shape_flags_present_or_left_out(flags, facts):
    run = RunBuilder(path="train")
    mingpt.parse_line(f"+ python benchmark.py --n_layer 2 {flags}", 1, run)
    assert run.facts["num_layers"] == 2
    assert {name: run.facts[name] for name in ("seq_len", "vocab_size") if name in run.facts} == facts


# minGPT's projects/chargpt/chargpt.py: its CfgNode overrides, then its batch-end callback every 10 iterations
CHARGPT = [
    "$ python projects/chargpt/chargpt.py --trainer.max_iters=5000 --trainer.batch_size=128 --data.block_size=256",
    "command line overwriting config attribute trainer.max_iters with 5000",
    "command line overwriting config attribute trainer.batch_size with 128",
    "command line overwriting config attribute data.block_size with 256",
    "command line overwriting config attribute system.work_dir with ./out/chargpt",
    "number of parameters: 2.71M",
    "running on device cuda",
    "iter_dt 0.00ms; iter 0: train loss 4.17420",
    "O God, O God! that e'er this tongue of mine,",
    "iter_dt 41.90ms; iter 10: train loss 3.28933",
    "iter_dt 40.85ms; iter 20: train loss 3.22555",
]


def test_a_mingpt_projects_iterations_and_overrides():
    run = feed_lines(mingpt.FAMILY, CHARGPT)
    steps = run.iteration_frame.select("iteration", "loss", "elapsed_ms").rows()
    assert steps == [(0, 4.1742, 0.0), (10, 3.28933, 41.9), (20, 3.22555, 40.85)]
    facts = {name: run.facts.get(name) for name in ("train_iters", "micro_batch_size", "seq_len", "gpus")}
    assert facts == {"train_iters": 5000, "micro_batch_size": 128, "seq_len": 256, "gpus": 1}
    assert run.provenance["seq_len"] == "mingpt:4"


def test_the_original_trainers_bar_updates_are_steps_counted_across_epochs(tmp_path):
    from logstat.api import load_runs

    # mingpt/trainer.py (2020): the bar's description each iteration, the model's size from its logger
    bar = "{:3d}%|█         | {}/2179 [00:01<07:20,  4.95it/s]"
    lines = [
        "04/12/2024 10:32:11 - INFO - mingpt.model -   number of parameters: 2.535219e+07",
        f"epoch 1 iter 0: train loss 4.17420. lr 5.999997e-04: {bar.format(0, 1)}",
        f"epoch 1 iter 2178: train loss 0.94851. lr 3.000298e-04: {bar.format(100, 2179)}",
        f"epoch 2 iter 9: train loss 0.69632. lr 6.000000e-05: {bar.format(0, 10)}",
    ]
    log = tmp_path / "colab_output.txt"
    log.write_text("\n".join(lines) + "\n", encoding="utf-8")
    result = load_runs([log])
    row = result.runs.row(0, named=True)
    assert (row["family"], row["logged_model_size"]) == ("mingpt", 0.02535219)
    assert result.iterations.select("iteration", "loss", "lr").rows() == [
        (1, 4.1742, 5.999997e-04),
        (2179, 0.94851, 3.000298e-04),
        (2189, 0.69632, 6.0e-05),
    ]


def test_a_mingpt_project_is_read_as_mingpt_among_every_family(tmp_path):
    from logstat.api import load_runs

    log = tmp_path / "chargpt.log"
    log.write_text("\n".join(CHARGPT) + "\n")
    row = load_runs([log]).runs.row(0, named=True)
    # nanoGPT's model prints "number of parameters: 2.71M" too: the steps say whose run it is
    assert (row["family"], row["iterations"], row["last_iteration"]) == ("mingpt", 3, 20)


def _ending(last: int, then: tuple[str, ...] = ()) -> list[str]:
    """chargpt with ``max_iters`` 5000, printing every 10 iterations up to ``last``, then ``then``."""
    iterations = [f"iter_dt 40.10ms; iter {n}: train loss 1.2{n % 7}" for n in range(last - 30, last + 1, 10)]
    return [*CHARGPT[:3], *iterations, *then]


def test_a_project_whose_last_print_is_its_plans_last_ran_to_its_end():
    # the Trainer stops after 0-based iteration 4999 without a word; the callback's last print is 4990
    run = feed_lines(mingpt.FAMILY, _ending(4990))
    assert run.completion[:2] == ("the last iteration its planned 5000 print (0-based, every 10): 4990", 7)
    # a log stopping a print earlier did not reach it; nor one whose prints go past the plan (another's)
    assert feed_lines(mingpt.FAMILY, _ending(4980)).completion is None
    assert feed_lines(mingpt.FAMILY, _ending(5010)).completion is None


def test_nanogpts_train_py_with_a_config_file_is_not_the_benchmarks_command():
    nanogpt = (
        "$ torchrun --standalone --nproc_per_node=4 train.py config/train_gpt2.py --n_layer=24 --n_head=16"
    )
    run = feed_lines(mingpt.FAMILY, [nanogpt])
    assert "num_layers" not in run.facts and mingpt.NAME not in run.families_seen
    benchmark = feed_lines(mingpt.FAMILY, ["python train.py --n_layer 24 --n_head 16 --gpus 8"])
    assert benchmark.facts["num_layers"] == 24


#: chargpt.py's start (projects/chargpt/chargpt.py: merge_from_args' word, print(config), its CharDataset, the
#: model's count, its Trainer's device) and its first steps
CHARGPT_CONFIG = [
    "command line overwriting config attribute trainer.max_iters with 5000",
    "system:",
    "    seed: 3407",
    "    work_dir: ./out/chargpt",
    "data:",
    "    block_size: 128",
    "model:",
    "    model_type: gpt-mini",
    "    n_layer: None",
    "    vocab_size: None",
    "    block_size: None",
    "    embd_pdrop: 0.1",
    "trainer:",
    "    device: auto",
    "    num_workers: 4",
    "    max_iters: 5000",
    "    batch_size: 64",
    "    learning_rate: 0.0005",
    "data has 1115394 characters, 65 unique.",
    "number of parameters: 2.71M",
    "running on device cuda",
    "iter_dt 0.00ms; iter 0: train loss 4.17290",
    "iter_dt 35.33ms; iter 10: train loss 4.07283",
]


def test_a_projects_printed_config_states_its_batch_block_and_preset_shape():
    run = feed_lines(mingpt.FAMILY, CHARGPT_CONFIG)
    facts = {
        "seq_len": 128, "micro_batch_size": 64, "train_iters": 5000, "vocab_size": 65,
        "num_layers": 6, "num_heads": 6, "hidden_size": 192,  # mingpt/model.py's gpt-mini
        "gpus": 1, "dp": 1, "gas": 1, "activation_checkpointing": False,
    }  # fmt: skip
    assert {name: run.facts.get(name) for name in facts} == facts
    # the data's block size (line 6), not the model's None
    assert run.provenance["seq_len"] == "mingpt:6"
    assert run.provenance["micro_batch_size"] == "mingpt:17"


def test_indented_keys_without_a_projects_config_before_them_state_nothing():
    # a YAML dump's keys (NeMo's, Hydra's) are no minGPT config without its system section's work_dir
    run = feed_lines(
        mingpt.FAMILY,
        ["trainer:", "    batch_size: 64", "    max_iters: 5000", "data:", "    block_size: 128"],
    )
    assert run.facts == {}
