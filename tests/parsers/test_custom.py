"""Custom training loops' step lines, and the sequence length and parameter count other families leave
unsaid, on the fixtures in their shapes (fixtures/custom/) and single lines; expected numbers are read off
the records' own text here."""

from __future__ import annotations

import re
import statistics

import pytest

from tests.conftest import FIXTURES
from tests.parsers.feeding import first_run as read

BUILD_NANOGPT = FIXTURES / "custom" / "build_nanogpt_gpt2_124m-7101.out"
DEEPSPEED_LOOP = FIXTURES / "custom" / "deepspeed_custom_loop-7102.out"


def runs_of(tmp_path, lines: list[str]):
    log = tmp_path / "train.log"
    log.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return read(log)


def test_build_nanogpts_step_lines_are_the_rows():
    text = BUILD_NANOGPT.read_text(encoding="utf-8")
    shape = r"^step +(\d+) \| loss ([\d.]+) \| lr ([\d.e-]+) \| norm: ([\d.]+) \| dt: ([\d.]+)ms"
    expected = [tuple(map(float, found)) for found in re.findall(shape, text, re.MULTILINE)]
    row, iterations = read(BUILD_NANOGPT)
    # its steps count from 0 (range(max_steps)): step 0's line follows the first update, a step of the run
    logged = expected
    assert logged[0][0] == 0
    got = iterations.select("iteration", "loss", "lr", "grad_norm", "elapsed_ms").rows()
    assert got == [(int(step), *rest) for step, *rest in logged]
    assert set(iterations["family"]) == {"custom"}
    times = [values[4] / 1000 for values in logged[1:]]  # --warmup 1
    assert (row["family"], row["status"], row["gpus"]) == ("custom", "timeout", 8)
    assert row["sec_per_iter"] == pytest.approx(statistics.median(times))
    # its "with 124,354,560 parameters" counts the decayed tensors only: no model size
    assert row["logged_model_size"] is None


def test_a_loop_on_deepspeeds_engine_is_a_deepspeed_run_whose_rows_are_the_loops():
    text = DEEPSPEED_LOOP.read_text(encoding="utf-8")
    steps = re.findall(
        r"^\[step +(\d+)/(\d+)\] loss=([\d.]+) lr=[\d.e-]+ step_time=([\d.]+)s", text, re.MULTILINE
    )
    row, iterations = read(DEEPSPEED_LOOP)
    assert iterations["iteration"].to_list() == [int(step) for step, *_ in steps]
    assert iterations["loss"].to_list() == [float(loss) for *_, loss, _ in steps]
    assert row["family"] == "deepspeed" and set(row["families"]) >= {"custom", "deepspeed"}
    # [step 200/200] reached the plan: the run ended
    assert (row["train_iters"], row["last_iteration"], row["status"]) == (200, 200, "ok")
    assert row["sec_per_iter"] == pytest.approx(statistics.median(float(s) for *_, s in steps[1:]))
    # the launcher's --seq_len 2048 and "Model has 1,414,647,808 parameters", said by no other family
    assert (row["seq_len"], row["logged_model_size"]) == (2048, pytest.approx(1.414647808))
    assert row["provenance"]["seq_len"] == "custom:1"


@pytest.mark.parametrize(
    ("line", "step", "loss", "elapsed_ms"),
    [
        (
            "[rank0] step 1510/3000 | loss 1.9025 | lr 1.5e-05 | step_time 7.90s | tok/s/gpu 1037",
            1510,
            1.9025,
            7900.0,
        ),
        (
            "2024-07-09 21:05:47 | rank 0 | step    50 | loss 9.3863 | lr 3.000e-05 | 950.0 ms/step",
            50,
            9.3863,
            950.0,
        ),
        (
            "2024-05-02 14:00:16,200 INFO step 20/5000 loss 10.226 lr 3.00e-05 step_time 0.710s",
            20,
            10.226,
            710.0,
        ),
        ("[2024-10-19 22:03:16] rank0 | step 5 | loss 10.401 | 3.300s/step | mfu 41.1%", 5, 10.401, 3300.0),
        ("epoch 0 | step 50/1200 | loss 1.9720 | lr 1.92e-05 | 3.40 s/step", 50, 1.972, 3400.0),
        (
            "[default0]:Step 7 | Loss: 9.0550 | aux_loss: 0.01 | lr: 4.00e-04 | time/step: 0.27s",
            7,
            9.055,
            270.0,
        ),
        ("Epoch 1, Step 120/900, Train Loss: 2.3456", 120, 2.3456, None),
        ("2024-07-02 11:00:05,303 INFO step=20 loss=10.592 lr=3.0e-06 step_time=0.736s", 20, 10.592, 736.0),
        ("[rank 3] Iter 5000 | loss 7.2240 | 1.03 s/it", 5000, 7.224, 1030.0),
        ("iter=40, loss=2.5, time 120ms", 40, 2.5, 120.0),
        ("it 120: loss 3.2100, time 412.31ms, mfu 38.2%", 120, 3.21, 412.31),
        ("Step [100/25000] Loss: 9.8422 Time/step: 0.349s", 100, 9.8422, 349.0),
        ("step 20: loss 6.7542, time 448.91ms, mfu 41.96%", 20, 6.7542, 448.91),  # nanoGPT's, renamed
        ("Step 10: loss 10.821 | 1834 tok/s", 10, 10.821, None),
        # mlx_lm.lora's: the step's time is the inverse of its rate
        (
            "Iter 10: Train loss 2.309, Learning Rate 1.000e-05, It/sec 0.400, Tokens/sec 342.8",
            10,
            2.309,
            2500.0,
        ),
        (
            "completed step: 57, seconds: 2.671, TFLOP/s/device: 144.279, Tokens/s/device: 6134.542,"
            " total_weights: 262144, loss: 10.812",  # MaxText's
            57,
            10.812,
            2671.0,
        ),
        # a logging format's message (accelerate's examples: "%(asctime)s - %(levelname)s - %(name)s - ...")
        (
            "04/17/2025 14:00:40 - INFO - __main__ - step 1: loss=2.8869, lr=4.96e-05, step_time=0.55s",
            1,
            2.8869,
            550.0,
        ),
        (
            "[2024-12-01 12:00:00] iter 16/5000 loss=8.4294 grad_norm=1.322 time/iter=0.736s",
            16,
            8.4294,
            736.0,
        ),
        # t5x's (clu's LoggingWriter), a step's time the inverse of its rate
        (
            "I0607 14:03:29.000000 140009 logging_writer.py:48] [1000100] collection=train accuracy=0.5540,"
            " cross_ent_loss=3.3053, learning_rate=0.001, loss=3.3133, timing/seconds=58.21,"
            " timing/steps_per_second=2.5, z_loss=0.0078",
            1000100,
            3.3133,
            400.0,
        ),
        (
            "0: I1103 22:00:42.000000  2801 logging_writer.py:48] [100] loss=10.8737, z_loss=0.0102",
            100,
            10.8737,
            None,
        ),
        # loguru's and absl's messages, a loop's own forms of a step with its loss right after it
        ("2024-05-01 10:00:00.123 | INFO     | train:loop:203 - Step 12 - loss: 3.412", 12, 3.412, None),
        ("I0501 10:00:38.800000 140234 train.py:142] step 100: loss = 4.12, lr = 2.0e-04", 100, 4.12, None),
        (
            "I0501 10:00:38.800000 140234 train.py:142] train step 200: loss=2.5, step_time=5.80s",
            200,
            2.5,
            5800.0,
        ),
        ("Step: 1/200, Loss: 8.9412, LR: 0.000015, Time: 1.05s", 1, 8.9412, 1050.0),
        ("[rank0] 2024-09-09 09:01:31 Step   100/1500 | train_loss 3.4 | 0.512 s/step", 100, 3.4, 512.0),
        ("Step 0000050 loss 2.4812 grad_norm 0.41", 50, 2.4812, None),
        # nanotron's (its numbers in human_format: thousands as K), picotron's
        (
            "12/09/2024 09:00:41 [INFO|DP=0|PP=0|TP=0|ip-26-0-165-24]: iteration: 5001 / 5200 | consumed_tokens: "
            "2.62G | elapsed_time_per_iteration_ms: 1.19K | tokens_per_sec: 439K | global_batch_size: 256 | "
            "lm_loss: 2.62 | lr: 0.003 | grad_norm: 0.508",
            5001,
            2.62,
            1190.0,
        ),
        (
            "[rank 6] Step: 200   | Loss: 2.1038 | Global batch size:  65.54K | Tokens/s:  87.38K",
            200,
            2.1038,
            None,
        ),
        # neuronx-distributed's examples (the epoch, then the step)
        (
            "LOG Thu Mar 14 02:15:45 2024 - (0, 17) step_loss : 10.7868 learning_rate : 1.50e-06",
            17,
            10.7868,
            None,
        ),
    ],
)
def test_a_loops_step_after_a_loggers_or_a_ranks_fields(tmp_path, line, step, loss, elapsed_ms):
    _, iterations = runs_of(tmp_path, [line])
    assert iterations.select("iteration", "loss", "elapsed_ms", "family").rows() == [
        (step, loss, elapsed_ms, "custom")
    ]


@pytest.mark.parametrize(
    "line",
    [
        "step 1000: train loss 2.9012, val loss 2.9123",  # nanoGPT's evaluation
        "Epoch 1 | iter 100 step 25 | loss train: 2.3456, val: n/a | iter time: 300.12 ms",  # LitGPT's
        "Step 10 | loss:1.5234 lr:2.9e-05 tokens_per_second_per_gpu:1520.44",  # torchtune's logger
        "step: 10  loss:  8.1234  memory: 30.20GiB(31.79%)  tps: 1,234  mfu: 40.12%",  # torchtitan
        "iter 100 step 25: loss 2.3456, iter time: 300.12ms (optimizer.step)",  # LitGPT
        "[Rank 0] step=50, skipped=0, lr=[2.5e-05], mom=[(0.9, 0.95)]",  # DeepSpeed
        "Skipping step 10 | loss scale reduced",  # no step number before a '|' then a loss
        "iter 100: loss 2.3456, time 300.12ms, mfu 40.10%",  # nanoGPT's
        "Iter 600: Val loss 1.180, Val took 17.98s",  # mlx_lm.lora's evaluation
        "Epoch: 0 | Step: 3 | PPO Epoch: 1 | Actor Loss: -0.06 | Critic Loss: 0.24",  # DeepSpeed-Chat's PPO
        "I0607 logging_writer.py:48] [1000] collection=eval accuracy=0.61, loss=2.91",  # t5x's evaluation
    ],
)
def test_other_families_step_records_are_no_custom_loops(tmp_path, line):
    _, iterations = runs_of(tmp_path, [line])
    assert "custom" not in set(iterations["family"])


def test_a_loops_step_time_in_each_shape():
    from logstat.parsers import custom

    def milliseconds(line: str) -> float | None:
        import polars as pl

        frame = pl.DataFrame({"text": [line]})
        return frame.select(custom._milliseconds(pl.col("text"))).item()

    assert milliseconds("step 5 | loss 1.0 | dt: 1262.81ms | tok/sec: 12975.84") == 1262.81
    assert milliseconds("[step 25] loss=3.17 step_time=2.488s") == 2488.0
    assert milliseconds("step 10 | loss 10.5 | lr 6.0e-06 | 806.2 ms/step") == 806.2
    assert milliseconds("epoch 0 step 600/600 | loss 1.03 | 8.83 s/it") == 8830.0
    assert milliseconds("step 7/74 | train loss 11.0 | 1431.6 ms | 40.1% bf16 MFU") == 1431.6
    assert milliseconds("step 2/74 | train loss 4.336 | lr 3.00e-04 | (45.22 ms | 90571 tok/s)") == 45.22
    assert milliseconds("step 7 | loss 11.0 | tokens/s/gpu=6585 | eta 3600s") is None


def test_a_frameworks_own_statement_outweighs_a_loops_words_said_before_it(tmp_path):
    # a Megatron job's script echoes its command line before Megatron's arguments dump states the value
    command = "+ srun python pretrain_gpt.py --seq-length 1024 --micro-batch-size 4"
    dump = [
        "------------------------ arguments ------------------------",
        "  seq_length ...................................... 2048",
        "-------------------- end of arguments ---------------------",
    ]
    row, _ = runs_of(tmp_path, [command, *dump])
    assert (row["seq_len"], row["provenance"]["seq_len"]) == (2048, "megatron:3")
    assert "custom" not in row["families"]  # a fact it stated is no sign of a custom loop
    row, _ = runs_of(tmp_path, [command])
    assert (row["seq_len"], row["provenance"]["seq_len"]) == (1024, "custom:1")
    # a model's repr: the most it takes, not what it trains on (torchtitan's "Building ... with ModelArgs(",
    # whose max_seq_len train.py set to the training's, is its family's)
    row, _ = runs_of(tmp_path, ["model: ModelArgs(dim=4096, n_layers=32, max_seq_len=8192)"])
    assert row["seq_len"] is None


def test_a_loops_header_states_its_batches_length_and_plan(tmp_path):
    header = "world_size=16 micro_batch=16 grad_accum=1 global_batch=256 seq_len=1024 max_steps=3000"
    steps = [f"step {step} | loss 9.{step} | 0.278 s/it" for step in (10, 20)]
    row, _ = runs_of(tmp_path, [header, *steps])
    facts = ("gpus", "micro_batch_size", "global_batch_size", "seq_len", "train_iters")
    assert [row[fact] for fact in facts] == [16, 16, 256, 1024, 3000]
    assert {row["provenance"][fact] for fact in facts[1:]} == {"custom:1"}  # HF's launch context: world_size=
    # a printed config dict's keys; the world in words ("batch_size" alone: per GPU or global, unsaid)
    config = "config: {'model': 'gpt-1.3b', 'seq_len': 2048, 'batch_size': 8, 'max_steps': 50000}"
    for world in ("rank 0 / world size 8 (OMPI_COMM_WORLD_LOCAL_RANK=0)", "DDP: world_size 8 | seq 1024"):
        row, _ = runs_of(tmp_path, [config, world, *steps])
        assert [row[fact] for fact in facts] == [8, None, None, 2048, 50000]
    # another's world (a node's local world) is none
    row, _ = runs_of(tmp_path, ["local_world_size=8 LOCAL_WORLD_SIZE=8", *steps])
    assert row["gpus"] is None
    sized = "Namespace(micro_batch_size=4, global_batch_size=64, seq_length=512, max_steps=0)"
    row, _ = runs_of(tmp_path, [sized, *steps])
    assert [row[fact] for fact in facts] == [None, 4, 64, 512, None]  # 0 steps: no plan
    # fields of a key and its value; short keys (mbs, gbs, micro_bs, per_gpu_batch, local_batch)
    spaced = "[default0]:training 1.3B | seq_len 4096 | micro_bs 2 | global_bs 64 | max_steps 8000"
    short = "dp=8 seq_len=2048 mbs=4 gbs=256 max_steps=60000 per_gpu_batch=4 local_batch=4"
    for header, expected in ((spaced, [None, 2, 64, 4096, 8000]), (short, [None, 4, 256, 2048, 60000])):
        row, _ = runs_of(tmp_path, [header, *steps])
        assert [row[fact] for fact in facts] == expected
    assert row["dp"] == 8
    # other loops' names of the plan and the per-device batch (t5x's and Flax's, MaxText's, a launch line's)
    for header in ("num_train_steps=1000 per_device_batch_size=4", "Launching training, total_steps=1000"):
        row, _ = runs_of(tmp_path, [header, *steps])
        assert (row["train_iters"], row["micro_batch_size"]) == (1000, 4 if "per_device" in header else None)
    # nanotron's config and its start line; picotron's config.json
    nanotron = [
        "Config(parallelism=ParallelismArgs(dp=8, pp=2, tp=4, pp_engine=<nanotron.AllForwardAllBackward>),",
        " [Start training] datetime: 2024-12-09 09:00:40 | mbs: 8 | grad_accum: 4 | global_batch_size: 256 | "
        "sequence_length: 2048 | train_steps: 5200 | start_iteration_step: 5000",
    ]
    picotron = ['        "tp_size": 2,', '        "total_train_steps": 200,']  # its tp_size: see custom.py
    for lines, expected in (
        (nanotron, (8, 256, 2048, 5200, 4, 2)),
        (picotron, (None, None, None, 200, None, None)),
    ):
        row, _ = runs_of(tmp_path, [*lines, *steps])
        shape = ("micro_batch_size", "global_batch_size", "seq_len", "train_iters", "tp", "pp")
        assert tuple(row[fact] for fact in shape) == expected
    # Megatron's names of the parallel sizes as a repr's keywords (NeMo 2's strategy, printed)
    row, _ = runs_of(
        tmp_path,
        [
            "strategy=Config(MegatronStrategy, tensor_model_parallel_size=4, pipeline_model_parallel_size=2),",
            *steps,
        ],
    )
    assert (row["tp"], row["pp"]) == (4, 2)
    # nor another's key and value in words: a model's "max_seq_len 8192", "world 4"
    row, _ = runs_of(tmp_path, ["max_seq_len 8192 | hello world 4", *steps])
    assert [row[fact] for fact in facts] == [None] * 5


def test_megatrons_flags_on_an_echoed_command_state_a_run_that_never_dumped_its_arguments(tmp_path):
    command = (
        "[2024-03-12 10:15:29,766] [INFO] [runner.py:568:main] cmd = /usr/bin/python -u -m deepspeed.launcher.launch"
        " pretrain_gpt.py --tensor-model-parallel-size 4 --pipeline-model-parallel-size=2 --micro-batch-size 1"
        " --global-batch-size 512 --seq-length 4096 --train-iters 100000"
    )
    failure = ["Traceback (most recent call last):", '  File "pretrain_gpt.py", line 3', "ValueError: bad"]
    row, _ = runs_of(tmp_path, [command, *failure])
    facts = ("tp", "pp", "micro_batch_size", "global_batch_size", "seq_len", "train_iters")
    assert [row[fact] for fact in facts] == [4, 2, 1, 512, 4096, 100000]
    dump = [
        "------------------------ arguments ------------------------",
        "  train_iters ..................................... 2000",
        "-------------------- end of arguments ---------------------",
    ]
    row, _ = runs_of(tmp_path, [command, *dump])
    assert (row["train_iters"], row["provenance"]["train_iters"]) == (2000, "megatron:3")


def test_verls_console_steps_and_plan(tmp_path):
    # verl's console logger: "step:N" and its metrics joined by " - "; a validation before training is none
    lines = [
        "(TaskRunner pid=3021) Total training steps: 2",
        "(TaskRunner pid=3021) step:0 - val/test_score/openai/gsm8k:0.619",
        *(
            f"(TaskRunner pid=3021) step:{step} - actor/entropy:0.305 - actor/pg_loss:0.01{step} - "
            f"critic/score/mean:0.7 - timing_s/gen:21.4 - timing_s/step:58.{step}"
            for step in (1, 2)
        ),
    ]
    row, iterations = runs_of(tmp_path, lines)
    assert iterations.select("iteration", "loss", "elapsed_ms").rows() == [
        (1, 0.011, 58100.0),
        (2, 0.012, 58200.0),
    ]
    assert (row["family"], row["train_iters"], row["status"]) == ("custom", 2, "ok")


def test_internlms_and_neuronx_distributeds_parallel_sizes(tmp_path):
    launch = (
        "2024-06-18 09:12:00,448\tINFO launch.py:424 in launch -- Distributed environment is initialized,"
        " data parallel size: 4, pipeline parallel size: 2, tensor parallel size: 8"
    )
    row, _ = runs_of(tmp_path, [launch, "step 1 | loss 9.1 | 0.278 s/it"])
    assert (row["dp"], row["pp"], row["tp"], row["gpus"]) == (4, 2, 8, 64)
    # Megatron's parallel state, as neuronx-distributed prints it
    state = "[2024-03-14 02:12:51.110: I neuronx_distributed/parallel_layers/parallel_state.py:137] > initializing"
    sizes = [f"{state} tensor model parallel with size 8", f"{state} pipeline model parallel with size 4"]
    row, _ = runs_of(tmp_path, [*sizes, f"{state} data parallel with size 2", "step 1 | loss 9.1"])
    assert (row["dp"], row["pp"], row["tp"], row["gpus"]) == (2, 4, 8, 64)
    # Megatron-LM's, once initialized
    done = [
        "> initialized tensor model parallel with size 2",
        "> initialized pipeline model parallel with size 4",
    ]
    row, _ = runs_of(tmp_path, [*done, "step 1 | loss 9.1"])
    assert (row["tp"], row["pp"]) == (2, 4)


def test_mlx_lms_plan_is_its_iters(tmp_path):
    # mlx_lm's trainer: "Starting training..., iters: {args.iters}", then "Iter N: Train loss"
    lines = ["Starting training..., iters: 600", "Iter 10: Train loss 2.170, It/sec 0.414"]
    row, _ = runs_of(tmp_path, lines)
    assert (row["train_iters"], row["status"]) == (600, "incomplete")


def test_a_loop_counting_from_0_that_logged_its_plans_last_step_ended(tmp_path):
    # MaxText's pyconfig prints each key; its loop runs range(steps), the last step logged is steps - 1
    header = ["Config param max_target_length: 2048", "Config param steps: 100"]
    line = "completed step: {}, seconds: 2.671, TFLOP/s/device: 144.2, loss: 10.812"
    row, _ = runs_of(tmp_path, [*header, *(line.format(step) for step in range(100))])
    assert (row["seq_len"], row["train_iters"], row["last_iteration"]) == (2048, 100, 99)
    assert (row["status"], row["reason"]) == ("ok", "reached the planned 100 iterations")
    row, _ = runs_of(tmp_path, [*header, *(line.format(step) for step in range(1, 100))])
    assert row["status"] == "incomplete"


@pytest.mark.parametrize(
    ("flag", "planned"),
    [
        ("--steps 50000", 50000),
        ("--max-steps=1200", 1200),
        ("--total_steps 800", 800),
        ("--training.steps 100", 100),  # torchtitan's
        ("--max_train_steps 1000", 1000),  # HF's no_trainer examples'
        ("--warmup-steps 500", None),
        ("--training_steps 500", None),  # not torchtitan's dot
    ],
)
def test_a_loops_steps_flag_on_an_echoed_command_is_its_plan(tmp_path, flag, planned):
    command = f"+ srun --kill-on-bad-exit=1 python -u train_ddp.py {flag} --lr 3e-4"
    row, _ = runs_of(tmp_path, [command, *(f"step {step} | loss 9.{step} | 0.278 s/it" for step in (10, 20))])
    assert row["train_iters"] == planned


@pytest.mark.parametrize(
    ("line", "billions"),
    [
        ("Total params: 6,050,882,784", 6.050882784),  # torchinfo, Keras
        ("Loaded meta-llama/Llama-2-7b-hf: 6,738,415,616 parameters", 6.738415616),
        ("number of parameters: 123.59M", None),  # nanoGPT's, its family's own
        ("num decayed parameter tensors: 50, with 124,354,560 parameters", None),  # a part
    ],
)
def test_a_scripts_parameter_count(tmp_path, line, billions):
    row, _ = runs_of(tmp_path, [line])
    if billions is None:
        assert not row["provenance"].get("logged_model_size", "").startswith("custom")
    else:
        assert row["logged_model_size"] == pytest.approx(billions)


@pytest.mark.parametrize(
    ("end", "ended"),
    [
        ("training done", True),
        ("2024-05-01 10:00:00 | INFO | Training complete: 1000 steps", True),
        ("[rank0] Training finished at step 40", True),
        ("Done training.", True),
        ("Finished Training", True),  # DeepSpeedExamples' cifar10
        ("finished training in 3.2 h", True),
        ("Training completed. Do not forget to share your model on huggingface.co/models =)", True),
        ("04/17/2025 14:01:46 - INFO - __main__ - done: 120 steps in 66.0s", True),
        ("Saved final weights to adapters/adapters.safetensors.", True),  # mlx_lm's
        ("Saved final weights? no", False),
        ("training done_callback registered", False),
        ("Pretraining completeness check: 3 shards", False),
    ],
)
def test_a_loops_own_word_that_training_ended_is_the_runs_end(tmp_path, end, ended):
    steps = [f"step {step} | loss 9.{step} | 0.278 s/it" for step in (10, 20)]
    row, _ = runs_of(tmp_path, [*steps, end])
    assert row["status"] == ("ok" if ended else "incomplete")
    assert not ended or end.endswith(row["reason"])  # quoted without a logger's time
    # a failure after it (a rank's, at teardown) is the run's end
    failure = ["Traceback (most recent call last):", '  File "train.py", line 3', "ValueError: bad"]
    row, _ = runs_of(tmp_path, [*steps, end, *failure])
    assert (row["status"], row["reason"]) == ("failed", "ValueError: bad")


def stage(total: int, every: int, seconds: float) -> list[str]:
    return [
        f"step {s}/{total} | loss {9 - s / total:.4f} | {seconds:.3f}s/step"
        for s in range(every, total + 1, every)
    ]


def test_trainings_run_one_after_another_in_a_log_are_the_last_ones_rows(tmp_path):
    # `torchrun pretrain.py && torchrun sft.py`: nothing announces the second training but its steps starting
    # over; the run is the last training's, as far as it got
    sft = stage(150, 10, 0.22)
    row, iterations = runs_of(
        tmp_path, ["+ torchrun pretrain.py && torchrun sft.py", *stage(400, 20, 0.3), *sft]
    )
    assert iterations["iteration"].to_list() == list(range(10, 151, 10))
    assert (row["last_iteration"], row["train_iters"], row["status"]) == (150, 150, "ok")
    assert row["sec_per_iter"] == pytest.approx(0.22)
    # preempted in the second: that ended the run, though more launches than preemptions were logged
    preempted = "slurmstepd: error: *** JOB 77 ON n1 CANCELLED AT 2024-05-03T11:02:59 DUE TO PREEMPTION ***"
    row, _ = runs_of(tmp_path, [*stage(400, 20, 0.3), *sft[:5], preempted])
    assert (row["status"], row["last_iteration"]) == ("cancelled", 50)


def test_a_ranks_lagging_line_or_its_own_file_is_no_new_training(tmp_path):
    # every rank prints: a line of the slower rank after a later step of the other, then the others go on
    lines = stage(60, 10, 0.3)
    row, iterations = runs_of(tmp_path, [*lines[:3], lines[0], *lines[3:]])
    assert iterations["iteration"].to_list() == [10, 20, 30, 40, 50, 60]
    # ranks' records glued into one line, in any order, are one moment's
    glued = "".join(f"[default{rank}]:{lines[step]}" for rank, step in enumerate((2, 0, 1)))
    row, iterations = runs_of(tmp_path, [glued])
    assert iterations["iteration"].to_list() == [10, 20, 30]
    # each rank's own log counts from the start; the failure in rank 0's is the run's, though rank 1's file,
    # read after it, went on
    failure = "RuntimeError: CUDA error: an illegal memory access was encountered"
    traceback = ["Traceback (most recent call last):", '  File "train.py", line 9, in <module>', failure]
    (tmp_path / "rank0.log").write_text("\n".join([*lines[:3], *traceback]) + "\n", encoding="utf-8")
    (tmp_path / "rank1.log").write_text("\n".join(lines[:4]) + "\n", encoding="utf-8")
    (tmp_path / "train.log").unlink()
    row, _ = read(tmp_path)
    assert (row["status"], row["reason"]) == ("failed", failure)
