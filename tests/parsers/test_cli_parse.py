"""`logstat parse` end to end, through the real console entry point."""

import csv
import io
import json
import os
import re
import shutil
import stat
import statistics
import subprocess
import sys

import polars as pl
import pytest

from logstat.cli import main
from tests.conftest import FIXTURES

JSON_KEYS = {
    "path", "family", "status", "reason", "gpus", "tp", "pp", "dp", "micro_batch_size", "global_batch_size",
    "seq_len", "hidden_size", "num_layers", "activation_checkpointing", "model_size_b", "iterations",
    "sec_per_iter", "samples_per_sec", "tokens_per_sec",
}  # fmt: skip


def logstat(capsys, *args):
    with pytest.raises(SystemExit) as done:
        main([*map(str, args)])
        raise SystemExit(0)
    out = capsys.readouterr()
    return done.value.code or 0, out.out, out.err


def test_table_of_the_fixtures(capsys):
    code, out, err = logstat(capsys, "parse", FIXTURES / "megatron", "--tflops")
    assert code == 0 and err == ""
    lines = out.splitlines()
    assert lines[0].split()[:4] == ["run", "family", "status", "GPUs"]
    meg = next(line for line in lines if line.startswith("meg_gpt2_perf_n16.out"))
    assert "128.96" in meg and "52.8" in meg and "51.97" in meg
    assert "s/iter: median of the logged steps after the first 1 (--warmup)" in out


def test_json_has_the_contract_keys(capsys):
    code, out, _ = logstat(
        capsys, "parse", FIXTURES / "megatron" / "meg_gpt2_perf_n16.out", "--format", "json"
    )
    rows = json.loads(out)
    assert code == 0 and len(rows) == 1
    assert JSON_KEYS <= rows[0].keys()
    assert "tflops_per_gpu" not in rows[0]
    # an object, not a JSON string inside the JSON (the arguments dump names the world size)
    assert rows[0]["provenance"]["gpus"].startswith("megatron:")
    _, out, _ = logstat(
        capsys, "parse", FIXTURES / "megatron" / "meg_gpt2_perf_n16.out", "--format", "json", "--tflops"
    )
    row = json.loads(out)[0]
    assert row["tflops_per_gpu"] == pytest.approx(52.8175, abs=1e-3) and row["mfu"] is None


def test_iterations_carry_provenance(capsys):
    code, out, _ = logstat(
        capsys, "parse", FIXTURES / "slurm" / "timelimit-1003.out", "--iterations", "--format", "csv"
    )
    rows = list(csv.DictReader(io.StringIO(out)))
    assert code == 0
    assert [(r["iteration"], r["family"], r["line"]) for r in rows] == [
        ("1", "megatron", "1"),
        ("2", "megatron", "2"),
        ("3", "megatron", "3"),
    ]


def test_timers_a_row_each_with_the_step_before_them(capsys):
    log = FIXTURES / "megatron" / "meg_gpt2_perf_n16.out"
    code, out, _ = logstat(capsys, "parse", log, "--timers", "--format", "csv")
    rows = list(csv.DictReader(io.StringIO(out)))
    # lines 194 and 236: set-up timers before any step (3); lines 239, 241, 243: 11 timers of steps 1-3
    assert code == 0 and len(rows) == 3 + 3 * 11
    assert (rows[0]["iteration"], rows[0]["timer"], rows[0]["ms"], rows[0]["line"]) == (
        "",
        "load-checkpoint",
        "0.47",
        "194",
    )
    assert (rows[3]["iteration"], rows[3]["timer"], rows[3]["ms"], rows[3]["line"]) == (
        "1",
        "forward-compute",
        "32054.16",
        "239",
    )
    code, _, err = logstat(capsys, "parse", log, "--timers", "--iterations")
    assert code != 0 and "--iterations and --timers" in err


def test_markdown_and_warmup(capsys):
    code, out, _ = logstat(
        capsys, "parse", FIXTURES / "slurm" / "timelimit-1003.out", "--format", "markdown", "--warmup", "0"
    )
    assert code == 0 and out.startswith("| run | family | status |")
    # median of all three steps: 155483.8, 129028.8, 128891.5 ms -> 129.03 s
    assert "| 129.03 |" in out
    # the evidence line is a list item and a code span: its '***' would otherwise render as emphasis
    assert (
        "\n\n- timelimit-1003.out: timeout (timelimit-1003.out:4): ` time limit: slurmstepd: error: "
        "*** JOB 1003 ON r7i4n1 CANCELLED AT 2021-05-26T10:00:03 DUE TO TIME LIMIT *** `\n\ns/iter: "
    ) in out


def test_markdown_code_span_outlasts_backticks_in_the_quoted_line():
    from logstat.formats import _code_span

    assert _code_span("plain") == "` plain `"
    assert _code_span("run `make` or ``x``") == "``` run `make` or ``x`` ```"


def test_empty_binary_and_truncated_files_are_rows_with_exit_0(capsys, tmp_path):
    import gzip

    data = gzip.compress((FIXTURES / "megatron" / "meg_gpt2_perf_n16.out").read_bytes())
    (tmp_path / "cut.out.gz").write_bytes(data[:-300])
    code, out, _ = logstat(
        capsys, "parse", FIXTURES / "slurm" / "empty-1009.out", FIXTURES / "slurm" / "binary-1010.out",
        tmp_path / "cut.out.gz", "--format", "json",
    )  # fmt: skip
    assert code == 0
    status = {r["path"].rsplit("/", 1)[1]: r["status"] for r in json.loads(out)}
    assert status == {"empty-1009.out": "empty", "binary-1010.out": "unreadable", "cut.out.gz": "incomplete"}


def test_missing_path_is_one_line_and_exit_1(capsys, tmp_path):
    code, out, err = logstat(capsys, "parse", tmp_path / "nope.out")
    assert code == 1 and out == ""
    assert err == f"Error: {tmp_path / 'nope.out'}: no such file or directory\n"


def test_unknown_family_lists_the_valid_ones(capsys):
    code, _, err = logstat(capsys, "parse", FIXTURES / "slurm", "--family", "levanter")
    assert code == 1 and "choose one of" in err and "megatron" in err


def test_the_family_column_names_are_the_ones_family_forces(capsys):
    # a Megatron-DeepSpeed run reads as megatron-deepspeed, and that name forces both families
    log = FIXTURES / "bigscience" / "meg_ds_3d_gpt2_perf_n16-ds-on.out"
    detected = json.loads(logstat(capsys, "parse", log, "--format", "json")[1])
    forced = json.loads(
        logstat(capsys, "parse", log, "--format", "json", "--family", "megatron-deepspeed")[1]
    )
    assert detected[0]["family"] == "megatron-deepspeed" and forced == detected
    assert json.loads(logstat(capsys, "parse", log, "--format", "json", "--family", "megatron")[1])[0][
        "family"
    ] == ("megatron")


def test_output_file_is_never_overwritten(capsys, tmp_path):
    target = tmp_path / "runs.json"
    code, out, _ = logstat(capsys, "parse", FIXTURES / "slurm", "--format", "json", "-o", target)
    assert (
        code == 0 and out == "" and len(json.loads(target.read_text())) == 10
    )  # 11 files, oom .out+.err one run
    target.write_text("mine")
    code, _, err = logstat(capsys, "parse", FIXTURES / "slurm", "--format", "json", "-o", target)
    assert code == 1 and "file exists" in err and target.read_text() == "mine"


def test_output_file_gets_the_umask_mode_not_a_private_one(capsys, tmp_path):
    target = tmp_path / "runs.csv"
    old_umask = os.umask(0o022)
    try:
        code, _, _ = logstat(capsys, "parse", FIXTURES / "megatron", "--format", "csv", "-o", target)
    finally:
        os.umask(old_umask)
    assert code == 0 and stat.S_IMODE(target.stat().st_mode) == 0o644
    assert [p.name for p in tmp_path.iterdir()] == ["runs.csv"]


def test_parquet_needs_a_file_and_round_trips(capsys, tmp_path):
    target = tmp_path / "runs.parquet"
    code, _, _ = logstat(
        capsys, "parse", FIXTURES / "megatron", "--format", "parquet", "--tflops", "-o", target
    )
    frame = pl.read_parquet(target)
    assert code == 0 and frame.height == 4 and "tflops_per_gpu" in frame.columns


def test_parse_imports_neither_torch_deepspeed_nor_altair():
    code = (
        "import sys\nfrom logstat.cli import main\n"
        f"try:\n    main(['parse', {str(FIXTURES / 'megatron')!r}, '--tflops'])\nexcept SystemExit:\n    pass\n"
        "import logstat.parsers\n"
        "heavy = sorted(m for m in ('torch', 'deepspeed', 'altair', 'transformers') if m in sys.modules)\n"
        "print('HEAVY', heavy, file=sys.stderr)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert "HEAVY []" in done.stderr, done.stderr[-500:]


def test_lines_that_could_not_be_read_are_warned_about_on_stderr(capsys, tmp_path):
    log = tmp_path / "hostile-1.out"
    log.write_text(
        " iteration 99999999999999999999999/ 10 | elapsed time per iteration (ms): 1.0 |\n"
        " iteration        1/      10 | elapsed time per iteration (ms): 2.0 |\n"
    )
    code, out, err = logstat(capsys, "parse", log, "--format", "json")
    row = json.loads(out)[0]
    assert code == 0 and row["iterations"] == 1
    assert row["warnings"] == [
        "megatron:1: iteration=99999999999999999999999 does not fit a 64-bit integer; not recorded"
    ]
    assert err == f"warning: {log}: 1 warning(s), first: {row['warnings'][0]}\n"


def test_a_tiny_model_size_is_not_printed_as_zero(capsys):
    # h 64, l 2, vocab 128, seq 128: 2*(12*64**2 + 13*64) + 128*64 + 128*64 + 2*64 = 116,480 parameters
    log = FIXTURES / "hf_trainer" / "hf_gpt2_tiny_ds_zero2_2cpu.log"
    code, out, _ = logstat(capsys, "parse", log, "--tflops")
    header, _, row = out.splitlines()[:3]
    # "size B" is the only two-word heading, and the columns before it are one word each
    assert code == 0 and row.split()[header.split().index("size")] == "0.00012"


def test_same_named_logs_of_two_run_directories_get_names_that_tell_them_apart(capsys, tmp_path):
    for run_id in ("20260101T000000Z-aaaaaa", "20260102T000000Z-bbbbbb"):
        (tmp_path / run_id).mkdir()
        (tmp_path / run_id / "train.log").write_bytes(
            (FIXTURES / "megatron" / "meg_gpt2_perf_n16.out").read_bytes()
        )
    code, out, _ = logstat(capsys, "parse", tmp_path, FIXTURES / "megatron" / "megatron_lm_h100-2001.out")
    names = [line.split()[0] for line in out.splitlines()[2:5]]
    assert code == 0
    assert sorted(names) == [
        "20260101T000000Z-aaaaaa/train.log",
        "20260102T000000Z-bbbbbb/train.log",
        "megatron_lm_h100-2001.out",
    ]
    code, out, _ = logstat(capsys, "table", tmp_path)
    assert code == 0 and "| 20260101T000000Z-aaaaaa/train.log (incomplete) |" in out


def test_run_names_add_only_the_directories_needed():
    from logstat.parsers.schema import run_names

    paths = pl.Series(
        ["/a/r/1/train.log", "/b/r/1/train.log", "/x/meg.out", None, "/x/meg.out", "/b/r/2/train.log"]
    )
    assert run_names(paths).to_list() == [
        "a/r/1/train.log", "b/r/1/train.log", "meg.out", None, "meg.out", "2/train.log",
    ]  # fmt: skip


def test_a_process_output_file_is_named_by_its_directory_and_torchruns_by_its_run():
    from logstat.parsers.schema import run_names

    paths = pl.Series(
        [
            "/jobs/123456/stdout.log",
            "/t/logs/none_3zq1k0pd/attempt_0/0/stdout.log",
            "/x/meg.out",
            "/y/stdout.txt.gz",
        ]
    )
    assert run_names(paths).to_list() == [
        "123456/stdout.log", "none_3zq1k0pd/attempt_0/0/stdout.log", "meg.out", "y/stdout.txt.gz",
    ]  # fmt: skip


def test_a_file_name_that_is_no_utf8_is_a_row_named_by_its_bytes(tmp_path, capsys):
    # a Latin-1 name on a UTF-8 system: Python holds its bytes as surrogates, which polars refuses
    shutil.copy(FIXTURES / "megatron" / "meg_gpt2_perf_n16.out", tmp_path)
    odd = os.fsdecode(b"bad\xff\xfe-2001.out")
    shutil.copy(FIXTURES / "megatron" / "megatron_lm_h100-2001.out", tmp_path / odd)
    code, out, _ = logstat(capsys, "parse", tmp_path, "--format", "json")
    rows = {row["path"]: row for row in json.loads(out)}
    named = str(tmp_path / "bad\\xff\\xfe-2001.out")
    assert code == 0 and sorted(rows) == [named, str(tmp_path / "meg_gpt2_perf_n16.out")]
    assert (rows[named]["status"], rows[named]["iterations"], rows[named]["paths"]) == ("ok", 5, [named])
    code, out, _ = logstat(capsys, "parse", tmp_path)
    assert code == 0 and "\n" + "bad\\xff\\xfe-2001.out " in out


def test_a_warmup_that_swallows_every_step_is_said_on_stderr(capsys):
    # meg_gpt2_perf_n16.out logs 3 steps, megatron_lm_h100-2001.out 5: --warmup 4 leaves 0 and 1
    code, out, err = logstat(capsys, "parse", FIXTURES / "megatron", "--warmup", "4")
    assert code == 0 and "leaves none" not in out
    assert [line.split(": ")[1].rsplit("/", 1)[1] for line in err.splitlines()] == [
        "meg_ds_zero_gpt2_perf_n16_nbs48_ms48.out",
        "meg_gpt2_perf_n16.out",
    ]
    assert "--warmup 4 leaves none of its 3 logged step(s)" in err
    code, _, err = logstat(capsys, "table", FIXTURES / "megatron", "--warmup", "4")
    assert code == 0 and err.count("leaves none of its 3 logged step(s)") == 2
    code, _, err = logstat(capsys, "parse", FIXTURES / "slurm" / "cancelled-1004.out")
    assert (
        code == 0 and err == ""
    )  # the default warm-up of 1 and a run that died after step 1: the seed's 'fail'


def test_tflops_table_shows_the_zero_memory_estimate_beside_the_logged_peak(capsys):
    log = FIXTURES / "megatron" / "meg_ds_3d_gpt2_perf_n16-ds-on.out"
    code, out, _ = logstat(capsys, "parse", log, "--tflops")
    header, _, row = out.splitlines()[:3]
    cells = dict(zip(re.split(r"  +", header.strip()), re.split(r"  +", row.strip()), strict=True))
    # ZeRO stage 0 of the 52B shape over TP 4 x PP 16: 16 bytes x 51,966,533,632 / 64 = 12.99e9 bytes;
    # the largest "max allocated" of the memory lines: 19961.07 MiB = 20.93e9 bytes
    logged_mib = max(float(v) for v in re.findall(r"\| max allocated: ([\d.]+) \|", log.read_text()))
    assert code == 0 and logged_mib == pytest.approx(19961.072265625)
    assert cells["mem pred GB"] == f"{16 * 51966533632 / 64 / 1e9:.1f}" == "13.0"
    assert cells["mem logged GB"] == f"{logged_mib * 2**20 / 1e9:.1f}" == "20.9"
    assert cells["pred/logged"] == f"{16 * 51966533632 / 64 / (logged_mib * 2**20):.2f}" == "0.62"
    assert "mem pred GB: ZeRO model-state estimate per GPU" in out


def test_a_logged_tflops_far_from_ours_is_a_warning_on_stderr(capsys, tmp_path):
    # the H100 fixture with its own TFLOP/s halved: a figure no counting rule of logstat's gives
    text = (FIXTURES / "megatron" / "megatron_lm_h100-2001.out").read_text()
    lowered = re.sub(r"\(TFLOP/s/GPU\): ([\d.]+)", lambda m: f"(TFLOP/s/GPU): {float(m[1]) * 0.5:.1f}", text)
    log = tmp_path / "megatron_lm_halved-2002.out"
    log.write_text(lowered)
    code, out, err = logstat(capsys, "parse", log, "--format", "json", "--tflops")
    row = json.loads(out)[0]
    assert code == 0 and len(row["warnings"]) == 1
    assert row["logged_tflops_per_gpu"] == pytest.approx(statistics.median([151.6, 151.7, 151.4, 151.6]))
    assert err == f"warning: {log}: 1 warning(s), first: {row['warnings'][0]}\n"
    assert "no counting rule of logstat's matches" in err


def test_run_labels_use_spec_name_and_run_id_and_keep_log_names_where_they_would_collide():
    from logstat.parsers.schema import run_labels

    runs = pl.DataFrame(
        {
            "path": ["/r/a/1/train.log", "/r/b/2/slurm-7.out", "/r/b/2/train.log", "/x/meg.out"],
            "spec_name": ["tiny", "big", "big", None],
            "run_id": ["1", "2", "2", None],
        }
    )
    assert run_labels(runs).to_list() == ["tiny/1", "slurm-7.out", "2/train.log", "meg.out"]


@pytest.mark.parametrize("steps", ["--iterations", "--timers"])
@pytest.mark.parametrize(("option", "value"), [("--tflops", None), ("--warmup", "2"), ("--warmup", "1")])
def test_an_option_of_the_run_table_with_a_table_of_steps_is_refused(capsys, steps, option, value):
    # they changed nothing of the steps (the output was the same), and --warmup warned of s/iter it did not show
    code, out, err = logstat(
        capsys, "parse", FIXTURES / "megatron", steps, option, *([value] if value else [])
    )
    assert (code, out) == (1, "")
    assert err == f"Error: {option} is of the run table; {steps} lists every logged step: give one\n"
