"""`logstat table` reproduces seed 001's "HF + Deepspeed Zero 3 + Full Offload / Max model size" table from
logs in the format of the 2021 BigScience HF Trainer + DeepSpeed runs (constructed, see
fixtures/hf_trainer/README.md: the override shape, the base gpt2 config printed after it, the final dicts).
"""

import subprocess
import sys
from pathlib import Path

import pytest

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "hf_trainer"
LOGS = [
    FIXTURES / "constructed_hf_ds_gpt2_max_size_n4_25b.out",
    FIXTURES / "constructed_hf_ds_gpt2_max_size_n8_52b.out",
    FIXTURES / "constructed_hf_ds_gpt2_max_size_n16_97b.out",
]
#: the seed's table, typed in: | GPUs | Size | Mic-BS | Glob-BS | Throughput | TFlops |
SEED_ROWS = [
    (16, 25, 4, 64, 58.72, 14.0),
    (32, 52, 4, 128, 114.56, 14.9),
    (64, 97, 4, 256, 222.72, 14.3),
]
#: the seed's sizes name the MSIZE presets, which count the transformer layers (12*l*h^2: 24.7, 51.5,
#: 97.4e9); logstat's Size adds the embeddings (DESIGN.md's formula: 25.0, 52.0, 98.0e9).
SIZE_TOLERANCE = 0.015


def _table_rows() -> list[dict[str, str]]:
    result = subprocess.run(
        [sys.executable, "-c", "from logstat.cli import main; main()", "table", *map(str, LOGS)],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == "### HF Trainer + DeepSpeed"  # the three runs are this stack's, and only it
    table = [line for line in lines if line.startswith("|")]
    headers = [cell.strip() for cell in table[0].strip("|").split("|")]
    return [
        dict(zip(headers, (c.strip() for c in line.strip("|").split("|")), strict=True)) for line in table[2:]
    ]


def test_table_reproduces_the_seeds_hf_max_model_size_rows():
    rows = _table_rows()
    assert len(rows) == len(SEED_ROWS)
    for row, (gpus, size, micro, glob, throughput, tflops) in zip(rows, SEED_ROWS, strict=True):
        assert (int(row["GPUs"]), int(row["Mic-BS"]), int(row["Glob-BS"])) == (gpus, micro, glob)
        assert row["Size"].endswith("B")
        assert float(row["Size"][:-1]) == pytest.approx(size, rel=SIZE_TOLERANCE)
        assert row["Throughput"].endswith("s")
        assert float(row["Throughput"][:-1]) == pytest.approx(throughput, rel=0.025)
        assert float(row["TFlops"]) == pytest.approx(tflops, rel=0.04)
        # ZeRO-3 with optimizer and parameters offloaded to the CPU, as the section's title says
        assert (row["Zero"], row["Opt Offl"], row["Par Offl"]) == ("3", "Y", "Y")
