"""``logstat table --update`` over hostile markdown: it never raises, and it changes nothing but
TFlops cells (every other byte of the user's document is kept)."""

from __future__ import annotations

import os
import re

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from logstat.analytics.update import update_tflops_text

#: examples per property; LOGSTAT_RELIABILITY_SCALE=10 searches ten times longer (make test uses 1).
EXAMPLES = 150 * int(os.environ.get("LOGSTAT_RELIABILITY_SCALE", "1"))
PROPERTY = settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
HEADER = "| GPUs | Size | DP | PP | PP Chunks | Mic-BS | Glob-BS | Throughput | TFlops | Notes |"
DELIMITER = "| ---: | ---: | -: | -: | --------: | -----: | ------: | ---------: | -----: | ----- |"
#: markdown cells are separated by pipes that are not escaped (``\|`` is a pipe inside a cell).
CELL_SEPARATOR = re.compile(r"(?<!\\)\|")
TFLOPS = CELL_SEPARATOR.split(HEADER).index(" TFlops ")
#: cells of the seed's tables (seeds/001) and hostile ones: huge, tiny, negative, nan, inf, units.
CELLS = st.one_of(
    st.sampled_from(
        ["64", "52B", "1", "16", "256", "4", "1024", "129s", "52.8", "fail", "OOM", "", "0", "0s"]
    ),
    st.sampled_from(["9" * 400, "1e400", "-64", "nan", "inf", "1e-300s", "0.0000001s", "52." + "0" * 300]),
    st.sampled_from(["1.5T", "200M", "7B", "∞", "12,5", " 1 2 ", "`code`", "**52.8**", "\\|"]),
    st.text(st.characters(exclude_characters="|\n\r"), max_size=8),
)


#: a real row of the seed's 52B table (seeds/001): every hostile row is this one with some cells replaced.
SEED_ROW = ["64", "52B", "1", "16", "256", "4", "1024", "129s", "52.8", "meg_gpt2_perf_n16.out"]


@st.composite
def rows(draw) -> list[str]:
    row = list(SEED_ROW)
    for index in draw(st.lists(st.integers(0, len(row) - 1), max_size=3)):
        row[index] = draw(CELLS)
    return row


@st.composite
def documents(draw) -> str:
    rows_drawn = draw(st.lists(rows(), max_size=6))
    lines = ["# GPT-2", "", HEADER, DELIMITER] + ["| " + " | ".join(row) + " |" for row in rows_drawn]
    ending = draw(st.sampled_from(["\n", "\r\n"]))
    return ending.join(lines) + ending


def _document(*rows: list[str]) -> str:
    return "\n".join([HEADER, DELIMITER] + ["| " + " | ".join(row) + " |" for row in rows]) + "\n"


HUGE_GPUS = ["9" * 400, *SEED_ROW[1:]]
HUGE_BATCH = [*SEED_ROW[:6], "9" * 400, *SEED_ROW[7:]]


@PROPERTY
@given(text=documents(), checkpointing=st.booleans())
# a 400-digit GPU count or batch once made int(float('inf')) raise (found by this property)
@example(text=_document(HUGE_GPUS), checkpointing=True)
@example(text=_document(HUGE_BATCH), checkpointing=False)
def test_update_never_raises_and_changes_only_tflops_cells(text, checkpointing, generated):
    generated["markdown tables for --update"] += 1
    result = update_tflops_text(text, checkpointing=checkpointing)
    before, after = text.split("\n"), result.text.split("\n")  # not splitlines(): \x1e is no line end here
    assert len(before) == len(after)
    for old, new in zip(before, after, strict=True):
        old_cells, new_cells = CELL_SEPARATOR.split(old), CELL_SEPARATOR.split(new)
        assert len(old_cells) == len(new_cells)
        assert [c for i, c in enumerate(old_cells) if i != TFLOPS] == [
            c for i, c in enumerate(new_cells) if i != TFLOPS
        ]
    assert len(result.changed) + len(result.skipped) <= result.rows
