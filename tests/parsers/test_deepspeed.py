"""DeepSpeed family on real lines, through the reader: 2021 config dumps of the real logs
(fixtures/bigscience), today's (0.19.8) CPU runs, DeepSpeed-Chat's logs.

Expected values were read off the files with the one-liners quoted beside them, not with the parser.
"""

from functools import partial
from pathlib import Path

import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from logstat.parsers import deepspeed, engine, megatron, reader, source
from logstat.parsers.base import RunBuilder
from logstat.parsers.reader import RunFiles, read_settled
from polars.testing import assert_frame_equal

from tests.parsers.feeding import feed_file, feed_lines, first_run

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
DS = FIXTURES / "deepspeed"
HF_REAL = "hf_ds_gpt2_perf_n16_bs4-mbs8.out"
#: a Megatron arguments dump, empty: Megatron was seen, and stated nothing
MEGATRON_DUMP = [
    "------------------------ arguments ------------------------",
    "-------------------- end of arguments ---------------------",
]


def feed(path: Path) -> RunBuilder:
    return feed_file(deepspeed.FAMILY, path)


def feed_with_megatron(tmp_path: Path, lines: list[str]) -> RunBuilder:
    """The run Megatron and DeepSpeed read from a log of ``lines`` (numbered from 1)."""
    log = tmp_path / "meg_ds.log"
    log.write_text("".join(f"{line}\n" for line in lines), encoding="utf-8")
    return read_settled([RunFiles(key=str(log), files=(log,))], [megatron.FAMILY, deepspeed.FAMILY])[0].run


def test_todays_config_dump_zero1_fp32():
    run = feed(DS / "ds_zero1_fp32_2cpu.log")
    # grep -n "print\]   \(train_batch_size\|train_micro_batch_size_per_gpu\|gradient_accumulation_steps\|world_size\|zero_optimization_stage\) " ds_zero1_fp32_2cpu.log
    # -> 105: gas 2, 131: train_batch_size 16, 132: micro 4, 137: world_size 2, 142: stage 1
    assert run.facts["global_batch_size"] == 16
    assert run.provenance["global_batch_size"] == "deepspeed:131"
    assert run.facts["micro_batch_size"] == 4
    assert run.facts["gas"] == 2
    assert run.facts["zero_stage"] == 1
    assert run.provenance["zero_stage"] == "deepspeed:142"
    # float16_config / bfloat16_config both "enabled=False" (lines 93, 73): fp32, at "json = {" (grep -n "json = " -> 143)
    assert run.facts["precision"] == "fp32"
    assert run.provenance["precision"] == "deepspeed:143"
    # zero_config: "offload_param=None offload_optimizer=None"
    assert run.facts["offload_param"] is False and run.facts["offload_optimizer"] is False
    # no model parallelism: the world size is the GPU (here CPU process) count; the profiler says 2 as well
    assert run.facts["dp"] == 2 and run.facts["gpus"] == 2
    assert run.state.get("parse_errors") is None
    assert run.families_seen[deepspeed.NAME] > 0


def test_todays_steps_throughput_and_flops_profiler():
    run = feed(DS / "ds_zero1_fp32_2cpu.log")
    # grep -n "step=[0-9]*, skipped" -> steps 0 (engine start, not a training step), 2, 4, 6;
    # "Profile Summary at step 3" (line 188) adds step 3.
    assert sorted(run.iterations) == [2, 3, 4, 6]
    assert run.iterations[2]["lr"] == 0.001 and run.iterations[2]["skipped"] == 0
    # line 227: global_step=4, CurrSamplesPerSec=1432.750178503156, MemAllocated=0.37GB, MaxMemAllocated=0.37GB
    four = run.iterations[4]
    assert four["samples_per_sec"] == 1432.750178503156  # the throughput line comes before step 4's profile
    assert four["mem_allocated_mb"] == 0.37 * 1024
    assert four["mem_max_allocated_mb"] == 0.37 * 1024
    assert run.iterations[6]["samples_per_sec"] == 530.8481454704389
    # profile at step 3: "iter latency: 392.2 us" (211), "FLOPS per GPU = 3 * ...: 158.61 MFLOPS" (212),
    # "samples/second: 20397.83" (213): the latency and samples/s are one profiled micro-batch's (of gas 2),
    # not the step's, so only the FLOPS rate is recorded, on a row that points at the summary's step line
    three = run.iterations[3]
    assert three["logged_tflops_per_gpu"] == 158.61e6 / 1e12
    assert three.get("elapsed_ms") is None and three.get("samples_per_sec") is None
    assert three["line"] == 188
    # step 4's profile: "iter latency: 10.76 ms" (253), "FLOPS per GPU ...: 5.78 MFLOPS" (254)
    assert four.get("elapsed_ms") is None
    assert four["logged_tflops_per_gpu"] == 5.78e6 / 1e12
    # "params of model = params per GPU * mp_size: 2.63 K" (201): 2630 parameters, in billions
    assert run.facts["logged_model_size"] == 2630 / 1e9


def test_todays_zero3_bf16_optimizer_offload():
    run = feed(DS / "ds_zero3_offload_bf16_2cpu.log")
    # 84: bfloat16_config "enabled=True", 104: float16_config "enabled=False", 153: zero_optimization_stage 3
    assert run.facts["precision"] == "bf16"
    assert run.provenance["precision"] == "deepspeed:84"
    assert run.facts["zero_stage"] == 3
    # grep -o "offload_param=[^ ]*\|offload_optimizer=[A-Za-z]*(device='[a-z]*'"
    # -> offload_param=None, offload_optimizer=DeepSpeedZeroOffloadOptimizerConfig(device='cpu'
    assert run.facts["offload_param"] is False
    assert run.facts["offload_optimizer"] is True


def test_megatron_deepspeed_3d_dump_with_a_glued_line(tmp_path):
    # meg_ds_3d line 694 (excerpt line 40) starts mid-record: "10 20:47:51,886] [INFO] [config.py:904:print]
    # optimizer_params ....": the lines fp16_enabled .. gradient_accumulation_steps were lost in the gluing,
    # so precision and gas come from the user json and the pipeline engine's "CONFIG: micro_batches=256
    # micro_batch_size=4". Megatron's arguments came first in the real log (two lines before the excerpt here).
    excerpt = (DS / "meg_ds_3d_gpt2_perf_n16-ds-on.lines655-835.excerpt").read_text().splitlines()
    run = feed_with_megatron(tmp_path, MEGATRON_DUMP + excerpt)
    before = len(MEGATRON_DUMP)
    assert run.facts["global_batch_size"] == 1024  # excerpt line 63: train_batch_size ............. 1024
    assert run.provenance["global_batch_size"] == f"deepspeed:{63 + before}"
    # the dump's first statements: json's "train_micro_batch_size_per_gpu": 4 (93) and
    # "gradient_accumulation_steps": 256 (94); the CONFIG line (111) states both again, later
    assert (run.facts["micro_batch_size"], run.facts["gas"]) == (4, 256)
    assert run.provenance["gas"] == f"deepspeed:{111 + before}"
    assert run.facts["precision"] == "fp16"  # json's "fp16": {"enabled": true (101)
    assert run.provenance["precision"] == f"deepspeed:{101 + before}"
    # zero_config's "stage": 0 (70) comes before zero_enabled False (90) and zero_optimization_stage 0 (91)
    assert run.facts["zero_stage"] == 0 and run.provenance["zero_stage"] == f"deepspeed:{70 + before}"
    # zero_config: "offload_param": null (79), "offload_optimizer": null (80)
    assert run.facts["offload_param"] is False and run.facts["offload_optimizer"] is False
    assert run.provenance["offload_param"] == f"deepspeed:{79 + before}"
    # world_size ................... 1 (67) is the data-parallel size: with Megatron's model parallelism it
    # is not the GPU count
    assert run.facts["dp"] == 1
    assert "gpus" not in run.facts
    # grep -o "UNIQUE_PARAMS=[0-9]*" | sort -u -> UNIQUE_PARAMS=52004716544
    assert run.facts["logged_model_size"] == 52004716544 / 1e9
    # step=0 is printed at engine start: no training step
    assert run.iterations == {}


def test_megatron_deepspeed_zero3_dump(tmp_path):
    excerpt = (DS / "meg_ds_zero_gpt2_perf_n16_nbs48_ms48.lines148-280.excerpt").read_text().splitlines()
    run = feed_with_megatron(tmp_path, ["using world size: 64 and model-parallel size: 4", *excerpt])
    # grep -n "print\]   \(train_batch_size\|train_micro_batch_size_per_gpu\|world_size\|zero_optimization_stage\|fp16_enabled\) "
    assert (run.facts["global_batch_size"], run.facts["micro_batch_size"], run.facts["gas"]) == (768, 48, 1)
    # Megatron stated the GPUs (64) and the data-parallel size (64 / 4) first; DeepSpeed's world_size 16
    # (excerpt line 83) is the same DP size, and is no GPU count
    assert (run.facts["gpus"], run.facts["dp"]) == (64, 16)
    assert run.provenance["gpus"] == run.provenance["dp"] == "megatron:1"
    # zero_config's "stage": 3 (excerpt line 86) comes before zero_optimization_stage 3 (106)
    assert run.facts["zero_stage"] == 3 and run.provenance["zero_stage"] == "deepspeed:87"
    assert run.facts["precision"] == "fp16"
    # zero_config: "offload_param": null, "offload_optimizer": null (95, 96)
    assert run.facts["offload_param"] is False and run.facts["offload_optimizer"] is False


DUMP = [
    "[2021-05-26 04:38:20,031] [INFO] [config.py:748:print] DeepSpeedEngine configuration:",
    "[2021-05-26 04:38:20,033] [INFO] [config.py:752:print]   world_size ................... 16",
]
ITERATION = " iteration        1/    1000 | consumed samples: 16 | elapsed time per iteration (ms): 1000.0 |"


@pytest.mark.parametrize(
    ("lines", "gpus"),
    [
        ([*DUMP, ITERATION], 16),  # Megatron's first record comes after the dump
        ([ITERATION, *DUMP], None),  # an iteration line (a record kind) came first
        ([*MEGATRON_DUMP, *DUMP], None),  # an arguments dump (a block) came first
        (["using world size: 64, data-parallel-size: 16, tensor-model-parallel size: 4", *DUMP], 64),
    ],
)
def test_world_size_is_the_gpu_count_unless_megatron_came_first(tmp_path, lines, gpus):
    run = feed_with_megatron(tmp_path, lines)
    assert run.facts.get("gpus") == gpus
    assert run.facts["dp"] == 16
    if gpus == 16:
        assert run.provenance["gpus"] == run.provenance["dp"] == f"deepspeed:{lines.index(DUMP[1]) + 1}"


CONFIG_INIT = (
    "[2024-05-02 01:10:10,903] [INFO] [config.py:733:__init__] Config mesh_device None world_size = 16"
)
MESH = "DeviceMesh('cuda', [[0, 1], [2, 3]], mesh_dim_names=('data_parallel', 'sequence_parallel'))"


@pytest.mark.parametrize(
    ("lines", "gpus"),
    [
        ([CONFIG_INIT, ITERATION], 16),
        ([*MEGATRON_DUMP, CONFIG_INIT], None),  # with Megatron's mpu it is the data-parallel size
        ([CONFIG_INIT.replace("= 16", "= 16.0")], None),  # Ulysses: the world / sequence-parallel size
        ([CONFIG_INIT.replace("None", MESH)], None),  # the mesh's data-parallel group
    ],
)
def test_the_configs_world_size_at_its_start_is_the_dp_size_and_without_model_parallelism_the_gpus(
    tmp_path, lines, gpus
):
    run = feed_with_megatron(tmp_path, lines)
    assert (run.facts["dp"], run.facts.get("gpus")) == (16, gpus)
    assert run.provenance["dp"] == f"deepspeed:{len(lines) if lines[0] != CONFIG_INIT else 1}"


@pytest.mark.parametrize(
    "line",
    [
        "[2024-03-03 10:00:01,123] [INFO] [runner.py:568:main] cmd = pdsh -S -f 1024 -w trn-a,trn-d export "
        "PYTHONPATH=/home/ml; cd /home/ml; /usr/bin/python -u -m deepspeed.launcher.launch --world_info=e30= "
        "--node_rank=%n train.py --deepspeed",
        "trn-a: [2024-03-03 10:00:02,456] [INFO] [launch.py:164:main] dist_world_size=16",
        "[2024-03-03 10:00:03,789] [INFO] [comm.py:637:init_distributed] Initializing TorchBackend in DeepSpeed "
        "with backend nccl",
    ],
)
def test_a_run_deepspeed_launched_or_set_up_is_deepspeeds_though_it_failed_before_its_engine(tmp_path, line):
    from logstat.api import load_runs

    log = tmp_path / "ds-77.out"
    log.write_text(f"{line}\ntrn-d: ml@trn-d: Permission denied (publickey).\n")
    row = load_runs([log]).runs.row(0, named=True)
    assert (row["family"], row["status"]) == ("deepspeed", "failed")
    # the words elsewhere are no evidence
    log.write_text("the cmd = line and dist_world_size=16 of a script\n")
    assert load_runs([log]).runs.row(0, named=True)["family"] == "unknown"


@pytest.mark.parametrize("where", ["fixture", "full"])
def test_hf_log_three_launches_last_dump_wins(where, request):
    path = (
        DS.parent / "hf_trainer" / HF_REAL
        if where == "fixture"
        else request.getfixturevalue("real_logs") / HF_REAL
    )
    run = feed(path)
    # grep -n "print\]   \(train_batch_size\|train_micro_batch_size_per_gpu\) " -> 2048/32, 1024/16, then 512/8:
    # the job relaunched twice; the last engine is the one that trained.
    assert run.facts["global_batch_size"] == 512
    assert run.facts["micro_batch_size"] == 8
    assert run.facts["gas"] == 1
    assert run.facts["dp"] == 64 and run.facts["gpus"] == 64  # world_size 64, no model parallelism
    assert run.facts["zero_stage"] == 3
    assert run.facts["precision"] == "fp16"
    # last zero_config: "offload_param": {"device": "cpu", ...}, "offload_optimizer": {"device": "cpu", ...}
    assert run.facts["offload_param"] is True and run.facts["offload_optimizer"] is True
    if where == "full":
        # grep -n "train_batch_size \.\.\.\.* 512" -> 1470; grep -n '"device": "cpu"' | tail -n +5 | head -2 -> 1486, 1494
        assert run.provenance["global_batch_size"] == "deepspeed:1470"
        assert run.provenance["offload_param"] == "deepspeed:1486"
        assert run.provenance["offload_optimizer"] == "deepspeed:1494"
        # the last zero_config's "stage": 3 (1476) comes before zero_optimization_stage 3 (1512)
        assert run.provenance["zero_stage"] == "deepspeed:1476"
    assert run.state.get("parse_errors") is None


def test_records_glued_by_two_ranks_in_one_line():
    # real lines 1470 and 1471 of the HF log written into one line, as 64 ranks sharing a file do
    glued = (
        "[2021-05-26 04:51:31,919] [INFO] [config.py:752:print]   train_batch_size ............. 512"
        "[2021-05-26 04:51:31,919] [INFO] [config.py:752:print]   train_micro_batch_size_per_gpu  8"
    )
    # two step records of one line (today's format), the second cut by the end of the file
    steps = (
        "[Rank 0] step=2, skipped=0, lr=[0.001], mom=[(0.9, 0.999)]"
        "[2026-11-21 21:47:07,714] [INFO] [logging.py:123:log_dist] [Rank 0] step=4, skipped=1, lr=[0.0005, 0.0005], mom="
        "[2026-11-21 21:47:07,757] [INFO] [logging.py:123:log_dist] [Rank 0] step=6, skip"
    )
    run = feed_lines(deepspeed.FAMILY, [glued, steps])
    assert run.facts["global_batch_size"] == 512
    assert run.facts["micro_batch_size"] == 8
    assert run.provenance["micro_batch_size"] == "deepspeed:1"
    assert sorted(run.iterations) == [2, 4]
    assert run.iterations[4]["lr"] == 0.0005 and run.iterations[4]["skipped"] == 1


def test_skipped_counts_are_per_logged_step():
    # DeepSpeed's skipped= is cumulative; the iterations frame counts skips since the previous logged step.
    # Step 0 (a new engine) counts from its own total; a total that fell (a relaunch) counts none.
    totals = [(0, 0), (10, 3), (20, 3), (30, 5), (0, 1), (40, 4), (50, 2)]
    lines = [
        f"[Rank 0] step={step}, skipped={skipped}, lr=[5e-05], mom=[[0.9, 0.999]]" for step, skipped in totals
    ]
    run = feed_lines(deepspeed.FAMILY, lines)
    assert {step: row["skipped"] for step, row in run.iterations.items()} == {
        10: 3,
        20: 0,
        30: 2,
        40: 3,
        50: 0,
    }


def test_pipeline_engine_steps_line():
    # format of deepspeed/runtime/pipe/engine.py: f'steps: {n} loss: {x:0.4f} iter time (s): {t:0.3f} samples/sec: {s:0.3f}'
    run = feed_lines(
        deepspeed.FAMILY, ["", "", "steps: 10 loss: 9.8765 iter time (s): 12.345 samples/sec: 82.948"]
    )
    assert run.iterations[10]["loss"] == 9.8765
    assert run.iterations[10]["elapsed_ms"] == 12.345 * 1000
    assert run.iterations[10]["samples_per_sec"] == 82.948
    assert run.iterations[10]["line"] == 3


def _chat_ppo_line(epoch: int, step: int, loss: float, *, newer: bool) -> str:
    """DeepSpeed-Chat step 3's line after a generation batch's PPO epochs (step3_rlhf_finetuning/main.py)."""
    if newer:
        return f"Epoch: {epoch} | Step: {step} | PPO Epoch: 1 | Actor Loss: {loss} | Critic Loss: 0.25 | Unsupervised Loss: 0.0"
    return f"epoch: {epoch}|step: {step}|ppo_ep: 1|act_loss: {loss}|cri_loss: 0.25|unsup_loss: 0.0"


@pytest.mark.parametrize("newer", [False, True])
def test_deepspeed_chat_ppo_lines_are_steps_counted_across_epochs(newer):
    lines = ["Beginning of Epoch 1/2, Total Generation Batches 3"]
    lines += [_chat_ppo_line(0, index, 0.5 + index, newer=newer) for index in range(3)]
    lines += ["Beginning of Epoch 2/2, Total Generation Batches 3", _chat_ppo_line(1, 0, -0.125, newer=newer)]
    run = feed_lines(deepspeed.FAMILY, lines)
    # the batch's index in its epoch, from 1, after the epochs before it
    assert {step: row["loss"] for step, row in run.iterations.items()} == {1: 0.5, 2: 1.5, 3: 2.5, 4: -0.125}
    assert run.iterations[4]["line"] == 6
    # a later epoch's line whose banner is not in the log is no step
    assert feed_lines(deepspeed.FAMILY, [_chat_ppo_line(1, 0, 0.5, newer=newer)]).iterations == {}


@pytest.mark.parametrize(
    "line",
    [
        "",
        "\x00\x01\x02 binary",
        "[INFO] [config.py:752:print]",
        "[INFO] [config.py:752:print]   train_batch_size ............. lots",
        "[INFO] [config.py:752:print]   world_size ................... ",
        "[INFO] [config.py:752:print]   train_batch_size ............. 1e400",
        "[INFO] [config.py:752:print]   world_size ................... inf",
        "[INFO] [config.py:752:print]   world_size ................... 2.0",
        "epoch=0/micro_step=8/global_step=4, RunningAvgSamplesPerSec=1821.75, CurrSamplesPerS",
        "[Rank 0] step=, skipped=0, lr=[]",
        '    "device": "cpu", ',
        "Profile Summary at step x:",
        "samples/second: fast",
        "world size: 64",
    ],
)
def test_garbage_lines_record_nothing_and_do_not_raise(line):
    run = feed_lines(deepspeed.FAMILY, [line])
    assert run.facts == {} and run.iterations == {}
    assert run.state.get("parse_errors") is None


@settings(max_examples=60, deadline=None)
@given(
    st.text(
        alphabet=st.sampled_from(list('step=,skiped[]0123456789.eE-lr /:GBSamplesPerSec{}"device')),
        max_size=120,
    )
)
def test_any_line_is_read_without_an_internal_error(text):
    run = feed_lines(deepspeed.FAMILY, [text, "[INFO] [config.py:752:print]   " + text])
    # the only notes: an integer too long for the frames
    assert all("does not fit a 64-bit integer" in note for note in run.state.get("parse_errors", []))


def test_a_json_value_left_open_in_the_out_file_does_not_read_the_err_file(tmp_path):
    """A JSON value still open at the end of a job's .out must not take a line of its .err (line numbers
    start again there) for one of its keys."""
    from logstat.api import load_runs

    tag = "[2024-01-01 00:00:00,000] [INFO] [config.py:100:print]"
    (tmp_path / "job-77.out").write_text(
        f"{tag} DeepSpeedEngine configuration:\n{tag}   zero_config .................. {{\n"
        '    "allgather_partitions": true,\n'
    )
    (tmp_path / "job-77.err").write_text('a marked line: step=1, "stage": 3\n')
    runs = load_runs([tmp_path]).runs
    assert runs["zero_stage"].to_list() == [None]
    assert runs["paths"].to_list()[0][1].endswith("job-77.err")


def _frames(paths: list[Path]) -> tuple[pl.DataFrame, ...]:
    groups = [RunFiles(key=str(path), files=(path,)) for path in paths]
    return reader.frames(reader.read_runs(groups, [megatron.FAMILY, deepspeed.FAMILY]))


def test_a_log_read_in_segments_gives_what_it_gives_read_whole(tmp_path, monkeypatch):
    """Flushed after every batch of a few hundred bytes, a run's records are read in many segments, each
    after what the one before left (which dump, what it stated, its precision flags, the ``skipped=``
    total, the profiler's header): the frames are those of the log read whole."""
    zero1 = (DS / "ds_zero1_fp32_2cpu.log").read_text().splitlines()
    # without its user config, whose JSON value (a block still open) holds the records after it back
    relaunched = tmp_path / "relaunched.log"
    relaunched.write_text("".join(f"{line}\n" for line in 2 * (zero1[:142] + zero1[149:])))
    paths = [*sorted(DS.glob("*.*")), DS.parent / "hf_trainer" / HF_REAL, relaunched]
    whole = _frames(paths)
    monkeypatch.setattr(engine, "FLUSH_RECORDS", 1)
    monkeypatch.setattr(source, "CHUNK_BYTES", 1000)
    monkeypatch.setattr(source, "batches", partial(source.batches, batch_bytes=1000))
    for segmented, read_whole in zip(_frames(paths), whole, strict=True):
        assert_frame_equal(segmented, read_whole)


def _topology_line(grid) -> str:
    """What ``PipelineParallelGrid`` prints on rank 0 for ``grid`` (the installed DeepSpeed's own class)."""
    return f"Using topology: {grid}"


@pytest.mark.parametrize(("pp", "tp", "dp"), [(4, None, 2), (2, 2, 2), (1, 4, 1)])
def test_a_pipeline_topology_states_the_gpus_the_dump_world_size_does_not(tmp_path, pp, tp, dp):
    from deepspeed.runtime.pipe.topology import PipeDataParallelTopology, PipeModelDataParallelTopology

    if tp is None:
        grid = PipeDataParallelTopology(num_pp=pp, num_dp=dp)
    else:
        grid = PipeModelDataParallelTopology(num_pp=pp, num_mp=tp, num_dp=dp)
    # the pipeline engine's config world_size is the data-parallel size (mpu's), printed after the grid
    dump = [DUMP[0], DUMP[1].replace("16", str(dp))]
    run = feed_with_megatron(tmp_path, [_topology_line(grid), *dump])
    assert (run.facts["gpus"], run.facts["pp"], run.facts.get("tp"), run.facts["dp"]) == (
        pp * (tp or 1) * dp,
        pp,
        tp,
        dp,
    )
    assert run.provenance["gpus"] == run.provenance["pp"] == "deepspeed:1"


def test_the_partition_rank_0_prints_states_the_pipeline(tmp_path):
    # PipelineModule._partition_layers: rank 0 prints "stage={stage} layers={n}" for every stage, in order
    stages = [f"stage={stage} layers={layers}" for stage, layers in enumerate((12, 10, 10, 11))]
    run = feed_with_megatron(tmp_path, [*stages, *DUMP])
    assert (run.facts["pp"], run.provenance["pp"]) == (4, "deepspeed:4")
    # a line that only looks like one (a config's repr, a sentence) states nothing
    assert feed_with_megatron(tmp_path, ["model stage=3 layers=2 of 8", *DUMP]).facts.get("pp") is None


def test_the_partition_cut_short_after_the_topology_leaves_the_topology_s_pipeline(tmp_path):
    from deepspeed.runtime.pipe.topology import PipeDataParallelTopology

    # the grid is printed whole before the partition (PipelineModule.__init__); a log cut after the first
    # stage's line lists one stage of four
    grid = PipeDataParallelTopology(num_pp=4, num_dp=2)
    run = feed_with_megatron(
        tmp_path, [_topology_line(grid), "stage=0 layers=8", "     0: EmbeddingPipe", *DUMP]
    )
    assert (run.facts["pp"], run.provenance["pp"]) == (4, "deepspeed:1")


def test_a_topology_cut_before_its_end_states_nothing(tmp_path):
    from deepspeed.runtime.pipe.topology import PipeDataParallelTopology

    cut = _topology_line(PipeDataParallelTopology(num_pp=4, num_dp=2))[:-20]
    run = feed_with_megatron(tmp_path, [cut, *DUMP])
    assert run.facts.get("pp") is None and run.facts["gpus"] == run.facts["dp"] == 16


def _throughput(step: int, samples_per_sec: float) -> str:
    """ThroughputTimer's record (DeepSpeed 0.19's format, timer.py) of ``step`` at 2 micro-steps a step."""
    return (
        f"[2026-11-21 21:47:07,715] [INFO] [timer.py:264:stop] epoch=0/micro_step={2 * step}/global_step={step}, "
        f"RunningAvgSamplesPerSec={samples_per_sec}, CurrSamplesPerSec={samples_per_sec}, "
        "MemAllocated=0.37GB, MaxMemAllocated=0.5GB"
    )


def test_an_engine_dump_after_steps_starts_a_launch_whose_steps_replace_the_earlier():
    # a job requeued into the same file: the new engine prints its dump, resumes at step 2, logs 2 and 3 again
    first = [*DUMP, _throughput(1, 10.0), _throughput(2, 20.0), _throughput(3, 30.0)]
    again = [*DUMP, _throughput(2, 22.0), _throughput(3, 33.0), _throughput(4, 44.0)]
    run = feed_lines(deepspeed.FAMILY, first + again)
    rows = run.iteration_frame.select("iteration", "launch", "samples_per_sec", "line").rows()
    assert rows == [(1, 0, 10.0, 3), (2, 1, 22.0, 8), (3, 1, 33.0, 9), (4, 1, 44.0, 10)]


def test_an_engines_first_words_start_a_launch_whose_end_is_the_runs(tmp_path):
    # a requeued job's attempts in one file, the engine printing no dump (its config printer's lines
    # filtered out): the first attempt's failure is the second's past, the run ended as the second did
    started = "[2024-11-11 20:00:00,962] [INFO] [logging.py:96:log_dist] [Rank 0] DeepSpeed info: version=0.13.1, git-hash=unknown, git-branch=unknown"
    failed = [
        "Traceback (most recent call last):",
        '  File "/work/train.py", line 233, in <module>',
        "RuntimeError: CUDA error: an illegal memory access was encountered",
        "[2024-11-11 20:27:44,274] [ERROR] [launch.py:321:sigkill_handler] ['/usr/bin/python', '-u', 'train.py', '--local_rank=0'] exits with return code = 1",
    ]
    steps = [line for step in (1, 2, 3) for line in (_step_record(step), _throughput(step, 10.0 * step))]
    again = [line for step in (2, 3, 4) for line in (_step_record(step), _throughput(step, 11.0 * step))]
    ended = "[2024-11-11 22:28:00,677] [INFO] [launch.py:351:main] Process 90121 exits successfully."
    log = tmp_path / "ds-7300401.out"
    log.write_text("\n".join([started, *steps, *failed, started, *again, ended]) + "\n", encoding="utf-8")
    row, iterations = first_run(log)
    assert (row["family"], row["status"]) == ("deepspeed", "ok")
    assert row["reason"] == f"the launcher reported a clean exit: {ended.split(' ', 2)[2]}"
    assert any("illegal memory access" in consequence for consequence in row["consequences"])
    assert iterations.select("iteration", "samples_per_sec").rows() == [
        (1, 10.0),
        (2, 22.0),
        (3, 33.0),
        (4, 44.0),
    ]


def _step_record(step: int) -> str:
    """The engine's progress record of ``step`` (engine.py ``_report_progress``, before the timer's stop)."""
    return f"[2026-11-21 21:47:07,715] [INFO] [logging.py:96:log_dist] [Rank 0] step={step}, skipped=0, lr=[2e-05], mom=[(0.9, 0.95)]"


def test_a_resumed_engines_throughput_is_of_the_step_its_progress_record_names():
    # ThroughputTimer counts the steps since the engine started (global_step_count, not in a checkpoint);
    # the engine's step= since the training did: resumed at 1500, the timer's 10 is step 1510
    load = "[INFO] [torch_checkpoint_engine.py:21:load] [Torch] Loading checkpoint from ./ckpt/global_step1500/mp_rank_00_model_states.pt..."
    lines = [load, _step_record(1510), _throughput(10, 17.9), _step_record(1520), _throughput(20, 18.1)]
    run = feed_lines(deepspeed.FAMILY, lines)
    rows = run.iteration_frame.select("iteration", "samples_per_sec", "lr").rows()
    assert rows == [(1510, 17.9, 2e-05), (1520, 18.1, 2e-05)]
    assert run.facts["resumed_step"] == 1500
    # from the start, the two counts agree: one row a step
    fresh = [_step_record(10), _throughput(10, 17.9), _step_record(20), _throughput(20, 18.1)]
    rows = feed_lines(deepspeed.FAMILY, fresh).iteration_frame.select("iteration", "samples_per_sec").rows()
    assert rows == [(10, 17.9), (20, 18.1)]
    # a timer with no progress record before it in its launch keeps its own count
    assert feed_lines(deepspeed.FAMILY, [_throughput(10, 17.9)]).iteration_frame["iteration"].to_list() == [
        10
    ]


def test_a_dump_before_any_step_and_step_zero_start_no_launch():
    lines = ["[INFO] [logging.py:96:log_dist] [Rank 0] step=0, skipped=0, lr=[5e-05], mom=[[0.9, 0.999]]"]
    run = feed_lines(deepspeed.FAMILY, [*lines, *DUMP, *DUMP, _throughput(1, 10.0), _throughput(2, 20.0)])
    assert run.iteration_frame["launch"].to_list() == [0, 0]


def _ds_timers(names: tuple[str, ...], ms: float) -> str:
    return "[Rank 0] time (ms) | " + " | ".join(f"{name}: {ms:.2f}" for name in names)


def test_engine_timers_printed_every_step_are_of_the_step_they_count():
    # a real ZeRO-1 run: wall_clock_breakdown prints every micro-step and step, step= every 2nd step
    path = DS / "ds_zero1_fp32_2cpu.log"
    ends = 0
    expected = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if "time (ms) | fwd: " in line:
            ends += 1
            expected.append((number, "fwd", ends))
        elif "time (ms) | fwd_microstep: " in line:
            expected.append((number, "fwd_microstep", ends + 1))
        elif "time (ms) | optimizer_allgather: " in line:
            expected.append((number, "optimizer_allgather", ends + 1))
    run = read_settled([RunFiles(key=str(path), files=(path,))], [megatron.FAMILY, deepspeed.FAMILY])[0].run
    timers = run.timer_frame.filter(pl.col("timer").is_in(["fwd", "fwd_microstep", "optimizer_allgather"]))
    assert timers.select("line", "timer", "iteration").rows() == expected
    assert ends == 6  # the run's steps


def test_megatron_deepspeed_engine_timers_before_the_iteration_line_that_logs_their_step(tmp_path):
    # a run resumed at 101: per step DeepSpeed's step=N (every 3rd), its timers, then Megatron's iteration
    # line and Megatron's own timers of that iteration
    lines = list(MEGATRON_DUMP)
    for step in range(101, 107):
        if step % 3 == 0:
            lines.append(f"[Rank 0] step={step}, skipped=0, lr=[0.0001], mom=[(0.9, 0.95)]")
        lines.append(_ds_timers(deepspeed.ENGINE_IN_STEP_TIMERS[:5], step / 100))
        lines.append(_ds_timers(deepspeed.ENGINE_STEP_TIMERS, step))
        lines.append(
            f" iteration      {step}/     200 | consumed samples:       {step * 8} | elapsed time per "
            "iteration (ms): 1000.0 | learning rate: 1.000E-04 | global batch size:     8 | lm loss: "
            "2.000000E+00 | loss scale: 1.0 | number of skipped iterations:   0 | number of nan iterations:   0 |"
        )
        lines.append(f"time (ms) | forward-compute: {step * 10:.2f} | backward-compute: 1.00")
    run = feed_with_megatron(tmp_path, lines)
    timers = run.timer_frame.filter(pl.col("timer").is_in(["fwd_microstep", "fwd", "forward-compute"]))
    got = timers.select("iteration", "timer", "ms", "family").rows()
    expected = [
        row
        for step in range(101, 107)
        for row in (
            (step, "fwd_microstep", step / 100, "deepspeed"),
            (step, "fwd", step, "deepspeed"),
            (step, "forward-compute", step * 10, "megatron"),
        )
    ]
    assert got == expected


def test_engine_timers_without_any_step_record_have_no_step(tmp_path):
    # DeepSpeed logs step= at INFO, hidden by default: nothing says which step the timers are of
    lines = [_ds_timers(deepspeed.ENGINE_STEP_TIMERS, 1.0), _ds_timers(deepspeed.ENGINE_STEP_TIMERS, 2.0)]
    run = feed_with_megatron(tmp_path, lines)
    assert run.timer_frame["ms"].to_list()[::5] == [1.0, 2.0]
    assert run.timer_frame["iteration"].is_null().all()


def _throughput_07(micro_steps: int, samples_per_sec: float) -> str:
    """DeepSpeed 0.7.7's ThroughputTimer record (utils/timer.py: ``"{}/{}, RunningAvgSamplesPerSec={}, ..."``
    of the epoch and its micro-steps), printed at every step's end after the engine's ``step=N``."""
    return (
        f"[2022-11-20 10:01:00,000] [INFO] [timer.py:197:stop] 0/{micro_steps}, RunningAvgSamplesPerSec=64.0, "
        f"CurrSamplesPerSec={samples_per_sec}, MemAllocated=5.2GB, MaxMemAllocated=9.87GB"
    )


def test_deepspeed_0_7_throughput_records_are_of_the_step_logged_before_them():
    # steps_per_print 10, 4 micro-steps a step: step=N then its throughput record; the steps between only
    # print theirs
    lines = []
    for step in range(1, 31):
        if step % 10 == 0:
            lines.append(
                f"[INFO] [logging.py:68:log_dist] [Rank 0] step={step}, skipped=0, lr=[0.0001], mom=[(0.9, 0.999)]"
            )
        lines.append(_throughput_07(4 * step, 60.0 + step))
    run = feed_lines(deepspeed.FAMILY, lines)
    rows = run.iteration_frame.select(
        "iteration", "samples_per_sec", "mem_allocated_mb", "mem_max_allocated_mb"
    )
    assert rows.rows() == [(step, 60.0 + step, 5.2 * 1024, 9.87 * 1024) for step in (10, 20, 30)]


def test_deepspeed_0_5_running_average_samples_per_sec_is_of_the_step_logged_before_it():
    # DeepSpeed 0.5.10/0.6 (utils/timer.py: ``"{}/{}, SamplesPerSec={}"`` of the epoch and its micro-steps,
    # every steps_per_print micro-steps, a running average since the timer's start_step); gas 1,
    # steps_per_print 10: step=N, then the record
    lines = []
    for step in range(10, 31, 10):
        lines.append(
            f"[INFO] [logging.py:60:log_dist] [Rank 0] step={step}, skipped=0, lr=[0.0001], mom=[(0.9, 0.999)]"
        )
        lines.append(
            f"[2021-10-02 09:00:00,000] [INFO] [timer.py:181:stop] 0/{step}, SamplesPerSec={50.0 + step}"
        )
    run = feed_lines(deepspeed.FAMILY, lines)
    rows = run.iteration_frame.select("iteration", "samples_per_sec")
    assert rows.rows() == [(10, 60.0), (20, 70.0), (30, 80.0)]


@pytest.mark.parametrize("engine_first", [True, False])
def test_megatrons_iteration_line_is_a_steps_report_over_the_engines_lines(tmp_path, engine_first):
    # Megatron-DeepSpeed with a pipeline: the engine prints every steps_per_print (10) steps, Megatron every
    # log_interval (20); Megatron's line (its interval's average loss and time) is the step's report, the
    # engine's (that step's own loss, a time to the ms) fills the steps Megatron did not log
    def engine(step: int) -> list[str]:
        return [
            f"[Rank 0] step={step}, skipped=0, lr=[2.4999e-05], mom=[(0.9, 0.95)]",
            f"steps: {step} loss: 7.6232 iter time (s): 14.211 samples/sec: 4.504",
        ]

    iteration = (
        " iteration       20/      60 | consumed samples:         1280 | elapsed time per iteration (ms): "
        "14210.8 | learning rate: 2.500E-05 | global batch size:    64 | lm loss: 7.610000E+00 | loss scale: "
        "1.0 | grad norm: 1.800 | number of skipped iterations:   0 | number of nan iterations:   0 |"
    )
    step_20 = [*engine(20), iteration] if engine_first else [iteration, *engine(20)]
    lines = [*MEGATRON_DUMP, *engine(10), *step_20]
    run = feed_with_megatron(tmp_path, lines)
    rows = run.iteration_frame.select("iteration", "loss", "elapsed_ms", "lr", "family", "line").rows()
    assert rows == [
        (10, 7.6232, 14211.0, 2.4999e-05, "deepspeed", lines.index(engine(10)[0]) + 1),
        (20, 7.61, 14210.8, 2.5e-05, "megatron", lines.index(iteration) + 1),
    ]


@pytest.mark.parametrize(
    ("line", "resumed"),
    [
        # deepspeed/runtime/checkpoint_engine/torch_checkpoint_engine.py, 0.15 on and before
        ("[Torch] Begin Load checkpoint from /ckpt/run7/global_step2000/mp_rank_00_model_states.pt...", 2000),
        ("[Torch] Loading checkpoint from /ckpt/run7/global_step2000/mp_rank_00_model_states.pt...", 2000),
        (
            "[Torch] Loading checkpoint from /ckpt/run7/best/mp_rank_00_model_states.pt...",
            None,
        ),  # a user's tag
        # the engine's _load_checkpoint before the checkpoint engine (0.6 and older)
        ("rank: 0 loading checkpoint: /ckpt/bert-large/global_step15000/mp_rank_00_model_states.pt", 15000),
    ],
)
def test_a_checkpoint_loaded_under_its_default_tag_is_the_resumed_step(line, resumed):
    prefix = "[2024-07-01 00:00:00,000] [INFO] [torch_checkpoint_engine.py:27:load] "
    run = feed_lines(deepspeed.FAMILY, [prefix + line])
    assert run.facts.get("resumed_step") == resumed
