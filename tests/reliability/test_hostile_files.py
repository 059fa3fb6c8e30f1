"""``logstat.api.load_runs`` over damaged files: never raises, one row per run with a status and a
reason, and the known-good lines of a damaged file are still read.

The reference is the real Megatron log fixtures/megatron/meg_gpt2_perf_n16.out: 64 GPUs and three
iterations whose elapsed times (read by eye, lines 238, 240, 242) are below.
"""

from __future__ import annotations

import bz2
import gzip
import io
import json
import lzma
import os
import re
import tempfile
from pathlib import Path

import polars as pl
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from logstat.parsers.source import UNREADABLE_MAGIC

from logstat.api import load_runs
from logstat.cli import main

#: examples per property; LOGSTAT_RELIABILITY_SCALE=10 searches ten times longer (make test uses 1).
EXAMPLES = 60 * int(os.environ.get("LOGSTAT_RELIABILITY_SCALE", "1"))
PROPERTY = settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
MEGATRON_LOG = Path(__file__).resolve().parents[2] / "fixtures" / "megatron" / "meg_gpt2_perf_n16.out"
ELAPSED_MS = {1: 155483.8, 2: 129028.8, 3: 128891.5}
GPUS = 64  # "using world size: 64" of the same log
STATUSES = {"ok", "failed", "timeout", "cancelled", "incomplete", "empty", "unreadable"}
ANSI_GREEN, ANSI_RESET = b"\x1b[32m", b"\x1b[0m"
TQDM = b"  3%|\xe2\x96\x8e         | 3/100 [00:01<00:30,  3.21it/s]\r  4%|\xe2\x96\x8d         | 4/100 [00:01<00:29,  3.30it/s]\r"


def real_log() -> bytes:
    return MEGATRON_LOG.read_bytes()


def parse_bytes(data: bytes, name: str = "job-42.out"):
    """load_runs over one file holding ``data`` (a fresh directory per call: hypothesis re-runs)."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / name
        path.write_bytes(data)
        result = load_runs([path])
    assert result.runs.height == 1
    row = result.runs.row(0, named=True)
    assert row["status"] in STATUSES
    assert isinstance(row["reason"], str) and row["reason"].strip()
    return row, result


def elapsed_by_step(result) -> dict[int, float]:
    return dict(result.iterations.select("iteration", "elapsed_ms").iter_rows())


@PROPERTY
@given(data=st.binary(max_size=4000))
def test_arbitrary_bytes_give_one_row_with_status_and_reason(data, generated):
    generated["arbitrary bytes as a file"] += 1
    parse_bytes(data)


@PROPERTY
@given(data=st.binary(max_size=4000))
def test_arbitrary_bytes_gzipped_give_one_row(data, generated):
    generated["arbitrary bytes as a .gz file"] += 1
    parse_bytes(gzip.compress(data), name="job-42.out.gz")


@PROPERTY
@given(data=st.data())
def test_garbage_between_real_lines_keeps_every_iteration(data, generated):
    """Arbitrary bytes (NUL, invalid UTF-8, carriage returns, ...) injected as lines between the real
    lines of the log: the three iterations and their elapsed times are still read."""
    lines = real_log().split(b"\n")
    garbage = st.binary(min_size=1, max_size=80).filter(lambda b: b"\n" not in b)
    injections = data.draw(
        st.lists(st.tuples(st.integers(0, len(lines)), garbage), min_size=1, max_size=8), label="injections"
    )
    for at, blob in sorted(injections, reverse=True):
        lines.insert(at, blob)
    # compression is recognised by magic bytes (parsers/source.py): a file starting with them is a
    # (broken, or unreadable: zstd, lz4, zip) compressed file by design, not a text log with garbage.
    magic = (b"\x1f\x8b", b"\xfd7zXZ\x00", *UNREADABLE_MAGIC)
    assume(not lines[0].startswith(magic) and not re.match(rb"BZh[1-9]", lines[0]))
    generated["real log with garbage lines injected"] += 1
    row, result = parse_bytes(b"\n".join(lines))
    assert elapsed_by_step(result) == ELAPSED_MS
    assert row["gpus"] == GPUS


def _crlf(log: bytes) -> bytes:
    return log.replace(b"\n", b"\r\n")


def _ansi(log: bytes) -> bytes:
    return b"\n".join(ANSI_GREEN + line + ANSI_RESET for line in log.split(b"\n"))


def _tqdm(log: bytes) -> bytes:
    return b"\n".join(TQDM + line for line in log.split(b"\n"))


def _invalid_utf8(log: bytes) -> bytes:
    """A line of bytes that are not UTF-8 (a Latin-1 path, a cut multi-byte character, a surrogate)
    after every line."""
    bad = "Données écrites dans /gpfs/é".encode("latin-1") + b" \xe2\x82 \xed\xa0\x80 \xff\xfe"
    return b"\n".join(line + b"\n" + bad for line in log.split(b"\n"))


def _nul_padding(log: bytes) -> bytes:
    """A node crash on a shared file system leaves a block of NUL bytes where the last writes were."""
    return log + b"\x00" * 4096 + b"\n"


def _nul_inside(log: bytes) -> bytes:
    head, sep, tail = log.partition(b"> building train")
    return head + b"\x00" * 512 + b"\n" + sep + tail


def _srun_labels(log: bytes) -> bytes:
    return b"\n".join(b"%d: " % (n % 64) + line for n, line in enumerate(log.split(b"\n")))


def _glued_ranks(log: bytes) -> bytes:
    """Every other line glued behind the one before by torchrun tags, as ranks writing one file do."""
    lines = log.split(b"\n")
    tagged = [b"[default%d]:" % (n % 4) + line + (b"\n" if n % 2 else b"") for n, line in enumerate(lines)]
    return b"".join(tagged)


def _dump_end_lost(log: bytes) -> bytes:
    """The arguments dump without its end line (cut by a relaunch, or glued into another rank's line)."""
    return b"\n".join(line for line in log.split(b"\n") if b"end of arguments" not in line)


DAMAGES = {
    "crlf": _crlf,
    "ansi-colours": _ansi,
    "tqdm-carriage-returns": _tqdm,
    "invalid-utf8": _invalid_utf8,
    "nul-padding-at-end": _nul_padding,
    "nul-block-inside": _nul_inside,
    "srun-labels": _srun_labels,
    "glued-ranks": _glued_ranks,
    "arguments-dump-end-lost": _dump_end_lost,
}


@pytest.mark.parametrize("damage", list(DAMAGES))
def test_damaged_real_log_keeps_every_iteration(damage, generated):
    generated["damaged real logs (fixed damages)"] += 1
    row, result = parse_bytes(DAMAGES[damage](real_log()))
    assert elapsed_by_step(result) == ELAPSED_MS
    assert (row["gpus"], row["hidden_size"], row["num_layers"]) == (GPUS, 8192, 64)
    assert row["sec_per_iter"] == pytest.approx((129028.8 + 128891.5) / 2 / 1000)


def test_file_truncated_at_every_offset_of_its_last_iteration_line(generated):
    """A log read while the job writes it (or cut by a crash) ends mid-line: the steps before are
    exact, and the cut step is either absent or exact, never a number cut short."""
    log = real_log()
    start = log.index(b" iteration        3/")
    end = log.index(b"\n", start)
    with tempfile.TemporaryDirectory() as tmp:
        # every cut a run of its own, all read at once (one read's fixed cost, not one per cut)
        paths = {Path(tmp) / f"cut-{offset}.out": offset - start for offset in range(start, end + 1)}
        for path, cut in paths.items():
            path.write_bytes(log[: start + cut])
        result = load_runs(list(paths))
    assert result.runs.height == len(paths)
    reasons = result.runs["reason"].str.strip_chars().str.len_chars()
    assert set(result.runs["status"]) <= set(STATUSES) and reasons.null_count() == 0 and reasons.min() > 0
    wrong = {}
    for path, cut in paths.items():
        steps = result.iterations.filter(pl.col("path") == str(path)).select("iteration", "elapsed_ms")
        got = dict(steps.iter_rows())
        assert {1: got.get(1), 2: got.get(2)} == {1: ELAPSED_MS[1], 2: ELAPSED_MS[2]}, cut
        if got.get(3) not in (None, ELAPSED_MS[3]):
            wrong[cut] = got[3]
    generated["real log truncated mid-line"] += len(paths)
    assert wrong == {}, f"cut iteration 3 read as (offset in line: elapsed ms): {wrong}"


@PROPERTY
@given(fraction=st.floats(0.05, 0.95))
def test_gzip_truncated_mid_stream_keeps_what_came_before(fraction, generated):
    log = real_log()
    packed = gzip.compress(log)
    cut = packed[: int(len(packed) * fraction)]
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "job-42.out.gz"
        path.write_bytes(cut)
        whole = gzip.GzipFile(path)
        readable = b""
        try:
            while chunk := whole.read1(1 << 16):
                readable += chunk
        except EOFError:
            pass
    generated[".gz truncated mid-stream"] += 1
    row, result = parse_bytes(cut, name="job-42.out.gz")
    whole_lines = set(readable.split(b"\n")[:-1])
    expected = {
        step: ms
        for step, ms in ELAPSED_MS.items()
        if any(line.startswith(b" iteration        %d/" % step) for line in whole_lines)
    }
    got = elapsed_by_step(result)
    assert {step: got.get(step) for step in expected} == expected
    # "unreadable" when the cut leaves nothing any family recognises (the arguments start ~2 KiB in)
    assert row["status"] == ("incomplete" if result.iterations.height or row["gpus"] else "unreadable")
    assert "gzip" in row["reason"]


@pytest.mark.parametrize(
    "line",
    [
        b" iteration        2/    1000 | elapsed time per iteration (ms): nan | lm loss: inf | loss scale: 1e+30 |",
        b" iteration        3/    1000 | elapsed time per iteration (ms): -5 | number of skipped iterations: -1 |",
        b" iteration        4/    1000 | elapsed time per iteration (ms): -inf | global batch size: nan |",
        b" iteration 99999999999999999999999/ 10 | elapsed time per iteration (ms): 5 |",
        b" iteration        5/    99999999999999999999999 | elapsed time per iteration (ms): 1e400 |",
        b"using world size: 99999999999999999999, data-parallel-size: 1, tensor-model-parallel size: 0, "
        b"pipeline-model-parallel size: 16",
        b"using world size: 64 and model-parallel size: 0",
    ],
    ids=["nan-inf", "negative", "minus-inf", "huge-step", "huge-and-1e400", "huge-world", "tp-zero"],
)
def test_hostile_numbers_in_a_file(line, generated):
    generated["hostile-number files"] += 1
    row, result = parse_bytes(real_log() + line + b"\n")
    got = elapsed_by_step(result)
    assert {step: got[step] for step in ELAPSED_MS} == ELAPSED_MS


#: damages after which a log must read exactly as before (line numbers aside).
NEUTRAL_DAMAGES = (
    "crlf",
    "ansi-colours",
    "tqdm-carriage-returns",
    "invalid-utf8",
    "nul-padding-at-end",
    "srun-labels",
    "glued-ranks",
)
FACTS = (
    "family", "status", "gpus", "tp", "pp", "dp", "micro_batch_size", "global_batch_size", "gas", "seq_len",
    "hidden_size", "num_layers", "num_heads", "vocab_size", "zero_stage", "precision", "gpu_model",
    "activation_checkpointing", "final_train_runtime_s", "avg_epoch_time_s", "iterations", "sec_per_iter",
)  # fmt: skip
FAMILY_FIXTURES = sorted(
    path
    for family in ("deepspeed", "hf_trainer", "megatron", "mingpt")
    for path in (MEGATRON_LOG.parents[1] / family).iterdir()
    if path.suffix in (".out", ".log")
)


def _rounded(value):
    """Floats to 4 significant digits: HF Trainer prints its final metrics twice, rounded differently
    (66.98 in the dict, 66.977 in the metrics block), and a damage may leave only one copy readable."""
    return float(f"{value:.4g}") if isinstance(value, float) else value


def reading(data: bytes, name: str) -> tuple[dict, list[tuple]]:
    """The run's facts and its iterations (values only: line numbers move with some damages)."""
    row, result = parse_bytes(data, name=name)
    where = [name for name in ("path", "line", "source_path") if name in result.iterations.columns]
    values = [tuple(map(_rounded, r)) for r in result.iterations.drop(where).sort("iteration").rows()]
    return {fact: _rounded(row[fact]) for fact in FACTS}, values


@pytest.mark.parametrize("fixture", FAMILY_FIXTURES, ids=[p.name for p in FAMILY_FIXTURES])
def test_every_family_reads_a_damaged_log_as_the_clean_one(fixture, generated):
    """Every bundled log of every family, damaged in each neutral way, reads exactly as it does
    clean: same facts, same status, same iterations with the same values."""
    clean = reading(fixture.read_bytes(), fixture.name)
    assert clean[0]["status"] in STATUSES
    for damage in NEUTRAL_DAMAGES:
        generated["damaged fixtures of every family"] += 1
        assert reading(DAMAGES[damage](fixture.read_bytes()), fixture.name) == clean, damage


def test_progress_bar_inside_the_train_metrics_block_does_not_end_it(generated):
    """tqdm writes to stderr, merged into the same file: an update inside HF Trainer's
    ``***** train metrics *****`` block must not end it (66.977 is the block's value, the dict line
    above it says 66.98)."""
    fixture = MEGATRON_LOG.parents[1] / "hf_trainer" / "hf_gpt2_tiny_ds_zero2_2cpu.log"
    log = fixture.read_bytes()
    bar = b"100%|\xe2\x96\x88\xe2\x96\x88\xe2\x96\x88| 6/6 [00:01<00:00,  4.22it/s]\r"
    damaged = log.replace(b"  train_runtime   ", bar + b"\n  train_runtime   ", 1)
    assert damaged != log
    generated["damaged fixtures of every family"] += 1
    row, _ = parse_bytes(damaged, name=fixture.name)
    assert (row["final_samples_per_sec"], row["final_train_runtime_s"]) == (66.977, 1.433)


NAN_LOG = (
    b" iteration        1/    10 | elapsed time per iteration (ms): nan | lm loss: inf | global batch size: 8 |\n"
    b" iteration        2/    10 | elapsed time per iteration (ms): 120.5 | lm loss: -inf | global batch size: 8 |\n"
    b" iteration        3/    10 | elapsed time per iteration (ms): inf | lm loss: nan | global batch size: 8 |\n"
)


def _strict_json(text: str):
    def refuse(constant: str):
        raise ValueError(f"not JSON: {constant}")

    return json.loads(text, parse_constant=refuse)


@pytest.mark.parametrize("iterations", [False, True], ids=["runs", "iterations"])
def test_every_output_format_stays_valid_with_nan_and_inf(iterations, tmp_path, capsys):
    """nan and inf in a log never make invalid JSON (NaN is not JSON) nor unreadable CSV/parquet."""
    log = tmp_path / "nan-1.out"
    log.write_bytes(NAN_LOG)
    extra = ["--iterations"] if iterations else []
    outputs = {}
    for fmt in ("json", "csv", "markdown", "table"):
        with pytest.raises(SystemExit) as done:
            main(["parse", str(log), "--format", fmt, *extra])
            raise SystemExit(0)
        outputs[fmt] = capsys.readouterr().out
        assert (done.value.code or 0) == 0
    parquet = tmp_path / "out.parquet"
    with pytest.raises(SystemExit) as done:
        main(["parse", str(log), "--format", "parquet", "-o", str(parquet), *extra])
        raise SystemExit(0)
    assert (done.value.code or 0) == 0
    records = _strict_json(outputs["json"])
    expected_rows = 3 if iterations else 1
    assert len(records) == expected_rows
    assert pl.read_csv(io.StringIO(outputs["csv"])).height == expected_rows
    assert pl.read_parquet(parquet).height == expected_rows
    if iterations:
        assert [r["iteration"] for r in records] == [1, 2, 3]
        assert records[1]["elapsed_ms"] == 120.5


@PROPERTY
@given(data=st.data())
def test_a_soup_of_real_lines_of_every_family_reads_and_renders(data, real_lines, generated):
    """Real lines of every family and failure kind, shuffled, repeated and some cut short, in one
    file (a .out and its .err): one run row, sane counts, every output format and chart renders."""
    from logstat.analytics.charts import charts_of
    from logstat.analytics.tables import render_tables

    from logstat import formats

    line = st.sampled_from(real_lines)
    cut_line = st.tuples(line, st.floats(0, 1)).map(lambda pair: pair[0][: int(len(pair[0]) * pair[1])])
    out_lines = data.draw(st.lists(st.one_of(line, cut_line), max_size=60), label="out")
    err_lines = data.draw(st.lists(line, max_size=10), label="err")
    generated["soups of real lines (.out + .err)"] += 1
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "soup-7.out").write_text("\n".join(out_lines) + "\n", encoding="utf-8")
        (Path(tmp) / "soup-7.err").write_text("\n".join(err_lines) + "\n", encoding="utf-8")
        result = load_runs([tmp])
    assert result.runs.height == 1
    row = result.runs.row(0, named=True)
    assert row["status"] in STATUSES and row["reason"].strip()
    assert row["iterations"] == result.iterations["iteration"].n_unique()
    if row["reason_line"] is not None:
        lines_in = len(err_lines) if row["reason_path"].endswith(".err") else len(out_lines)
        assert 0 <= row["reason_line"] <= lines_in
    records = formats.run_records(result.runs, tflops=True)
    _strict_json(formats.json_text(records))
    formats.runs_text(result.runs, tflops=True, markdown=True, warmup=1)
    formats.step_rows_text(result.iterations, result.runs, markdown=False)
    assert Path(row["path"]).name in render_tables(result.runs, columns=None)
    for chart in charts_of(result.runs, result.iterations, result.timers).values():
        _strict_json(chart.to_json())


def test_plot_draws_what_it_can_from_a_log_with_nan_and_inf(tmp_path, capsys):
    """``lm loss: inf`` once made the PNG renderer fail on a spec holding Infinity (not JSON), after
    some chart files were already written. Non-finite values stay out of the charts, every chart
    is written, and the specs are strict JSON."""
    from logstat.analytics.charts import charts_of

    log = tmp_path / "nan-1.out"
    log.write_bytes(NAN_LOG)
    real = MEGATRON_LOG.parents[1] / "megatron" / "meg_ds_zero_gpt2_perf_n16_nbs48_ms48.out"
    result = load_runs([log, real])
    charts = charts_of(result.runs, result.iterations, result.timers)
    assert sorted(charts) == ["gpu_days_100b", "loss", "time_breakdown"]
    for chart in charts.values():
        _strict_json(chart.to_json())
    out_dir = tmp_path / "plots"
    with pytest.raises(SystemExit) as done:
        main(["plot", str(log), str(real), "--out", str(out_dir), "--format", "png"])
        raise SystemExit(0)
    assert (done.value.code or 0) == 0, capsys.readouterr().err
    assert sorted(p.name for p in out_dir.iterdir()) == [
        "gpu_days_100b.png",
        "loss.png",
        "time_breakdown.png",
    ]


def _with_elapsed(ms: str) -> bytes:
    """The real 52B Megatron log with every step's elapsed time replaced by ``ms``."""
    return re.sub(rb"elapsed time per iteration \(ms\): [\d.]+", b"elapsed time per iteration (ms): " + ms.encode(),
                  real_log())  # fmt: skip


@pytest.mark.parametrize(
    ("ms", "throughput", "tflops"),
    [
        ("nan", "fail", ""),
        ("inf", "fail", ""),
        ("0.0", "fail", ""),
        ("-1234.5", "fail", ""),
        # 51.966533632 * 8 * 1024 * 1024 / (1e-303 * 64e3) = 6.81e306, shown as parse's table shows it
        ("1e-300", "0.000s", "6.81e+306"),
    ],
)
def test_table_renders_hostile_step_times(ms, throughput, tflops, tmp_path, capsys):
    """nan, inf, zero and negative step times are no measurement (`fail`, and no TFLOPs derived from
    them); a vanishing one gives absurd TFLOPs, in scientific notation, not 300 digits. The table
    renders every run (one such run once made 'logstat table' fail for all with a polars cast error)."""
    (tmp_path / "hostile-1.out").write_bytes(_with_elapsed(ms))
    (tmp_path / "meg_gpt2_perf_n16.out").write_bytes(real_log())
    with pytest.raises(SystemExit) as done:
        main(["table", str(tmp_path), "--columns", "GPUs,Size,Throughput,TFlops,Notes"])
        raise SystemExit(0)
    out = capsys.readouterr().out
    assert (done.value.code or 0) == 0
    cells = {
        row.split("|")[5].strip(): [cell.strip() for cell in row.split("|")[1:5]]
        for row in out.splitlines()
        if row.startswith("|") and ".out" in row
    }
    assert cells["hostile-1.out (incomplete)"] == ["64", "52B", throughput, tflops]
    # the real run beside it keeps its numbers: 128.96 s/iter, 52.0B, seed formula 52.8 TFLOPs
    assert cells["meg_gpt2_perf_n16.out (incomplete)"] == ["64", "52B", "129s", "52.8"]


def test_readable_table_stays_readable_with_absurd_numbers(tmp_path, capsys):
    """A step time of 1e-300 ms gives ~1e305 samples/s: printed as 1.02e+306, not 300 digits."""
    log = tmp_path / "tiny-1.out"
    log.write_bytes(_with_elapsed("1e-300"))
    with pytest.raises(SystemExit) as done:
        main(["parse", str(log), "--tflops"])
        raise SystemExit(0)
    out = capsys.readouterr().out
    assert (done.value.code or 0) == 0
    row = next(line for line in out.splitlines() if line.startswith("tiny-1.out"))
    assert len(row) < 250 and "1.02e+306" in row


JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=10),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=6,
)


@PROPERTY
@given(data=st.data())
def test_a_hostile_manifest_beside_a_log_never_loses_the_log(data, generated):
    """manifest.json with any JSON at any key the reader uses (strings for counts, lists, huge
    numbers, a non-object root): the parse never fails, the log's own facts stay where the
    manifest's value is unusable, and every unusable value is noted."""
    from logstat.parsers.manifest import SPEC_FACTS, TOP_FACTS

    spec: dict = {}
    for section, key in SPEC_FACTS.values():
        holder = spec if not section else spec.setdefault(section, {})
        holder[key] = data.draw(JSON_VALUES)
    manifest = {key: data.draw(JSON_VALUES) for key in TOP_FACTS.values()} | {"spec": spec}
    root = data.draw(st.sampled_from(["object", "object", "list", "number"]), label="root")
    text = {"object": json.dumps(manifest), "list": json.dumps([manifest]), "number": "12"}[root]
    generated["hostile manifests"] += 1
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "slurm-12.out").write_bytes(real_log())
        (Path(tmp) / "manifest.json").write_text(text)
        result = load_runs([tmp])
    row = result.runs.row(0, named=True)
    assert elapsed_by_step(result) == ELAPSED_MS
    tp = manifest["spec"]["parallel"]["tp"]
    usable = isinstance(tp, int) and not isinstance(tp, bool) and abs(tp) < 2**63 and root == "object"
    assert row["tp"] == (tp if usable else 4)  # 4: "tensor-model-parallel size: 4" of the log


COMPRESSORS = {"gz": gzip.compress, "xz": lzma.compress, "bz2": bz2.compress}
KINDS = {"gz": "gzip", "xz": "xz", "bz2": "bzip2"}


@pytest.mark.parametrize("suffix", list(COMPRESSORS))
def test_archived_logs_are_found_and_read_whole_or_cut(suffix, generated, tmp_path):
    """Logs archived with gzip, xz or bzip2 are found in a directory walk and read like the plain
    log; cut mid-stream they keep what came before the cut and say why the rest is missing.
    (xz and bzip2 logs were once skipped in directories without a word.)"""
    packed = COMPRESSORS[suffix](real_log())
    (tmp_path / f"job-42.out.{suffix}").write_bytes(packed)
    result = load_runs([tmp_path])
    assert elapsed_by_step(result) == ELAPSED_MS
    cut = packed[: len(packed) * 9 // 10]
    row, result = parse_bytes(cut, name=f"job-42.out.{suffix}")
    generated["archived logs cut mid-stream"] += 1
    assert row["status"] in ("incomplete", "unreadable") and KINDS[suffix] in row["reason"]
    assert set(elapsed_by_step(result).items()) <= set(ELAPSED_MS.items())


def test_a_text_log_starting_like_a_compression_magic_is_text(tmp_path):
    """'BZh' is plain text (bzip2's magic needs its block header too): a log whose first line
    starts so is read as the text it is."""
    log = tmp_path / "bzh-1.out"
    log.write_bytes(b"BZh91 is the name of our cluster\n" + real_log())
    assert elapsed_by_step(load_runs([log])) == ELAPSED_MS


def _holed(log: bytes, before: bytes, after: bytes) -> bytes:
    """``log`` with a hole of NUL bytes (a crashed node's lost writes) between ``before`` and ``after``."""
    head, found, tail = log.partition(before + after)
    assert found
    return head + before + b"\x00" * 8192 + after + tail


def test_a_hole_cutting_the_last_steps_total_leaves_the_planned_steps_and_the_step_unread(generated):
    # iteration 3's total (1000) cut to "1" by the hole: no "reached the planned 1 iterations"
    generated["real log with a hole of NUL bytes"] += 1
    row, result = parse_bytes(_holed(real_log(), b" iteration        3/    1", b"000 |"))
    assert (row["status"], row["train_iters"], row["iterations"]) == ("incomplete", 1000, 2)
    assert row["reason"] == "log stops after iteration 2 of 1000, with no failure or end message"
    assert elapsed_by_step(result) == {step: ELAPSED_MS[step] for step in (1, 2)}
    assert row["warnings"] == [
        f"{row['path']}: NUL bytes in place of text from line 242 (writes lost: a node crashed while writing?);"
        " a line they cut keeps the text before them, a number cut by them dropped"
    ]


def test_a_time_limit_written_after_a_hole_is_quoted_without_it(generated):
    generated["real log with a hole of NUL bytes"] += 1
    cancel = b"slurmstepd: error: *** JOB 42 ON r7i4n1 CANCELLED AT 2021-05-26T10:00:03 DUE TO TIME LIMIT ***"
    row, _ = parse_bytes(real_log() + b"\x00" * 4096 + cancel + b"\n")
    assert (row["status"], row["reason"]) == ("timeout", f"time limit: {cancel.decode()}")


def test_a_gzip_stream_cut_after_the_planned_last_step_does_not_end_the_run_ok(generated):
    # what came after the last step (a failed checkpoint save, the job's cancel) is lost with the cut;
    # a corrupt stream's output can even repeat fragments of earlier text as plausible lines
    generated["gzip cut after the planned last step"] += 1
    steps = "".join(
        f" iteration {step:8d}/       3 | elapsed time per iteration (ms): 100.0 | lm loss: 2.0E+00 |\n"
        for step in (1, 2, 3)
    )
    tail = "".join(f"saving checkpoint shard {n}: {os.urandom(24).hex()}\n" for n in range(4000))
    packed = gzip.compress((steps + tail).encode())
    row, _ = parse_bytes(packed, name="job-42.out.gz")
    assert (row["status"], row["reason"]) == ("ok", "reached the planned 3 iterations")
    row, _ = parse_bytes(packed[: len(packed) * 3 // 4], name="job-42.out.gz")
    assert (row["status"], row["iterations"]) == ("incomplete", 3)
    assert re.fullmatch(r"gzip stream truncated or corrupt \(.*\); read up to line \d+", row["reason"])
