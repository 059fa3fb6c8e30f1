"""Shared fixtures: paths to the bundled fixtures, the real logs and the seed tables document."""

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "fixtures"
#: the four unmodified 2021 BigScience logs (fixtures/bigscience/README.md says where they come from)
REAL_LOGS = FIXTURES / "bigscience"
#: the seed's GPT-2 experiments document, whose tables `logstat table` regenerates
SEED_DOC = FIXTURES / "seeds" / "001_gpt2_experiments_tables.md"


@pytest.fixture(scope="session")
def real_logs() -> Path:
    """The directory of the four real BigScience Slurm logs."""
    assert REAL_LOGS.is_dir(), f"the bundled real logs are missing: {REAL_LOGS}"
    return REAL_LOGS
