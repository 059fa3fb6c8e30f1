"""NeMo 2.0's per-step lines, NeMo 1.x's training bar and Lightning's planned end, on fixtures in their formats
(fixtures/nemo/)."""

from __future__ import annotations

import json
import re
import statistics

import pytest
from logstat.parsers import nemo

from logstat.api import load_runs
from tests.conftest import FIXTURES
from tests.parsers.feeding import feed_lines

LOG = FIXTURES / "nemo" / "nemo2_llama3_8b_pretrain-5001.out"


def test_a_nemo_2_run_is_timed_by_its_steps_and_ends_at_its_planned_steps():
    lines = LOG.read_text(encoding="utf-8").splitlines()
    steps = [line for line in lines if line.startswith("Training epoch ")]
    times = [float(re.search(r"train_step_timing in s: ([\d.]+)", line)[1]) for line in steps]
    row = load_runs([LOG], warmup=1).runs.row(0, named=True)
    assert (row["family"], row["status"], row["iterations"]) == ("nemo", "ok", 20)
    assert row["reason"] == "`Trainer.fit` stopped: `max_steps=20` reached."
    assert row["sec_per_iter"] == statistics.median(times[1:])
    assert (row["global_batch_size"], row["samples_per_sec"]) == (128, 128 / statistics.median(times[1:]))


def test_each_field_of_a_progress_line_is_its_steps_metric():
    run = feed_lines(
        nemo.FAMILY,
        [
            "Training epoch 1, iteration 3/99 | lr: 4.5e-07 | global_batch_size: 256 | global_step: 103 | "
            "reduced_train_loss: 10.93 | train_step_timing in s: 5.817 | consumed_samples: 26624",
            # no global_step (a metric left out): the iteration numbers the step
            "Training epoch 1, iteration 4/99 | reduced_train_loss: 10.88 | train_step_timing in s: 6",
            # NeMo 2.0's FLOPsMeasurementCallback logs to the progress bar every log_every_n_steps
            "Training epoch 1, iteration 5/99 | global_step: 105 | train_step_timing in s: 5.8 | "
            "TFLOPS_per_GPU: 405.2",
        ],
    )
    columns = ("iteration", "loss", "lr", "elapsed_ms", "global_batch_size", "logged_tflops_per_gpu")
    rows = run.iteration_frame.select(columns).rows()
    # 0-based (trainer.global_step before the step's own update; the printer's iteration n - 1): a step the
    # global steps done with it, as every family's first update ends step 1
    assert rows == [
        (5, 10.88, None, 6000.0, None, None),
        (104, 10.93, 4.5e-07, 5817.0, 256, None),
        (106, None, None, 5800.0, None, 405.2),
    ]
    assert run.facts["global_batch_size"] == 256


@pytest.mark.parametrize(
    "end",
    [
        "`Trainer.fit` stopped: `max_steps=100` reached.",
        "`Trainer.fit` stopped: `max_epochs=3` reached.",
    ],
)
def test_lightnings_planned_end_completes_the_run(end):
    run = feed_lines(nemo.FAMILY, ["Training epoch 0, iteration 0/99 | train_step_timing in s: 5.8", end])
    assert run.completion[0] == end
    # the steps it names are the plan (NeMo 2.0 prints no configuration)
    assert run.facts.get("train_iters") == (100 if "max_steps" in end else None)


def test_lightnings_timer_ending_the_run_on_its_time_budget_is_a_timeout():
    # the Timer callback (NeMo's exp_manager max_time_per_run): its steps not done, the next job resumes
    end = "Time limit reached. Elapsed time is 3:50:00. Signaling Trainer to stop."
    run = feed_lines(nemo.FAMILY, ["Training epoch 0, iteration 0/99 | train_step_timing in s: 5.8", end])
    assert (run.completion, run.failure) == (None, ("timeout", f"time budget spent: {end}", 2))


@pytest.mark.parametrize(
    "caught",
    [
        "Detected KeyboardInterrupt, attempting graceful shutdown ...",
        "Detected KeyboardInterrupt, attempting graceful shutdown...",
    ],
)
def test_a_ctrl_c_that_lightning_caught_cancelled_the_run(tmp_path, caught):
    # Lightning 2.x (1.x: no space before the dots) catches the KeyboardInterrupt and exits: no traceback
    log = tmp_path / "gpt-1.out"
    step = "Training epoch 0, iteration {0}/99 | global_step: {0} | reduced_train_loss: 9.9 | train_step_timing in s: 2"
    log.write_text("\n".join([step.format(1), step.format(2), "", caught, ""]))
    row = load_runs([log]).runs.row(0, named=True)
    assert (row["status"], row["reason"], row["reason_line"], row["iterations"]) == (
        "cancelled",
        caught,
        4,
        2,
    )


def test_lightnings_world_and_precision_and_nemos_parallel_groups_are_the_runs_layout():
    # Lightning (fabric's _init_dist_connection, the accelerator connector) and NeMo's megatron_init, per rank
    lines = [
        "Initializing distributed: GLOBAL_RANK: 3, MEMBER: 4/16",
        "All distributed processes registered. Starting with 16 processes",
        "Using bfloat16 Automatic Mixed Precision (AMP)",
        "[NeMo I 2025-01-20 08:12:10 megatron_init:350] Rank 0 has data parallel group : [0, 4, 8, 12]",
        "[NeMo I 2025-01-20 08:12:10 megatron_init:358] Rank 0 has context parallel group: [0, 2]",
        "[NeMo I 2025-01-20 08:12:10 megatron_init:380] Rank 0 has tensor model parallel group: [0, 1]",
        "[NeMo I 2025-01-20 08:12:10 megatron_init:402] Rank 0 has pipeline model parallel group: [0]",
        "Training epoch 0, iteration 9/99 | lr: 1.5e-05 | global_batch_size: 32 | global_step: 9 | "
        "reduced_train_loss: 10.43 | train_step_timing in s: 1.52 | consumed_samples: 320",
    ]
    run = feed_lines(nemo.FAMILY, lines)
    layout = {name: run.facts.get(name) for name in ("gpus", "precision", "dp", "cp", "tp", "pp")}
    assert layout == {"gpus": 16, "precision": "bf16", "dp": 4, "cp": 2, "tp": 2, "pp": 1}
    assert run.provenance["gpus"] == "nemo:2" and run.provenance["tp"] == "nemo:6"  # its last statement
    fp16 = feed_lines(nemo.FAMILY, ["Using 16bit Automatic Mixed Precision (AMP)"])
    assert fp16.facts["precision"] == "fp16"


def _bar_update(done: int, total: int, postfix: str, rate: str = "") -> str:
    """An update of NeMo 1.x's training bar as tqdm draws it (MegatronProgressBar's format without ``rate``,
    Lightning's default with it): its carriage return first."""
    return f"\rEpoch 0: : {100 * done // total:3d}%|#         | {done}/{total} [00:05<00:15{rate}, {postfix}]"


def _postfix(loss: str, step: str, seconds: str) -> str:
    return f"reduced_train_loss={loss}, global_step={step}, consumed_samples=256.0, train_step_timing in s={seconds}"


def test_each_update_of_nemo_1s_training_bar_is_a_step_by_its_global_step():
    bar = "".join(
        [
            _bar_update(1, 50, _postfix("10.60", "0.000", "19.80")),
            _bar_update(2, 50, _postfix("10.40", "1.000", "3.330")),
            _bar_update(2, 50, _postfix("10.40", "1.000", "3.330") + ", val_loss=10.30"),  # after validation
            _bar_update(3, 50, _postfix("9.630", "2.000", "3.340")),
        ]
    )
    run = feed_lines(nemo.FAMILY, [bar])
    rows = run.iteration_frame.select("iteration", "loss", "elapsed_ms").rows()
    assert rows == [(1, 10.6, 19800.0), (2, 10.4, 3330.0), (3, 9.63, 3340.0)]  # the counter's: steps done


def test_a_global_step_in_tqdms_exponent_form_is_the_megatron_bars_counter():
    # tqdm prints 120,000 as 1.2e+5 (3 significant digits): MegatronProgressBar counts global steps done;
    # Lightning's own bar (a rate in it) counts the epoch's batches, so its step is not known
    megatron = _bar_update(120001, 150000, _postfix("2.310", "1.2e+5", "3.330"))
    lightning = _bar_update(401, 1000, _postfix("2.300", "1.2e+5", "3.330"), rate=", 0.30it/s")
    run = feed_lines(nemo.FAMILY, [megatron, lightning])
    assert run.iteration_frame.select("iteration", "loss").rows() == [(120001, 2.31)]


def test_a_bar_line_of_more_updates_than_a_lines_record_count_keeps_every_step(tmp_path):
    # tqdm writes to a file with carriage returns only: a run's bar can be one line of thousands of updates
    losses = [round(10.0 - step / 1000, 3) for step in range(600)]
    updates = [
        _bar_update(step + 1, 600, _postfix(f"{loss:.3f}", f"{step}.000", "3.330"))
        for step, loss in enumerate(losses)
    ]
    log = tmp_path / "nemo1-9001.out"
    log.write_text("".join(updates) + "\n`Trainer.fit` stopped: `max_steps=600` reached.\n", encoding="utf-8")
    result = load_runs([log])
    assert result.iterations.select("iteration", "loss").rows() == list(enumerate(losses, start=1))
    assert result.runs.select("status", "iterations").row(0) == ("ok", 600)


def _draws(path) -> list[str]:
    """The bar's draws of a log, in order (tqdm separates them by carriage returns)."""
    text = path.read_text(encoding="utf-8")
    return [draw for draw in re.split(r"[\r\n]", text) if "reduced_train_loss=" in draw]


def test_a_nemo_1_bar_in_exponent_form_steps_by_its_counter_and_ends_by_the_glued_time_limit():
    log = FIXTURES / "nemo" / "nemo1_resumed-7003.out"
    last_draw = {}  # counter -> the step's own postfix, drawn after the counter's first draw
    for draw in _draws(log):
        counter = int(re.search(r"\| (\d+)/250000 \[", draw)[1])
        last_draw[counter] = (float(re.search(r"reduced_train_loss=([\d.]+)", draw)[1]), draw)
    assert all("global_step=1.2e+5" in draw for _, draw in last_draw.values())
    row = load_runs([log]).runs.row(0, named=True)
    steps = load_runs([log]).iterations.select("iteration", "loss").rows()
    assert steps == [(counter, loss) for counter, (loss, _) in sorted(last_draw.items())]
    assert (row["status"], row["iterations"]) == ("timeout", 30)
    # exp_manager's "Resuming training from checkpoint: ...-step=120000-..." (line 180), Lightning's
    # "Restored all states from the checkpoint at ..." (334): the family's last statement
    assert (row["resumed_step"], json.loads(row["provenance"])["resumed_step"]) == (120000, "nemo:334")
    assert row["reason"] == (
        "time limit: slurmstepd: error: *** JOB 7003 ON node101 CANCELLED AT 2024-03-02T13:55:30 DUE TO TIME LIMIT ***"
    )


def test_lightning_1_9s_bar_steps_by_global_step_and_its_glued_planned_end_completes_the_run():
    log = FIXTURES / "nemo" / "nemo1_lightning_bar-7002.out"
    timing = {}  # global step -> train_step_timing, as drawn
    for draw in _draws(log):
        step = int(float(re.search(r"global_step=([\d.]+)", draw)[1]))
        timing.setdefault(step, float(re.search(r"train_step_timing=([\d.]+)", draw)[1]))
    row = load_runs([log], warmup=1).runs.row(0, named=True)
    assert (row["status"], row["reason"]) == ("ok", "`Trainer.fit` stopped: `max_steps=40` reached.")
    assert row["iterations"] == len(timing) == 40
    assert row["sec_per_iter"] == statistics.median(timing[step] for step in sorted(timing)[1:])


def test_nemo_1s_experiment_configuration_states_the_runs_shape_batches_and_layout():
    row = load_runs([FIXTURES / "nemo" / "nemo1_resumed-7003.out"]).runs.row(0, named=True)
    # its lines 11-122 (trainer, then model) and megatron_base_model's padded vocabulary (204)
    stated = dict(gpus=32, gpus_per_node=8, nodes=4, precision="bf16", train_iters=250000, micro_batch_size=2)
    stated |= dict(global_batch_size=512, tp=2, pp=2, seq_len=2048, num_layers=24, hidden_size=4096)
    stated |= dict(ffn_hidden_size=16384, num_heads=32, num_query_groups=None, swiglu=False)
    stated |= dict(activation_checkpointing=False, vocab_size=50257, padded_vocab_size=50432, dp=8)
    assert {name: row[name] for name in stated} == stated
    provenance = json.loads(row["provenance"])
    assert provenance["num_layers"] == "nemo:63" and provenance["gpus_per_node"] == "nemo:11"


def test_a_configuration_key_counts_once_with_a_value_of_its_own_and_only_inside_the_dump():
    lines = [
        "micro_batch_size: 99",  # before the dump: not one of its keys
        "[NeMo I 2024-05-02 10:00:00 megatron_gpt_pretraining:36] ",
        "    ************** Experiment configuration ***********",
        "[NeMo I 2024-05-02 10:00:00 megatron_gpt_pretraining:37] ",
        "    trainer:",
        "      devices: 8",
        "      num_nodes: 2",
        "      precision: bf16-mixed",
        "    model:",
        "      micro_batch_size: 1",
        "      encoder_seq_length: 4096",
        "      max_position_embeddings: ${.encoder_seq_length}",
        "      num_query_groups: 8",
        "      activation: fast-swiglu",
        "      activations_checkpoint_granularity: full",
        "      data:",
        "        micro_batch_size: 7",  # a later statement of a key: the first counts
        "[NeMo I 2024-05-02 10:00:05 megatron_init:255] Rank 0 has tensor model parallel group: [0, 1]",
        "      global_batch_size: 64",  # after the dump ended
    ]
    facts = feed_lines(nemo.FAMILY, lines).facts
    read = ("gpus", "precision", "micro_batch_size", "seq_len", "num_query_groups", "swiglu", "tp")
    assert {name: facts.get(name) for name in read} == dict(
        gpus=16, precision="bf16", micro_batch_size=1, seq_len=4096, num_query_groups=8, swiglu=True, tp=2
    )
    assert facts["activation_checkpointing"] is True and "global_batch_size" not in facts
    assert feed_lines(nemo.FAMILY, [*lines[1:4], "    precision: 16-mixed"]).facts["precision"] == "fp16"


def test_a_fine_tunings_dataset_length_is_the_length_trained_on():
    # megatron_gpt_finetuning_config.yaml: model.data.train_ds.max_seq_length, after the base model's keys
    lines = _configuration("      encoder_seq_length: 8192", "      data:", "        train_ds:")
    lines[-1:-1] = [
        "          max_seq_length: 4096",
        "        validation_ds:",
        "          max_seq_length: 2048",
    ]
    assert feed_lines(nemo.FAMILY, lines).facts["seq_len"] == 4096
    assert feed_lines(nemo.FAMILY, lines[:6] + lines[-1:]).facts["seq_len"] == 8192


def _configuration(*model: str) -> list[str]:
    return [
        "[NeMo I 2024-05-02 10:00:00 megatron_gpt_pretraining:36] ",
        "    ************** Experiment configuration ***********",
        "[NeMo I 2024-05-02 10:00:00 megatron_gpt_pretraining:37] ",
        "    model:",
        "      num_layers: 32",
        *model,
        "[NeMo I 2024-05-02 10:00:05 megatron_init:255] Rank 0 has tensor model parallel group: [0]",
    ]


FULL = "      activations_checkpoint_granularity: full"
BLOCK = (FULL, "      activations_checkpoint_method: block")


@pytest.mark.parametrize(
    ("model", "moe_topk", "recomputed_layers"),
    [
        # Mixtral's routing: 2 of 8 experts
        (["      num_moe_experts: 8", "      moe_router_topk: 2"], 2, None),
        # a dense model's unused router default
        (["      num_moe_experts: null", "      moe_router_topk: 2"], None, None),
        # the block method: the first 4 layers of each stage's (one stage: of 32)
        ([*BLOCK, "      activations_checkpoint_num_layers: 4"], None, 4),
        # 2 stages of 2 virtual stages: 4 chunks of 8 layers, 3 of each
        (
            [
                "      pipeline_model_parallel_size: 2",
                "      virtual_pipeline_model_parallel_size: 2",
                *BLOCK,
                "      activations_checkpoint_num_layers: 3",
            ],
            None,
            12,
        ),
        # as many as a chunk has, or the uniform method: all of them
        ([*BLOCK, "      activations_checkpoint_num_layers: 32"], None, None),
        (
            [
                FULL,
                "      activations_checkpoint_method: uniform",
                "      activations_checkpoint_num_layers: 1",
            ],
            None,
            None,
        ),
    ],
)
def test_nemo_1s_configuration_routes_to_experts_and_recomputes_blocks_as_megatron_does(
    model, moe_topk, recomputed_layers
):
    facts = feed_lines(nemo.FAMILY, _configuration(*model)).facts
    assert (facts.get("moe_topk"), facts.get("recomputed_layers")) == (moe_topk, recomputed_layers)


def test_lightnings_own_lines_complete_a_run_but_name_no_nemo_run(tmp_path):
    # a plain Lightning run: its device lines, its bar (no NeMo metric in the postfix), its planned end
    log = tmp_path / "job-6601.out"
    bar = "".join(
        f"\rEpoch 3: {n * 10:3d}%|#         | {n}/10 [00:02<00:00, 4.95it/s, v_num=0, train_loss=2.31]"
        for n in range(1, 11)
    )
    log.write_text(
        "GPU available: True (cuda), used: True\nUsing bfloat16 Automatic Mixed Precision (AMP)\n"
        f"{bar}\n`Trainer.fit` stopped: `max_epochs=4` reached.\n"
    )
    row = load_runs([log]).runs.row(0, named=True)
    assert (row["family"], row["status"], row["iterations"]) == ("unknown", "ok", 0)
    assert row["reason"] == "`Trainer.fit` stopped: `max_epochs=4` reached." and row["precision"] == "bf16"


def test_the_models_total_parameters_are_the_logged_size(tmp_path):
    # NeMo 1.x's megatron_gpt_model after building the model ({:.2e}); with no shape printed, it is the size
    line = (
        "[NeMo I 2024-04-08 00:00:00 megatron_gpt_model:1209] Pipeline model parallel rank: 0, Tensor model "
        "parallel rank: 0, Number of model parameters on device: 3.37e+09. Total number of model parameters: "
        "6.74e+09."
    )
    assert feed_lines(nemo.FAMILY, [line]).facts["logged_model_size"] == 6.74
    log = tmp_path / "nemo.log"
    log.write_text(line + "\n")
    assert load_runs([log]).runs.row(0, named=True)["model_size_b"] == 6.74


def test_lightnings_model_summary_total_is_the_logged_size_unless_nemo_counted_it():
    # lightning's get_human_readable_count, left-justified to 10 (the nemo1_lightning_bar fixture's line 270)
    summary = ["355 M     Trainable params", "0         Non-trainable params", "355 M     Total params"]
    assert feed_lines(nemo.FAMILY, summary).facts["logged_model_size"] == 0.355
    assert feed_lines(nemo.FAMILY, ["5.0 B     Total params"]).facts["logged_model_size"] == 5.0
    total = "[NeMo I 2024-04-08 megatron_gpt_model:1209] ... Total number of model parameters: 3.56e+08."
    assert feed_lines(nemo.FAMILY, [total, *summary]).facts["logged_model_size"] == 0.356


@pytest.mark.parametrize(
    "group", ["tensor model parallel group: [0, 1]", "pipeline model parallel group: [0, 4]"]
)
def test_lightnings_summary_under_model_parallelism_is_a_shard_not_the_model(group):
    # rank 0's module under TP 2 (or PP 2) holds about half of Llama 3 8B: Lightning prints "4.0 B"
    grouped = f"[NeMo I 2024-12-03 10:00:00 megatron_init:439] Rank 0 has {group}"
    run = feed_lines(nemo.FAMILY, [grouped, "4.0 B     Total params"])
    assert "logged_model_size" not in run.facts


def test_a_run_that_failed_before_its_first_nemo_record_is_nemos_by_its_logger_lines(tmp_path):
    # NeMo 1.x's import warnings (nemo_logging's formatter), then Hydra refusing a mistyped override
    log = tmp_path / "nemo-gpt-20b-3320144.out"
    log.write_text(
        "[NeMo W 2024-03-11 09:12:40 nemo_logging:349] /usr/local/lib/python3.10/dist-packages/megatron/core/"
        "tensor_parallel/layers.py:254: FutureWarning: `torch.cuda.amp.custom_fwd(args...)` is deprecated.\n"
        "      def forward(\n"
        "Could not override 'model.optim.sched.warmup_step'.\n"
        "To append to your config use +model.optim.sched.warmup_step=200\n"
        "Key 'warmup_step' is not in struct\n"
        "Set the environment variable HYDRA_FULL_ERROR=1 for a complete stack trace.\n"
        "srun: error: gpu-a041: tasks 0-7: Exited with exit code 1\n",
        encoding="utf-8",
    )
    row = load_runs([log]).runs.row(0, named=True)
    assert (row["family"], row["status"]) == ("nemo", "failed")
    assert row["reason"] == "Could not override 'model.optim.sched.warmup_step'."
    # a line quoting the logger's tag is no NeMo line
    log.write_text("echo '[NeMo W 2024-03-11 ...]' >> notes.txt\n", encoding="utf-8")
    assert load_runs([log]).runs.row(0, named=True)["family"] == "unknown"


@pytest.mark.parametrize(
    "line",
    [
        # NeMo 1.x's exp_manager (check_resume), then Lightning's checkpoint connector
        "[NeMo I 2024-06-25 00:01:12 exp_manager:664] Resuming training from checkpoint: /results/llama7b/checkpoints/"
        "megatron_llama--val_loss=1.92-step=6000-consumed_samples=1536000.0-last.ckpt",
        "Restored all states from the checkpoint at /results/llama7b/checkpoints/"
        "megatron_llama--val_loss=1.92-step=6000-consumed_samples=1536000.0-last.ckpt",
    ],
)
def test_a_resume_from_a_checkpoint_named_by_its_step(line):
    run = feed_lines(nemo.FAMILY, [line])
    assert run.facts["resumed_step"] == 6000
    assert run.provenance["resumed_step"] == "nemo:1"


def test_a_checkpoint_not_named_by_its_step_says_no_step():
    run = feed_lines(nemo.FAMILY, ["Restored all states from the checkpoint at /ckpt/last.ckpt"])
    assert "resumed_step" not in run.facts
