"""The primary family is weighed by what its records supplied, not by which banner came first: the
family that gave the run's numbers (iteration rows, measured results) wins over families that only
describe the run (a banner, command-line flags, a config dump)."""

import pytest
from logstat.parsers import registry

from logstat.api import load_runs
from tests.conftest import FIXTURES


@pytest.mark.parametrize(
    ("path", "steps", "lrs"),
    [
        # step 1: the engine's step=N lines every steps_per_print (10) of 30 steps
        ("ds_chat_step1_sft_opt-1.3b_training.log", [10, 20, 30], [9.329525557848999e-06, 7.861470886815466e-06, 5.579796293819115e-06]),
        # step 2: the same engine lines around the reward model's prints
        ("ds_chat_step2_reward_opt-350m_training.log", [10, 20, 30], [4.8321309709624795e-05, 4.3412574136823785e-05, 3.581077891045823e-05]),
        # step 3: its PPO line after each generation batch is a step (from 1); actor and critic engines both
        # log steps 10 and 20, the actor's line first
        (
            "ds_chat_step3_rlhf_opt-1.3b_training.log",
            list(range(1, 21)),
            [None] * 9 + [9.65e-07] + [None] * 9 + [1.93e-06],
        ),
    ],
)  # fmt: skip
def test_deepspeed_chat_is_deepspeed_though_its_flags_look_like_hf_trainer(path, steps, lrs):
    result = load_runs([FIXTURES / "deepspeed" / path])
    row = result.runs.row(0, named=True)
    # the launcher's echoed command line holds --per_device_train_batch_size: DeepSpeed-Chat's own flags,
    # read for their facts, no sign of the Trainer (and its "Process N exits successfully." is launcher
    # context, the slurm family's)
    assert [name for name in row["families"] if name != "slurm"] == ["deepspeed"]
    assert row["family"] == "deepspeed"
    its = result.iterations
    assert its["iteration"].to_list() == steps and its["lr"].to_list() == lrs
    assert set(its["family"]) == {"deepspeed"}


def test_hf_trainer_run_without_step_rows_is_named_by_its_final_metrics():
    """The real BigScience HF Trainer + DeepSpeed ZeRO-3 log: DeepSpeed's config dump states most
    facts, but the run's numbers are the Trainer's train_runtime and train_samples_per_second."""
    row = load_runs([FIXTURES / "hf_trainer" / "hf_ds_gpt2_perf_n16_bs4-mbs8.out"]).runs.row(0, named=True)
    assert row["family"] == "hf-trainer" and row["iterations"] == 0
    assert row["final_train_runtime_s"] is not None


@pytest.mark.parametrize(
    ("scores", "numbers", "family"),
    [
        # HF Trainer logs a dict every 500 steps, DeepSpeed a step line every 10: the framework wins
        ({"hf-trainer": 4, "deepspeed": 60}, {"hf-trainer": 2, "deepspeed": 50}, "hf-trainer"),
        # HF Trainer's flags only: DeepSpeed's numbers decide
        ({"hf-trainer": 1, "deepspeed": 60}, {"deepspeed": 50}, "deepspeed"),
        # minGPT's averages over a DeepSpeed engine's progress lines
        ({"mingpt": 3, "deepspeed": 40}, {"mingpt": 2, "deepspeed": 30}, "mingpt"),
        # Megatron's arguments dump with DeepSpeed's step rows: the combined name
        ({"megatron": 1, "deepspeed": 9}, {"deepspeed": 5}, "megatron-deepspeed"),
        ({"megatron": 9, "deepspeed": 9}, {"megatron": 5, "deepspeed": 5}, "megatron-deepspeed"),
        # an HF Trainer run that also shows Megatron's and DeepSpeed's evidence is not renamed by the mix
        ({"megatron": 1, "deepspeed": 1, "hf-trainer": 3}, {"hf-trainer": 2}, "hf-trainer"),
        # no family supplied numbers: the first with evidence, in registry order
        ({"deepspeed": 1, "hf-trainer": 1}, {}, "hf-trainer"),
        ({"slurm": 3}, {"slurm": 1}, "unknown"),  # context is never primary
        ({}, {}, "unknown"),
    ],
)
def test_primary_weighs_numbers_over_mere_evidence(scores, numbers, family):
    assert registry.primary(scores, numbers) == family


def test_supplied_counts_the_rows_each_family_gave_and_its_result_facts():
    from logstat.parsers.base import RunBuilder
    from logstat.parsers.kinds import Events
    from logstat.parsers.settle import settle_runs

    run = RunBuilder(path="x")
    run.add_iteration(10, "deepspeed", 1, lr=1.0)
    # merged with DeepSpeed's line of the step into the framework's row (DeepSpeed is its engine)
    run.add_iteration(10, "hf-trainer", 2, loss=2.0)
    run.add_iteration(20, "hf-trainer", 3, loss=1.5)
    run.add_iteration(30, "deepspeed", 4, lr=0.5)
    run.set_fact("final_train_runtime_s", 12.5, "hf-trainer", 5)
    run.set_fact("micro_batch_size", 4, "deepspeed", 6)  # a description, not a number of the run
    settle_runs([run], Events())
    assert registry.supplied(run) == {"deepspeed": 1, "hf-trainer": 3}


@pytest.mark.parametrize(
    ("frames", "family"),
    [
        (["/workspace/Megatron-LM/pretrain_gpt.py", "/workspace/Megatron-LM/megatron/training/global_vars.py"], "megatron"),
        (["train.py", "/opt/conda/lib/python3.10/site-packages/transformers/trainer.py"], "hf-trainer"),
        (["sft.py", "/usr/local/lib/python3.11/dist-packages/trl/trainer/sft_trainer.py"], "hf-trainer"),
        (["sft.py", "/home/u/.venv/lib/python3.10/site-packages/transformers/training_args.py"], "hf-trainer"),
        (["/opt/NeMo/examples/nlp/language_modeling/megatron_gpt_pretraining.py", "/opt/NeMo/nemo/collections/nlp/models/language_modeling/megatron_gpt_model.py"], "nemo"),
        (["/llm-foundry/scripts/train/train.py", "/usr/lib/python3/dist-packages/composer/trainer/trainer.py"], "composer"),
        (["/workspace/torchtitan/torchtitan/train.py"], "torchtitan"),
        # a script's own frames and a library NeMo runs on name no family
        (["train.py", "/workspace/Megatron-LM/megatron/core/parallel_state.py"], "unknown"),
    ],
)  # fmt: skip
def test_a_traceback_through_a_familys_code_is_its_run(tmp_path, frames, family):
    """A run that failed before its program printed a line of its own (an import): the frames say whose."""
    lines = ["Traceback (most recent call last):"]
    for path in frames:
        lines += [f'  File "{path}", line 11, in <module>', "    main()"]
    lines.append("ModuleNotFoundError: No module named 'transformer_engine'")
    (tmp_path / "slurm-88231.out").write_text("".join(f" 0: {line}\n" for line in lines))
    row = load_runs([tmp_path]).runs.row(0, named=True)
    assert (row["family"], row["status"]) == (family, "failed")
    assert row["reason"] == "ModuleNotFoundError: No module named 'transformer_engine'"


USAGE_ERROR = "pretrain_gpt.py: error: unrecognized arguments: --use-flash-attn-v2"


@pytest.mark.parametrize(
    ("usage", "family"),
    [
        (["usage: pretrain_gpt.py [-h] [--num-layers NUM_LAYERS]", "       [--hidden-size HIDDEN_SIZE]"], "megatron"),
        # deepspeed.add_config_arguments's options at the usage's end: Megatron-DeepSpeed's parser
        (["usage: pretrain_gpt.py [-h] [--num-layers NUM_LAYERS]", "       [--deepspeed] [--deepspeed_config DEEPSPEED_CONFIG]"], "megatron-deepspeed"),
        (["usage: train.py [-h] [--lr LR] [--num-layers NUM_LAYERS]"], "unknown"),
    ],
)  # fmt: skip
def test_the_usage_a_familys_parser_prints_on_refusing_its_command_line_is_its_run(tmp_path, usage, family):
    (tmp_path / "gpt-4830012.err").write_text("\n".join([*usage, USAGE_ERROR]) + "\n")
    row = load_runs([tmp_path]).runs.row(0, named=True)
    assert (row["family"], row["status"], row["reason"]) == (family, "failed", USAGE_ERROR)
