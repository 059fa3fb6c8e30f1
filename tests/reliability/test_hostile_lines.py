"""No line makes a family's reading fail, whatever it holds.

Lines are arbitrary text, real lines (fixtures/, the real logs included) cut at every offset,
real lines whose numbers are replaced by hostile ones (nan, inf, 1e+30, 1e400, huge and negative
integers), and real lines of many ranks glued together, each read by the reader (polars' records, the
families' record kinds and blocks, their Python residue) with one family at a time. No family's
Python code may raise (the reader would note the error, which these tests refuse), no record kind's
query may fail, and after the lines the run's frames must build (polars refuses, for one, an integer
beyond int64) and the summary must compute.
"""

from __future__ import annotations

import os
import re
import tempfile
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from logstat.analytics.summary import summarize
from logstat.parsers import megatron, registry
from logstat.parsers.base import RunBuilder
from logstat.parsers.reader import RunFiles, frames, read_settled

#: examples per property; LOGSTAT_RELIABILITY_SCALE=10 searches ten times longer (make test uses 1).
EXAMPLES = 150 * int(os.environ.get("LOGSTAT_RELIABILITY_SCALE", "1"))
PROPERTY = settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
FAMILIES = registry.families()
MARKERS = sorted({marker for family in FAMILIES for marker in family.markers})
NUMBER = re.compile(r"(?<![\w.])[-+]?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?(?![\w.])")
HOSTILE_NUMBERS = (
    "nan",
    "NaN",
    "inf",
    "-inf",
    "+Infinity",
    "1e+30",
    "1e400",
    "-1e400",
    "1.5e-400",
    "-1",
    "-0",
    "0",
    "0.0",
    "99999999999999999999999",
    "-99999999999999999999999",
    "9223372036854775808",
    "1" + "0" * 400,
    "1_000",
    "0x1F",
    "12.5.6",
    "1e",
    "",
)
#: unambiguous launcher tags: the reader splits a line at each of them (parsers/records.py).
GLUE_TAGS = ("[default0]:", "[default3]:", "[default63]:", "[rank7]:", "[rank0]:")
MEGATRON_LOG = Path(__file__).resolve().parents[2] / "fixtures" / "megatron" / "meg_gpt2_perf_n16.out"
#: step -> elapsed ms of MEGATRON_LOG's iteration lines (lines 238, 240, 242, read by eye).
MEGATRON_ELAPSED_MS = {1: 155483.8, 2: 129028.8, 3: 128891.5}

family_params = pytest.mark.parametrize("family", FAMILIES, ids=[family.name for family in FAMILIES])
#: logs one example of a property reads together: a read's fixed cost (~0.2 s: its threads, the frames,
#: the summary) is most of an example's, so each example reads several, and a third as many examples try
#: twice as many logs as one log an example did
LOGS_PER_EXAMPLE = 6
SEVERAL_LOGS = settings(PROPERTY, max_examples=max(1, EXAMPLES // 3))


#: a note of an error a family's Python code raised (``base.never_raises``): a crash the reader hid
RAISED = re.compile(r"^[\w-]+:\d+: [A-Z]\w*(?:Error|Exception)\b")


def read_lines(families, *logs: list[str]):
    """The results of reading each of ``logs`` (its lines) with ``families``; no family may have raised."""
    with tempfile.TemporaryDirectory() as directory:
        groups = []
        for number, lines in enumerate(logs):
            path = Path(directory) / f"hostile-{number}.out"
            path.write_bytes("".join(f"{line}\n" for line in lines).encode("utf-8", "surrogatepass"))
            groups.append(RunFiles(key=str(path), files=(path,)))
        results = read_settled(groups, list(families))
    for result in results:
        raised = [note for note in result.run.state.get("parse_errors", []) if RAISED.match(note)]
        assert not raised, raised
    return results


def build_frames(results):
    """The runs frame with its summary and the iterations frame, as load_runs builds them."""
    runs_frame, iterations, _timers = frames(results)
    return summarize(runs_frame, iterations, warmup=1), iterations


def feed(family, texts) -> RunBuilder:
    """The run ``family`` reads from lines ``texts``, its frames built."""
    results = read_lines([family], list(texts))
    build_frames(results)
    return results[0].run


def feed_logs(family, logs: list[list[str]]) -> None:
    """Each of ``logs`` (its lines) read by ``family`` as a run of its own, in one read; the frames built."""
    build_frames(read_lines([family], *logs))


def with_marker(draw_text) -> st.SearchStrategy[str]:
    """Arbitrary text around a family marker, so the family's own code paths run."""
    return st.builds(lambda a, marker, b: a + marker + b, draw_text, st.sampled_from(MARKERS), draw_text)


ANY_TEXT = st.text(st.characters(codec=None, exclude_categories=()), max_size=200)


ANY_LOG = st.lists(st.one_of(ANY_TEXT, with_marker(ANY_TEXT)), min_size=1, max_size=8)


@family_params
@SEVERAL_LOGS
@given(logs=st.lists(ANY_LOG, min_size=1, max_size=LOGS_PER_EXAMPLE))
def test_arbitrary_text_never_raises(family, logs, generated):
    generated[f"arbitrary text lines ({family.name})"] += sum(map(len, logs))
    feed_logs(family, [[text.replace("\n", " ") for text in texts] for texts in logs])


@family_params
def test_real_lines_cut_at_every_offset_never_raise(family, marker_lines, generated):
    """Head and tail of every real marker line at every cut point, then the frames build."""
    logs = [
        [piece for offset in range(len(line) + 1) for piece in (line[:offset], line[offset:])]
        for line in marker_lines
    ]
    build_frames(read_lines([family], *logs))
    pieces = sum(len(log) for log in logs)
    generated[f"real lines cut at every offset ({family.name})"] += pieces
    assert pieces > 0


@family_params
@SEVERAL_LOGS
@given(data=st.data())
def test_real_lines_with_hostile_numbers_never_raise(family, data, marker_lines, generated):
    """Each real line holding one of the family's markers (a line without one never reaches its code), its
    numbers replaced, read as a log of its own."""
    own = [line for line in marker_lines if any(marker in line for marker in family.markers)]
    lines = data.draw(
        st.lists(st.sampled_from(own), min_size=1, max_size=LOGS_PER_EXAMPLE), label="real lines"
    )
    numbers = st.one_of(
        st.sampled_from(HOSTILE_NUMBERS),
        st.integers().map(str),
        st.floats(allow_nan=True, allow_infinity=True).map(repr),
    )
    hostile = [NUMBER.sub(lambda _: data.draw(numbers), line) for line in lines]
    generated[f"real lines with hostile numbers ({family.name})"] += len(hostile)
    feed_logs(family, [[line] for line in hostile])


@SEVERAL_LOGS
@given(data=st.data())
def test_glued_ranks_keep_every_iteration(data, generated):
    """Megatron's real iteration lines of many ranks glued into one physical line (launcher tags
    between them, repeats allowed) give back each step with its elapsed time; several such lines, each
    a log of its own, in one read."""
    lines = [line for line in MEGATRON_LOG.read_text().splitlines() if "elapsed time per iteration" in line]
    ranks_lines = st.lists(st.sampled_from(lines), min_size=1, max_size=12)
    logs = data.draw(st.lists(ranks_lines, min_size=1, max_size=LOGS_PER_EXAMPLE), label="ranks' lines")
    glued = []
    for chosen in logs:
        tags = data.draw(st.lists(st.sampled_from(GLUE_TAGS), min_size=len(chosen), max_size=len(chosen)))
        glued.append("".join(tag + line for tag, line in zip(tags, chosen, strict=True)))
    generated["glued lines of many ranks"] += len(glued)
    results = read_lines([megatron.FAMILY], *[[line] for line in glued])
    build_frames(results)
    for chosen, result in zip(logs, results, strict=True):
        expected = {int(line.split("/")[0].split()[-1]) for line in chosen}
        assert {step: row["elapsed_ms"] for step, row in result.run.iterations.items()} == {
            step: MEGATRON_ELAPSED_MS[step] for step in expected
        }


@SEVERAL_LOGS
@given(texts=st.lists(ANY_TEXT, min_size=1, max_size=LOGS_PER_EXAMPLE))
def test_any_line_is_read_by_every_family_at_once(texts, generated):
    generated["arbitrary lines read by every family"] += len(texts)
    build_frames(read_lines(FAMILIES, *[[text.replace("\n", " ")] for text in texts]))


#: one physical line of 100k characters of each shape (a tensor dump, a progress bar gone wrong,
#: a corrupted block): every family must read it in time linear in its length.
LONG = 100_000
LONG_LINES = {
    "digits": "elapsed time per iteration (ms): " + "1" * LONG,
    "pipes": " iteration 1/ 10 |" + " a: 1 |" * (LONG // 7),
    "dots": "  hidden_size " + "." * LONG + " x",
    "spaces": "elapsed time per iteration" + " " * LONG + "!",
    "key-values": "step=1, skipped=0, " + "a=1, " * (LONG // 5),
    "dict": "{" + "'loss': 1, " * (LONG // 11) + "}",
    "mib": "| " + "1MiB / " * (LONG // 7),
    "exception": "A" * LONG + "Error: x",
    "tags": "[default1]:" * (LONG // 11),
}
#: far above the ~0.5 s these take, far below the minute the digits line once took (quadratic regex).
LONG_LINE_SECONDS = 10.0


@pytest.mark.parametrize("shape", list(LONG_LINES))
def test_a_long_line_is_read_in_linear_time(shape, generated):
    started = time.perf_counter()
    # its records read by every family, and inside each family's blocks
    openers = [
        "------------------------ arguments ------------------------",
        "TrainingArguments(",
        "Traceback (most recent call last):",
    ]
    read_lines(FAMILIES, [*openers, LONG_LINES[shape]])
    generated["100k-character lines"] += 1
    assert time.perf_counter() - started < LONG_LINE_SECONDS
