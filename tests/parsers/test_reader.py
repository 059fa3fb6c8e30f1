"""Reading runs: grouping a job's files, status/reason of every kind, family detection, manifests."""

import gzip
import json
import shutil

import polars as pl
import pytest
from logstat.parsers.reader import group_runs

from logstat.api import load_runs
from logstat.errors import LogstatError
from tests.conftest import FIXTURES
from tests.parsers.feeding import feed_lines


def run_of(*paths, **kw):
    runs = load_runs([str(p) for p in paths], **kw).runs
    assert runs.height == 1
    return runs.row(0, named=True)


def test_out_and_err_of_one_job_are_one_run(tmp_path):
    for name in ("oom-1001.out", "oom-1001.err"):
        shutil.copy(FIXTURES / "slurm" / name, tmp_path / name)
    row = run_of(tmp_path)
    assert row["paths"] == [str(tmp_path / "oom-1001.out"), str(tmp_path / "oom-1001.err")]
    assert row["iterations"] == 2  # from the .out
    assert row["status"] == "failed"  # from the .err
    assert row["reason"].startswith("CUDA out of memory: torch.cuda.OutOfMemoryError")
    assert (row["reason_line"], row["reason_path"]) == (6, str(tmp_path / "oom-1001.err"))
    assert row["job_id"] == "1001"
    its = load_runs([tmp_path]).iterations
    assert its["source_path"].to_list() == [str(tmp_path / "oom-1001.out")] * 2


def test_grouping_keeps_other_files_apart(tmp_path):
    names = ["a-1.out", "a-1.err", "a-2.out", "b.log", "c-3.err.gz"]
    for name in names:
        (tmp_path / name).write_text("")
    groups = group_runs(sorted(tmp_path / n for n in names))
    assert [[p.name for p in g.files] for g in groups] == [
        ["a-1.out", "a-1.err"],
        ["a-2.out"],
        ["b.log"],
        ["c-3.err.gz"],
    ]


@pytest.mark.parametrize(
    ("name", "status", "reason_part", "iterations"),
    [
        ("nccl-1002.out", "failed", "Watchdog caught collective operation timeout", 2),
        ("timelimit-1003.out", "timeout", "DUE TO TIME LIMIT", 3),
        ("cancelled-1004.out", "cancelled", "CANCELLED AT 2021-05-26T09:12:44", 1),
        ("traceback-1005.out", "failed", "FileNotFoundError: [Errno 2]", 0),
        ("killed-1006.out", "failed", "Detected 1 oom-kill event(s)", 1),
        ("nodefail-1007.out", "failed", "Node failure on r7i4n2", 1),
        ("interleaved-1008.out", "incomplete", "log stops after iteration 3 of 1000", 3),
        ("empty-1009.out", "empty", "empty file", 0),
        ("binary-1010.out", "unreadable", "binary", 0),
    ],
)
def test_every_failure_kind_keeps_its_metrics(name, status, reason_part, iterations):
    row = run_of(FIXTURES / "slurm" / name)
    assert row["status"] == status
    assert reason_part in row["reason"]
    assert row["iterations"] == iterations


def test_a_log_of_blank_lines_is_empty_not_a_run_that_stopped(tmp_path):
    # a job that wrote only newlines (or Python's whitespace) printed nothing, as an empty file; a line of
    # text among them is a log of no known family, which stopped before its records
    (tmp_path / "blank-1.out").write_bytes(b"\n  \n\t\r\n\x1c\n" * 3000)
    (tmp_path / "text-2.out").write_bytes(b"\n" * 3000 + b"job started\n")
    rows = {row["path"]: row for row in load_runs([tmp_path]).runs.iter_rows(named=True)}
    blank, text = rows[str(tmp_path / "blank-1.out")], rows[str(tmp_path / "text-2.out")]
    assert (blank["status"], blank["reason"]) == ("empty", "blank file: whitespace only")
    assert text["status"] == "incomplete"


def test_failed_run_keeps_steady_state_metrics():
    row = run_of(FIXTURES / "slurm" / "timelimit-1003.out")
    # median of 129028.8 and 128891.5 ms (steps 2 and 3; step 1 is warm-up)
    assert row["sec_per_iter"] == pytest.approx((129028.8 + 128891.5) / 2 / 1000)


def test_interleaved_ranks_with_launcher_prefixes():
    row = run_of(FIXTURES / "slurm" / "interleaved-1008.out")
    assert (row["nodes"], row["gpus_per_node"], row["gpu_model"]) == (16, 4, "V100-SXM2-32GB")
    assert (row["gpus"], row["tp"], row["pp"], row["dp"]) == (64, 4, 16, 1)
    its = load_runs([FIXTURES / "slurm" / "interleaved-1008.out"]).iterations
    assert its["iteration"].to_list() == [1, 2, 3]
    assert its["elapsed_ms"].to_list() == [155483.8, 129028.8, 128891.5]
    # rank 3's and rank 7's memory lines were glued/prefixed: the larger max allocated wins
    assert its["mem_max_allocated_mb"].to_list()[0] == 20001.5


def test_gzip_file_parses_like_the_plain_one(tmp_path):
    plain = FIXTURES / "megatron" / "meg_gpt2_perf_n16.out"
    packed = tmp_path / "meg_gpt2_perf_n16.out.gz"
    packed.write_bytes(gzip.compress(plain.read_bytes()))
    a, b = run_of(plain), run_of(packed)
    for key in ("gpus", "tp", "pp", "iterations", "sec_per_iter", "status", "hidden_size"):
        assert a[key] == b[key]


def test_truncated_gzip_is_a_row_with_a_reason(tmp_path):
    data = gzip.compress((FIXTURES / "megatron" / "meg_gpt2_perf_n16.out").read_bytes())
    cut = tmp_path / "cut.out.gz"
    cut.write_bytes(data[: len(data) - 200])
    row = run_of(cut)
    assert row["status"] == "incomplete"
    assert "truncated" in row["reason"]


def test_nonexistent_path_is_an_error_naming_it(tmp_path):
    with pytest.raises(LogstatError, match="nope.out: no such file"):
        load_runs([tmp_path / "nope.out"])


def test_family_detection_and_forcing():
    row = run_of(FIXTURES / "megatron" / "megatron_lm_h100-2001.out")
    assert row["family"] == "megatron" and row["families"] == ["megatron", "slurm"]
    assert run_of(FIXTURES / "slurm" / "empty-1009.out")["family"] == "unknown"
    forced = run_of(FIXTURES / "slurm" / "cancelled-1004.out", family="slurm")
    assert forced["family"] == "slurm" and forced["iterations"] == 0 and forced["status"] == "cancelled"
    with pytest.raises(LogstatError, match="unknown log family 'levanter': choose one of .*megatron"):
        load_runs([FIXTURES / "slurm"], family="levanter")


def test_every_family_the_help_names_is_one_to_force_and_every_registered_one_is_named():
    import subprocess
    import sys

    from logstat.parsers.registry import families, named

    command = [sys.executable, "-c", "from logstat.cli import main; main()", "parse", "--help"]
    help_text = " ".join(subprocess.run(command, capture_output=True, text=True, check=True).stdout.split())
    listed = help_text.split("detecting it per file: ")[1].split(".")[0].replace("- ", "-").split(", ")
    assert {named(name)[1] for name in listed} == {family.name for family in families()} | {
        "megatron-deepspeed"
    }
    # the names come from the registry without importing the parsers (polars) into --help
    probe = "import sys, logstat.commands.parse; print('polars' in sys.modules)"
    assert (
        subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True).stdout.strip()
        == "False"
    )


def test_completed_run_is_ok_with_its_evidence():
    row = run_of(FIXTURES / "megatron" / "megatron_lm_h100-2001.out")
    assert row["status"] == "ok" and row["reason"].startswith("[after training is done]")
    assert row["reason_line"] == 30


def test_manifest_facts_override_the_log(tmp_path):
    shutil.copy(FIXTURES / "slurm" / "interleaved-1008.out", tmp_path / "train.log")
    manifest = {
        "world_size": 64,
        "dp": 1,
        "slurm_job_id": "98765",
        "spec": {
            "steps": 3,
            "model": {
                "hidden_size": 8192,
                "num_layers": 64,
                "num_heads": 32,
                "seq_len": 1024,
                "vocab_size": 50257,
            },
            "parallel": {"tp": 4, "pp": 16},
            "batch": {"micro": 4, "gas": 256, "global_batch": 1024},
            "train": {"precision": "fp16", "activation_checkpointing": True, "zero_stage": 0},
            "cluster": {"nodes": 16, "gpus_per_node": 4, "gpu_model": "A100-SXM4-80GB", "use_gpus": True},
        },
    }
    (tmp_path / "manifest.json").write_text(json.dumps(manifest))
    row = run_of(tmp_path / "train.log")
    assert row["gpu_model"] == "A100-SXM4-80GB"  # the manifest wins over the log's nvidia-smi V100
    assert (row["hidden_size"], row["micro_batch_size"], row["job_id"]) == (8192, 4, "98765")
    assert json.loads(row["provenance"])["gpu_model"] == "manifest:0"
    assert row["status"] == "ok"  # steps = 3 reached: iteration 3 of the manifest's 3 planned
    (tmp_path / "manifest.json").write_text("{not json")
    assert run_of(tmp_path / "train.log")["gpu_model"] == "V100-SXM2-32GB"


def test_a_family_that_raises_loses_only_its_line():
    import dataclasses

    from logstat.parsers import megatron, reader

    real = megatron.FAMILY.parse_line

    def broken(text, lineno, run):
        if "using world size" in text:
            raise ZeroDivisionError("bug")
        real(text, lineno, run)

    patched = dataclasses.replace(megatron.FAMILY, parse_line=broken)
    files = reader.group_runs([FIXTURES / "megatron" / "meg_gpt2_perf_n16.out"])[0]
    result = reader.read_runs([files], [patched])[0]
    # the line is lost, and only it: the steps (read column-wise) and every later line are read
    assert sorted(result.run.iterations) == [1, 2, 3]
    assert "ZeroDivisionError" in result.run.state["parse_errors"][0]


def test_facts_that_follow_by_formula_are_derived_and_say_so():
    from logstat.parsers.base import RunBuilder
    from logstat.parsers.reader import derive_facts

    run = RunBuilder(path="x")
    for name, value in {
        "nodes": 16,
        "gpus_per_node": 4,
        "tp": 4,
        "pp": 16,
        "micro_batch_size": 4,
        "gas": 256,
    }.items():
        run.set_fact(name, value, "slurm", 1)
    derive_facts(run)
    # 16 * 4 = 64 GPUs; 64 / (4 * 16) = DP 1; 4 * 256 * 1 = 1024 (the seed's 52B benchmark)
    assert (run.facts["gpus"], run.facts["dp"], run.facts["global_batch_size"]) == (64, 1, 1024)
    assert run.provenance["global_batch_size"] == "derived:0"
    partial = RunBuilder(path="y")
    partial.set_fact("tp", 4, "megatron", 1)
    derive_facts(partial)
    assert partial.facts == {"tp": 4}  # nothing follows: nothing is guessed
    # NeMo prints its parallel sizes, not its world: TP 8 x PP 4 x CP 2 x DP 4 is 256 GPUs
    sizes = RunBuilder(path="z")
    for name, value in {"tp": 8, "pp": 4, "cp": 2, "dp": 4}.items():
        sizes.set_fact(name, value, "nemo", 1)
    derive_facts(sizes)
    assert (sizes.facts["gpus"], sizes.provenance["gpus"]) == (256, "derived:0")
    # NeMo 2 logs its global batch and micro-batch count, not the micro batch: 128 / (16 x DP 8) = 1
    counted = RunBuilder(path="m")
    for name, value in {"global_batch_size": 128, "gas": 16, "dp": 8}.items():
        counted.set_fact(name, value, "nemo", 1)
    derive_facts(counted)
    assert (counted.facts["micro_batch_size"], counted.provenance["micro_batch_size"]) == (1, "derived:0")
    uneven = RunBuilder(path="u")
    for name, value in {"global_batch_size": 100, "gas": 16, "dp": 8}.items():
        uneven.set_fact(name, value, "nemo", 1)
    derive_facts(uneven)
    assert "micro_batch_size" not in uneven.facts


def test_context_parallelism_takes_its_share_of_the_world_before_dp_is_derived(tmp_path):
    from logstat.parsers import megatron, reader

    # Megatron-LM's arguments dump of a 16,384-GPU Llama 405B run, without the "using world size" line
    dump = ["------------------------ arguments ------------------------"]
    args = dict(context_parallel_size=16, global_batch_size=2048, micro_batch_size=1, world_size=16384)
    args |= dict(pipeline_model_parallel_size=16, tensor_model_parallel_size=8)
    dump += [f"  {name} {'.' * (48 - len(name))} {value}" for name, value in sorted(args.items())]
    log = tmp_path / "llama405b.out"
    log.write_text("\n".join([*dump, "-------------------- end of arguments ---------------------", ""]))
    run = reader.read_runs(reader.group_runs([log]), [megatron.FAMILY])[0].run
    # 16384 / (8 * 16 * 16) = DP 8; 2048 / (1 * 8) = 256 micro-batches a step
    assert (run.facts["cp"], run.facts["dp"], run.facts["gas"]) == (16, 8, 256)
    assert run.provenance["dp"] == run.provenance["gas"] == "derived:0"
    # today's world-size line states it among the others (the llama fixture's line 10)
    world = (
        "using world size: 8, data-parallel size: 4, context-parallel size: 1, tensor-model-parallel size: 2"
    )
    megatron_run = feed_lines(megatron.FAMILY, [world])
    assert (megatron_run.facts["cp"], megatron_run.facts["dp"]) == (1, 4)


def _megatron_v1_dump(**args) -> list[str]:
    """Megatron-LM v1.1's arguments dump (2020: ``--batch-size`` per GPU, ``--model-parallel-size``; no
    micro-batches, no pipeline), as its ``_print_args`` prints it, sorted."""
    dump = ["------------------------ arguments ------------------------"]
    dump += [f"  {name} {'.' * (32 - len(name))} {value}" for name, value in sorted(args.items())]
    return [*dump, "-------------------- end of arguments ---------------------"]


def test_megatron_v1_steps_are_one_batch_per_gpu_on_a_world_without_pipeline(tmp_path):
    from logstat.parsers import deepspeed, megatron, reader

    args = dict(batch_size=8, model_parallel_size=2, world_size=8, num_layers=24, hidden_size=1024)
    steps = [
        f" iteration {step:8d}/  500000 | elapsed time per iteration (ms): 400.0 | learning rate: 1.500E-04 |"
        " lm loss: 8.452530E+00 | loss scale: 131072.0 | number of skipped iterations:   0 |"
        " number of nan iterations:   0 |"
        for step in (100, 200)
    ]
    log = tmp_path / "megatron_v1.out"
    log.write_text("\n".join([*_megatron_v1_dump(**args), *steps, ""]))
    run = reader.read_runs(reader.group_runs([log]), [megatron.FAMILY])[0].run
    # v1.x had neither pipeline parallelism (v2.0) nor micro-batches: PP 1, DP 8 / 2 = 4, and a step is
    # one batch of 8 per GPU: 8 * 1 * 4 = 32
    facts = {name: run.facts.get(name) for name in ("pp", "dp", "gas", "global_batch_size")}
    assert facts == {"pp": 1, "dp": 4, "gas": 1, "global_batch_size": 32}
    assert run.provenance["pp"] == run.provenance["gas"] == "derived:0"
    assert load_runs([log], warmup=1).runs.row(0, named=True)["samples_per_sec"] == pytest.approx(32 / 0.4)
    # v1.1's arguments.py prints its world at rank 0 before the dump; its PP 1 is no pipeline either
    log.write_text(
        "\n".join(["using world size: 8 and model-parallel size: 2 ", *_megatron_v1_dump(**args), *steps])
    )
    run = reader.read_runs(reader.group_runs([log]), [megatron.FAMILY])[0].run
    assert {name: run.facts.get(name) for name in facts} == {
        "pp": 1,
        "dp": 4,
        "gas": 1,
        "global_batch_size": 32,
    }
    # under DeepSpeed (DeepSpeedExamples' Megatron-LM v1), its config dump states the accumulation
    ds_dump = [
        "[INFO] [config.py:748:print] DeepSpeedEngine configuration:",
        "[INFO] [config.py:752:print]   gradient_accumulation_steps .. 4",
        "[INFO] [config.py:752:print]   train_batch_size ............. 128",
    ]
    log.write_text("\n".join([*_megatron_v1_dump(**args), *ds_dump, *steps, ""]))
    run = reader.read_runs(reader.group_runs([log]), [megatron.FAMILY, deepspeed.FAMILY])[0].run
    assert (run.facts["gas"], run.facts["global_batch_size"]) == (4, 128)
    # a dump of today's Megatron-LM states the global batch: nothing is assumed
    log.write_text("\n".join([*_megatron_v1_dump(global_batch_size=64, micro_batch_size=8), *steps, ""]))
    run = reader.read_runs(reader.group_runs([log]), [megatron.FAMILY])[0].run
    assert "gas" not in run.facts and "pp" not in run.facts


def test_megatron_paper_tflops_and_the_logged_model_flops_of_a_recomputing_run():
    # fixtures/megatron/megatron_lm_h100-2001.out: bf16 H100, full recomputation, padded vocab 50304.
    # Its own "throughput per GPU (TFLOP/s/GPU)" of steps 2-5: 303.1, 303.3, 302.8, 303.2 (median 303.15),
    # Megatron-LM's model FLOPs (num_floating_point_operations: 3 passes, the recomputed forward not counted).
    result = load_runs([FIXTURES / "megatron" / "megatron_lm_h100-2001.out"], warmup=1)
    row = result.runs.row(0, named=True)
    logged = result.iterations.filter(pl.col("iteration") > 1)["logged_tflops_per_gpu"].median()
    assert logged == pytest.approx(303.15)
    assert row["mfu"] * 989.0 == pytest.approx(logged, rel=0.001)
    # by hand: 96*B*s*l*h^2*(1 + s/6h + V/16lh) / (median s/iter * GPUs * 1e12)
    b, s, layers, h, v = 256, 2048, 32, 4096, 50304
    flops = 96 * b * s * layers * h * h * (1 + s / (6 * h) + v / (16 * layers * h))
    assert row["tflops_per_gpu_megatron"] == pytest.approx(flops / ((4661.0 + 4660.0) / 2 / 1000 * 16 * 1e12))
    # H100 SXM bf16 dense peak 989: MFU counts model FLOPs (no recomputed forward), HFU the executed ones
    model = 72 * b * s * layers * h * h * (1 + s / (6 * h)) + 6 * b * s * h * v
    assert row["mfu"] == pytest.approx(model / ((4661.0 + 4660.0) / 2 / 1000 * 16 * 1e12) / 989.0)
    assert row["hfu"] == pytest.approx(row["tflops_per_gpu_megatron"] / 989.0)


@pytest.mark.parametrize(
    ("log", "expected"),
    [
        # the 3D run's ranks print "(after 1 iterations) memory (MB)" on lines 665-670, before the
        # "iteration 1/ 1000" record on line 671
        (FIXTURES / "megatron" / "meg_ds_3d_gpt2_perf_n16-ds-on.out", {1: 671, 2: 674}),
        # step 3 is known only from the flops profiler: "Profile Summary at step 3:" (line 188), not
        # its "iter latency:" value (line 211); steps 2 and 4 from their "step=N," records
        (FIXTURES / "deepspeed" / "ds_zero1_fp32_2cpu.log", {2: 178, 3: 188, 4: 226}),
        (
            FIXTURES / "runs" / "gpt2-tiny-ddp-powersgd" / "20261125T012907Z-6cbe0f" / "train.log",
            {1: 40, 5: 44},
        ),
    ],
)
def test_iteration_rows_point_at_the_iteration_record(log, expected):
    iterations = load_runs([log]).iterations
    lines = dict(zip(iterations["iteration"], iterations["line"], strict=True))
    assert {step: lines[step] for step in expected} == expected
    text = log.read_text(encoding="utf-8").split("\n")
    for step, line in expected.items():
        assert (
            f"{step}/" in text[line - 1]
            or f"step={step}," in text[line - 1]
            or f"at step {step}:" in text[line - 1]
        )


def test_a_log_without_steps_it_reads_does_not_claim_none_were_logged(tmp_path):
    # a plain DDP script's own step lines in a shape no family reads (custom loops' name a step)
    lines = [
        "[rank 0] world_size=4 backend=nccl batch_size=128 lr=0.1",
        "[rank 0] epoch 1/5 batch 100/391 loss 1.7819 lr 0.100000 0.086s/batch",
        "------------------------ arguments ------------------------",
        "  micro_batch_size ............................... 4",
        "-------------------- end of arguments ---------------------",
    ]
    (tmp_path / "ddp.log").write_text("\n".join(lines) + "\n")
    row = run_of(tmp_path / "ddp.log")
    assert (row["status"], row["reason"]) == (
        "incomplete",
        "no training step that logstat reads (none logged, or in a format no family knows), and no failure or "
        "end message",
    )
