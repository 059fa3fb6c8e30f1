"""Shared fixtures: paths to the bundled fixtures and to the real logs of shared/."""

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "fixtures"
SHARED = ROOT.parent / "shared"
SHARED_LOGS = SHARED / "logs" / "bigscience"


@pytest.fixture(scope="session")
def shared_logs() -> Path:
    """The four real Slurm logs of shared/logs/bigscience (skip with a reason when absent)."""
    if not SHARED_LOGS.is_dir():
        pytest.skip(f"real logs not found at {SHARED_LOGS}")
    return SHARED_LOGS
