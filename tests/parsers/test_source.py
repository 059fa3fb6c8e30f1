"""The line and record layers: files to numbered lines (gzip by magic bytes, binary, truncated and odd
files), lines to records (launcher prefixes stripped, glued ranks and carriage returns split), and the
marked lines a family is handed, with their physical line numbers."""

import codecs
import gzip
import io
import random
import tarfile
import zipfile

import polars as pl
import pytest
from logstat.parsers import source
from logstat.parsers.base import Family
from logstat.parsers.records import Plan, split_records
from logstat.parsers.source import SourceReport, batches, frame_batch

from tests.conftest import FIXTURES


def records_of(*lines: str) -> list[list[str]]:
    """Per line, its records as the reader splits them."""
    frame = pl.DataFrame(
        {
            "run": [0] * len(lines),
            "row": list(range(len(lines))),
            "order": [n << 16 for n in range(len(lines))],
        },
        schema={"run": pl.Int64, "row": pl.Int64, "order": pl.Int64},
    ).with_columns(text=pl.Series(lines, dtype=pl.String))
    found = split_records(frame.lazy(), "\x1f").collect().sort("order")
    return [found.filter(pl.col("row") == row)["text"].to_list() for row in range(len(lines))]


def read(path, markers: tuple[str, ...]) -> tuple[list[tuple[int, str]], SourceReport]:
    """``(line, record)`` of the records holding one of ``markers``, and the file's report."""
    plan = Plan((Family(name="probe", markers=markers),))
    reports: list[list[SourceReport]] = [[]]
    found = []
    for items in batches([[path]], reports):
        records = plan.records(frame_batch(items))
        found.append(records.filter(pl.col("f0").is_not_null()).select("order", "text"))
    frame = (
        pl.concat(found).sort("order")
        if found
        else pl.DataFrame(schema={"order": pl.Int64, "text": pl.String})
    )
    return [(order >> 16, text) for order, text in frame.iter_rows()], reports[0][0]


def test_prefixes_of_every_launcher_are_stripped():
    got = records_of(
        "12: iteration 3",
        " 0:  iteration 3",
        "[default3]:iteration 3",
        "10.0.0.2: iteration 3",
        "localhost: iteration 3",
        "[rank7]:iteration 3",
        "r7i4n1: iteration 3",
        "localhost: [default1]:x",
        "[13] iteration 3",
        "[rank 13] iteration 3",  # a wrapper's: sed "s/^/[rank $RANK] /"
        "[1,mpirank:13,algo-2]<stdout>:iteration 3",  # SageMaker's mpirun --tag-output
        "[13]<stderr>:iteration 3",  # horovodrun --gloo's
        "2024-03-02T10:11:12.123456789Z iteration 3",
        "2024-03-02T10:11:12+01:00 iteration 3",
        "[2024-03-02 10:11:12] iteration 3",
        # journald (journalctl -o short-iso), kubectl logs --prefix --timestamps, Ray's and SkyPilot's
        # workers, docker compose logs
        "2024-06-01T10:00:09+0000 gpu-node-07 python[4321]: iteration 3",
        "2024-06-01T10:03:28+0000 gpu-node-07 kernel: iteration 3",
        "[pod/gpt-master-0/pytorch] 2024-06-01T10:00:09.638393226Z iteration 3",
        "(RayTrainWorker pid=12345, ip=10.0.0.12) iteration 3",
        "(head, rank=0, pid=4012) 10.0.0.1: iteration 3",
        "(task, pid=1234) iteration 3",
        "trainer-1  | 2024-11-05T14:22:43.612317981Z iteration 3",
        # moreutils ts's default before pdsh's host; journalctl's default (syslog's time, host, process)
        "Mar 05 14:20:02 a100-node-01:   iteration 3",
        "Mar  5 14:20:02 gpu-node-07 python[4321]: iteration 3",
        # a platform's export: aws logs tail (SageMaker's job/host stream), gcloud ai custom-jobs
        # stream-logs (severity, time, task), Determined's trial logs (container, rank)
        "2023-11-07T18:02:15.746851+00:00 llama2-13b-2023-11-07-17-55-31-881/algo-1-1699380091 iteration 3",
        "ERROR\t2024-04-09 13:00:12 +0000\tworkerpool0-0\titeration 3",
        "[2023-08-14T10:20:04.147960Z] a3e1f2b9 [rank=0] || iteration 3",
        "[2023-08-14T10:20:02.381953Z] a3e1f2b9 || iteration 3",
    )
    assert got == [
        *[["iteration 3"], [" iteration 3"], *[["iteration 3"]] * 5, ["x"]],
        *[*[["iteration 3"]] * 14, ["  iteration 3"], ["iteration 3"]],
        *[["iteration 3"]] * 4,
    ]


def test_ordinary_text_is_not_taken_for_a_prefix():
    texts = ("WARNING: could not find", "Error: x", "time (ms) | forward: 1", "Config: alpha=0.1")
    # a list's index is no prefix
    texts += ("[13]: x",)
    # a table's first column is no compose service, a parenthesis without its pid= no worker
    texts += ("epoch | loss", "(pid 12) x", "model_1 |x")
    # a month's name and a day that are no syslog time
    texts += ("Mar 05 2024 training starts", "May 5 14:20 x")
    assert records_of(*texts) == [[text] for text in texts]
    # the words after a time are no journald host and process without the process's [pid]
    assert records_of("2024-03-02T10:11:12Z Epoch 1: 100%") == [["Epoch 1: 100%"]]
    # nor a path after it a log stream (a stream's name is followed by the text)
    assert records_of("2024-03-02T10:11:12.5Z megatron/training.py:123 x") == [["megatron/training.py:123 x"]]
    # a logger's time with its milliseconds, in brackets (DeepSpeed's) or not (Python logging's asctime)
    stamped = ("[2024-03-02 10:11:12,345] [INFO] [logging.py:96:log_dist] [Rank 0] step=10",)
    stamped += (
        "[2024-05-01 12:00:00,312]   micro_batch_size ........ 1",
        "2024-05-01 12:00:00,123 iteration 5",
    )
    assert records_of(*stamped) == [
        ["[INFO] [logging.py:96:log_dist] [Rank 0] step=10"],
        ["  micro_batch_size ........ 1"],
        ["iteration 5"],
    ]


def test_a_structured_logs_line_is_the_text_it_holds():
    # docker's json-file driver, Google Cloud Logging's export (text, structured), CloudWatch's: the text
    # with its escapes decoded, colour codes dropped, a record per line of it; other JSON and dicts stay
    lines = (
        '{"log":"[default0]:iteration 3\\n","stream":"stdout","time":"2024-06-01T10:00:09.6Z"}',
        '{"insertId": "x1", "textPayload": "\\u001b[31mstep:  1  \\u001b[32mloss: 11.5", "severity": "INFO"}',
        '{"jsonPayload": {"message": "Traceback (most recent call last):\\n  File \\"train.py\\", line 3"}}',
        '{"timestamp": 1718852400000, "message": "\\tTrain loss/train/total: 3.4521"}',
        '{"loss": 2.31, "step": 10}',
        "{'loss': 2.31, 'learning_rate': 3e-05, 'epoch': 0.5}",
        # an export pretty-printed (the Cloud Logging console's download, aws logs get-log-events): its
        # text field's line
        '    "textPayload": "[rank0]:iteration 3",',
        '            "message": "ValueError: bad \\"x\\"",',
        # a Kaggle notebook's __results__.log: a JSON array of the output's writes, one a line
        '[{"stream_name": "stderr", "time": 3.11, "data": "[NbConvertApp] Converting notebook\\n"}',
        ',{"stream_name": "stdout", "time": 9.52, "data": "{\'loss\': 2.31, \'epoch\': 0.5}\\n"}]',
    )
    assert records_of(*lines) == [
        ["iteration 3"],
        ["step:  1  loss: 11.5"],
        ["Traceback (most recent call last):", '  File "train.py", line 3'],
        ["\tTrain loss/train/total: 3.4521"],
        ['{"loss": 2.31, "step": 10}'],
        ["{'loss': 2.31, 'learning_rate': 3e-05, 'epoch': 0.5}"],
        ["iteration 3"],
        ['ValueError: bad "x"'],
        ["[NbConvertApp] Converting notebook"],
        ["{'loss': 2.31, 'epoch': 0.5}"],
    ]


def test_a_docker_json_file_log_is_read_as_the_lines_it_holds(tmp_path):
    import json

    from logstat.api import load_runs

    iteration = (
        " iteration {step:8d}/      30 | consumed samples: {samples:12d} | elapsed time per iteration (ms): 1234.5 |"
        " learning rate: 1.000E-04 | global batch size:    64 | lm loss: 7.123456E+00 | loss scale: 4096.0 |"
    )
    texts = [iteration.format(step=step, samples=64 * step) for step in (1, 2, 3)]
    texts.append("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB")
    wrapped = (
        json.dumps({"log": f"{text}\n", "stream": "stderr", "time": "2024-06-01T10:00:09Z"}) for text in texts
    )
    (tmp_path / "4f2a-json.log").write_text("\n".join(wrapped) + "\n")
    row = load_runs([tmp_path]).runs.row(0, named=True)
    assert (row["family"], row["iterations"], row["status"]) == ("megatron", 3, "failed")
    assert row["reason"] == f"CUDA out of memory: {texts[-1]}"  # the text, not its JSON


def test_glued_ranks_and_carriage_returns_split_a_line_into_records():
    glued = (
        "[default0]:iteration 1 | a: 1 |[default3]:[Rank 3] (after 1 iterations) memory (MB) | allocated: 2"
    )
    assert records_of(glued, "step 1\rstep 2", "   ", "a\r\r  \rb") == [
        ["iteration 1 | a: 1 |", "[Rank 3] (after 1 iterations) memory (MB) | allocated: 2"],
        ["step 1", "step 2"],
        [],
        ["a", "b"],
    ]


def test_what_is_written_right_after_a_progress_bar_is_a_record_of_its_own():
    # tqdm ends no update with a newline: the next write (a log line, a traceback, Slurm's cancel) is
    # glued to the bar's last update, with or without the carriage returns (a log whose CRs were made LFs)
    update = "Epoch 0: : 100%|##########| 50/50 [02:31<00:00, reduced_train_loss=7.140, global_step=49.00]"
    bar = " 50%|#####     | 3/6 [00:05<00:05,  1.90s/it]   "
    assert records_of(
        f"{update}`Trainer.fit` stopped: `max_steps=50` reached.",
        f"\r{bar}\r{bar}Traceback (most recent call last):",
        f"{update}   ",  # tqdm's padding after a shorter update: nothing glued
    ) == [
        [update, "`Trainer.fit` stopped: `max_steps=50` reached."],
        [bar, bar.rstrip(), "Traceback (most recent call last):"],
        [f"{update}   "],
    ]


def test_records_of_a_line_are_numbered_in_their_order():
    frame = pl.DataFrame(
        {"run": [0, 0], "row": [0, 1], "order": [1 << 16, 2 << 16], "text": ["x[rank1]:y\r z", "w"]}
    )
    found = split_records(frame.lazy(), "\x1f").collect().sort("order")
    assert found.select("order", "text").rows() == [
        ((1 << 16) + (0 << 8), "x"),
        ((1 << 16) + (1 << 8), "y"),
        ((1 << 16) + (2 << 8), " z"),
        ((2 << 16), "w"),
    ]


def test_only_marked_records_are_read_with_their_physical_numbers(tmp_path, reading):
    path = tmp_path / "a.log"
    path.write_text("noise\nthe iteration 1\nnoise\nnoise\nan iteration 2\nlast")
    got, report = read(path, ("iteration",))
    assert got == [(2, "the iteration 1"), (5, "an iteration 2")]
    assert report.problem is None and report.lines == 6


def test_a_marker_in_a_launcher_prefix_marks_nothing(tmp_path):
    path = tmp_path / "a.log"
    path.write_text("localhost: x\nlocalhost: localhost here\n")
    got, _ = read(path, ("localhost",))
    assert got == [(2, "localhost here")]


def test_line_numbers_hold_across_chunks_and_batches(tmp_path, monkeypatch):
    monkeypatch.setattr(source, "CHUNK_BYTES", 7)
    monkeypatch.setattr(source, "BATCH_BYTES", 30)
    path = tmp_path / "a.log"
    path.write_text("".join(f"line {i} {'X' if i % 10 == 0 else ''}\n" for i in range(1, 101)))
    got, report = read(path, ("X",))
    assert [n for n, _ in got] == list(range(10, 101, 10))
    assert report.lines == 100


def test_files_of_many_runs_share_a_batch_and_keep_their_lines(tmp_path):
    paths = []
    for run in range(3):
        path = tmp_path / f"r{run}.log"
        path.write_text(f"a\nmark {run}\n" * (run + 1))
        paths.append(path)
    reports: list[list[SourceReport]] = [[], [], []]
    plan = Plan((Family(name="probe", markers=("mark",)),))
    (items,) = list(batches([[path] for path in paths], reports))
    found = plan.records(frame_batch(items)).sort("run", "order")
    assert [
        (run, order >> 16, text) for run, order, text in found.select("run", "order", "text").iter_rows()
    ] == [
        (0, 2, "mark 0"),
        (1, 2, "mark 1"),
        (1, 4, "mark 1"),
        (2, 2, "mark 2"),
        (2, 4, "mark 2"),
        (2, 6, "mark 2"),
    ]


def test_gzip_is_read_by_content_not_name(tmp_path):
    path = tmp_path / "job-1.out.gz"
    path.write_bytes(gzip.compress(b"a\nmarker here\n"))
    got, report = read(path, ("marker",))
    assert got == [(2, "marker here")] and report.compressed


def test_truncated_gzip_keeps_what_was_read_and_says_why(tmp_path):
    body = "".join(f"marker {i}\n" for i in range(5000)).encode()
    data = gzip.compress(body)
    path = tmp_path / "cut.log.gz"
    path.write_bytes(data[: len(data) // 2])
    got, report = read(path, ("marker",))
    assert 0 < len(got) < 5000
    assert got[0] == (1, "marker 0")
    assert "truncated" in report.problem


def test_binary_file_yields_nothing(tmp_path):
    path = tmp_path / "model.out"
    path.write_bytes(bytes(range(256)) * 4)
    got, report = read(path, ("a",))
    assert got == [] and "binary" in report.problem


def _zipped(text: bytes) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("job.out", text)
    return buffer.getvalue()


@pytest.mark.parametrize(
    ("data", "name"),
    [
        (b"\x28\xb5\x2f\xfd" + b"marker 1\n", "zstd"),  # no NUL byte: it would read as a text line
        (b"\x04\x22\x4d\x18" + b"marker 1\n", "lz4"),
    ],
)
def test_a_compression_python_cannot_read_is_named_not_read_as_text(tmp_path, data, name):
    path = tmp_path / "job.out"
    path.write_bytes(data)
    got, report = read(path, ("marker",))
    assert (
        got == [] and report.problem == f"{name}-compressed: logstat does not read it (decompress it first)"
    )


def _tarred(text: bytes, mode: str) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode=mode) as archive:
        for name in ("job/slurm-551204.out", "job/slurm-551204.err"):
            member = tarfile.TarInfo(name)
            member.size = len(text)
            archive.addfile(member, io.BytesIO(text))
    return buffer.getvalue()


@pytest.mark.parametrize(
    ("data", "kind", "held"),
    [
        (_zipped(b"marker 1\n"), "zip", "1 file (job.out)"),
        # a tar of text logs is text but for its headers: not read as lines, compressed or not
        (_tarred(b"marker 1\n", "w"), "tar", "2 files (job/slurm-551204.out, job/slurm-551204.err)"),
        (_tarred(b"marker 1\n", "w:gz"), "tar", "2 files (job/slurm-551204.out, job/slurm-551204.err)"),
    ],
)
def test_an_archive_is_named_with_the_files_it_holds_not_read_as_text(tmp_path, data, kind, held):
    path = tmp_path / "job_logs.bundle"
    path.write_bytes(data)
    got, report = read(path, ("marker",))
    assert got == []
    assert report.problem == f"a {kind} archive of {held}: logstat does not read archives (extract it first)"


def test_a_torch_checkpoint_is_named_a_checkpoint_not_a_compressed_log(tmp_path):
    import torch  # a test dependency (the runners'); the parse path never imports it

    path = tmp_path / "model_optim_rng.pt"
    torch.save({"iteration": 500, "weight": torch.zeros(2)}, path)
    got, report = read(path, ("marker",))
    assert got == [] and report.problem == "a PyTorch checkpoint (torch.save), not a log"


def test_undecodable_bytes_are_replaced_as_python_decodes_them(tmp_path, reading):
    path = tmp_path / "a.log"
    raw = b"iteration \xff\xfe 1\niteration \xe2\x82 2\n"
    path.write_bytes(raw)
    got, _ = read(path, ("iteration",))
    assert got == [(n, line) for n, line in enumerate(raw.decode("utf-8", "replace").splitlines(), 1)]


@pytest.fixture(params=["shared batch", "own batch"])
def reading(request, monkeypatch):
    """Both ways a chunk becomes lines: in a batch with others (small files), and as a batch of its own,
    whose lines polars counts (big files)."""
    if request.param == "own batch":
        monkeypatch.setattr(source, "BATCH_BYTES", 1)
    return request.param


@pytest.mark.parametrize(
    "raw",
    [
        b"iteration \x1f 1\nx\niteration 2\x1f\x1f\n",  # the CSV reader's separator inside lines
        b"iteration 1\r\niteration 2\r\n",  # CRLF
        b"\n\n\niteration 4",  # blank lines, no newline at the end
        # a first line whose bytes start like a zlib stream: polars' reader sniffs them
        b"x^0000 iteration 1\n",
        b"x\x9citeration 1\niteration 2\n",
        # every separator candidate in the batch: the lines are cut and decoded in Python instead
        b"x^iteration " + bytes([*range(1, 9), *range(0x0E, 0x20)]) + b" 1\n\niteration 2",
    ],
)
def test_odd_bytes_give_the_lines_python_gives(tmp_path, raw, reading):
    path = tmp_path / "odd.log"
    path.write_bytes(raw)
    got, report = read(path, ("iteration",))
    lines = raw.decode("utf-8", "replace").split("\n")
    want = [(n, line.removesuffix("\r")) for n, line in enumerate(lines, 1) if "iteration" in line]
    assert got == want
    assert report.lines == raw.count(b"\n") + (not raw.endswith(b"\n"))


@pytest.mark.parametrize(
    ("last", "read_as"),
    [
        # a write cut inside a value (65.5): the value goes, its name and delimiter stay
        (b"MemAllocated=5.2GB, CurrSamplesPerSec=6", "MemAllocated=5.2GB, CurrSamplesPerSec="),
        (b"step=20, skipped=0, lr=[0.00", "step=20, skipped=0, lr=["),
        (b"| lm loss: 2.3e", "| lm loss:"),
        (b"losses (0.5, 0.2", "losses (0.5,"),
        (b"step 3/      1", "step 3/"),  # a total: 1 of 1000
        # no delimiter before the number: words end the line, not a value
        (b"srun: error: task 3: Exited with exit code 1", "srun: error: task 3: Exited with exit code 1"),
        (b"loss: 2.3 |", "loss: 2.3 |"),
    ],
)
def test_a_value_ending_a_last_line_that_no_newline_ends_was_cut(tmp_path, reading, last, read_as):
    path = tmp_path / "cut.log"
    path.write_bytes(b"step loss=1.5\n" + last)
    got, report = read(path, ("step", "loss", "srun", "Sec="))
    assert got == [(1, "step loss=1.5"), (2, read_as)] and report.lines == 2
    # a line its newline ends is whole
    path.write_bytes(last + b"\n")
    assert read(path, ("step", "loss", "srun", "Sec="))[0] == [(1, last.decode())]


@pytest.mark.parametrize(
    ("raw", "records"),
    [
        # a hole between lines, and at a line's start: the line after it is whole
        (b"step 1\n" + b"\x00" * 4096 + b"step 2\n", [(1, "step 1"), (2, "step 2")]),
        # a hole cutting a line: the text before it, its number cut short dropped (a total: 1 of 1000)
        (
            b"step 3/      1" + b"\x00" * 8 + b"000 | time: 5\x00\x00\x00\n",
            [(1, "step 3/"), (1, "000 | time:")],
        ),
        (b"step=4, lr=[0.00" + b"\x00" * 16 + b"step=5\n", [(1, "step=4, lr=["), (1, "step=5")]),
        # no number before it: words stay
        (b"step 6 done\x00\x00step 7\n", [(1, "step 6 done"), (1, "step 7")]),
    ],
)
def test_a_hole_of_nul_bytes_breaks_the_record_it_cuts_and_is_said_once(tmp_path, reading, raw, records):
    # a node that crashed while writing to a shared file system leaves NUL bytes in place of its writes
    path = tmp_path / "holed.log"
    path.write_bytes(b"before\n" + raw + b"after\x00\n")
    got, report = read(path, ("step", "time"))
    assert got == [(line + 1, text) for line, text in records]
    assert report.hole == (
        f"NUL bytes in place of text from line {3 if raw.startswith(b'step 1') else 2} (writes lost: a node "
        "crashed while writing?); a line they cut keeps the text before them, a number cut by them dropped"
    )
    assert report.problem is None and report.lines == 2 + raw.count(b"\n")


@pytest.mark.parametrize("after", [b"+ NNODES=2\n+ GPUS_PER_NODE=8\n", b"", b"\n"])
def test_a_byte_order_mark_starting_a_file_is_no_text(tmp_path, reading, after):
    # Windows editors write one; "+ NNODES=" is read at a record's start
    path = tmp_path / "bom.log"
    path.write_bytes(b"\xef\xbb\xbf" + after)
    got, report = read(path, ("+ ",))
    assert got == [(n, line) for n, line in enumerate(after.decode().splitlines(), 1) if line]
    assert report.lines == after.count(b"\n")


@pytest.mark.parametrize("encoding", ["utf-16-le", "utf-16-be"])
def test_a_utf16_log_is_read_as_its_text(tmp_path, encoding):
    # Windows PowerShell 5's `>` writes UTF-16LE with a byte order mark, and CRLF line ends
    from logstat.api import load_runs

    original = FIXTURES / "hf_trainer" / "hf_gpt2_tiny_printer_cpu.log"
    text = original.read_text(encoding="utf-8").replace("\n", "\r\n")
    bom = codecs.BOM_UTF16_LE if encoding.endswith("le") else codecs.BOM_UTF16_BE
    wide = tmp_path / "wide" / original.name
    wide.parent.mkdir()
    wide.write_bytes(bom + text.encode(encoding))
    plain, utf16 = load_runs([original]), load_runs([wide])
    columns = ["iteration", "loss", "lr", "grad_norm"]
    assert utf16.iterations.select(columns).equals(plain.iterations.select(columns))
    assert utf16.iterations.height > 0
    row, expected = utf16.runs.row(0, named=True), plain.runs.row(0, named=True)
    for name in ("family", "status", "sec_per_iter", "global_batch_size", "micro_batch_size", "seq_len"):
        assert row[name] == expected[name], name


@pytest.mark.parametrize(
    "garbage",
    [
        bytes(range(32)) * 2 + b"\n",  # NUL, control characters, newlines
        random.Random(0).randbytes(4096) + b"\n",  # a 4 KiB block of a disk's garbage: over half the file
    ],
)
def test_a_block_of_garbage_in_a_small_text_log_leaves_it_a_log(tmp_path, garbage):
    # a job's set-up (its environment echoed), then its steps, a block of garbage among them
    path = tmp_path / "garbled.log"
    setup = [f"+ export SETTING_{n:02d}=/gpfs/projects/llm/checkpoints/run-{n:02d}\n" for n in range(40)]
    lines = [
        f" iteration {n} | elapsed time per iteration (ms): 4660.0 | lm loss: 8.765432E+00 | loss scale: 1.0 |\n"
        for n in range(1, 6)
    ]
    path.write_bytes("".join(setup + lines[:2]).encode() + garbage + "".join(lines[2:]).encode())
    got, report = read(path, ("iteration",))
    after = 42 + garbage.count(b"\n")
    assert [line for line, _ in got] == [41, 42, after + 1, after + 2, after + 3] and report.problem is None


def test_an_empty_file_has_no_lines(tmp_path, reading):
    path = tmp_path / "empty.log"
    path.write_bytes(b"")
    got, report = read(path, ("x",))
    assert got == [] and report.lines == 0 and report.bytes_read == 0
