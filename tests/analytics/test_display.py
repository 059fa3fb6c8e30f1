"""TFLOPs and MFU read the same in parse's table, the markdown tables and the estimate."""

import math
import re

import polars as pl
import pytest
from logstat.analytics.display import mfu_text, number_text, tflops_text
from logstat.analytics.tables import render_tables
from logstat.parsers.schema import RUNS_SCHEMA, SUMMARY_SCHEMA

from logstat.formats import runs_text


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (52.835, "52.8"),
        (374.46, "374.5"),
        (1.0, "1.0"),
        (0.0123, "0.0123"),  # three significant digits below 1, not "0.0"
        (0.12345, "0.123"),
        (0.000456789, "0.000457"),
        (0.99951, "1.0"),  # rounds up to 1: written as the numbers from 1 up
        (0.0, "0.0"),
        (math.nan, None),
        (math.inf, None),
        (None, None),
        (1e300, "1e+300"),
    ],
)
def test_numbers_keep_three_significant_digits_below_one(value, text):
    assert number_text(value) == text
    assert tflops_text(value) == text


def test_mfu_is_a_percent_with_one_decimal():
    assert mfu_text(0.3789) == "37.9%"
    assert mfu_text(0.000123) == "0.0123%"
    assert mfu_text(None) is None


# A 2-GPU run of a tiny model: 116,000 parameters, seq 32, global batch 16, 0.239 s per step:
# 116e-6 * 8 * 32 * 16 / (0.239 * 2 * 1e3) = 0.000994 TFLOPs; MFU against a 312 TFLOPs peak = 3.19e-6
TINY = {
    "path": "/runs/tiny/train.log",
    "family": "megatron",
    "status": "ok",
    "gpus": 2,
    "dp": 2,
    "micro_batch_size": 4,
    "global_batch_size": 16,
    "seq_len": 32,
    "activation_checkpointing": True,
    "iterations": 5,
    "model_size_b": 116e-6,
    "sec_per_iter": 0.239,
    "sec_per_iter_source": "median of 4 logged step times after the first 1",
    "tflops_per_gpu": 116e-6 * 8 * 32 * 16 / (0.239 * 2e3),
    "tflops_per_gpu_megatron": 0.0012345,
    "mfu": 116e-6 * 8 * 32 * 16 / (0.239 * 2e3) / 312,
}


def _frame(**fields) -> pl.DataFrame:
    return pl.DataFrame([{**TINY, **fields}], schema={**RUNS_SCHEMA, **SUMMARY_SCHEMA})


def test_markdown_tables_show_tiny_tflops_and_mfu_in_the_shared_format():
    text = render_tables(_frame(), columns=("GPUs", "Size", "TFlops", "TFlops Megatron", "MFU"))
    assert "|    2 | 116K | 0.000994 |         0.00123 | 0.000319% |" in text


def test_parse_table_shows_the_same_tflops_and_mfu():
    text = runs_text(_frame(mfu=0.3789, tflops_per_gpu=0.0123), tflops=True, markdown=False, warmup=1)
    header, _, row = text.split("\n")[:3]
    cells = dict(zip(re.split(r"  +", header.strip()), re.split(r"  +", row.strip()), strict=True))
    assert cells["TFLOPs/GPU"] == "0.0123"
    assert cells["MFU"] == "37.9%"
