"""The single-node Slurm cluster fixture (tests/slurm_cluster.py), for tests marked ``slurm``."""

from __future__ import annotations

import importlib.util
import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest


def _load_slurm_cluster():
    # pytest runs with --import-mode=importlib, so tests/ is not on sys.path: load the helper by path.
    name = "logstat_tests_slurm_cluster"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(
        name, Path(__file__).resolve().parent.parent / "slurm_cluster.py"
    )
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up while the class is built
    spec.loader.exec_module(module)
    return module


slurm_cluster_module = _load_slurm_cluster()


@pytest.fixture(scope="session")
def slurm_cluster() -> Iterator:
    """A running one-node Slurm cluster; ``SLURM_CONF`` points at it for the whole session.

    Reuses the cluster of ``make slurm-up`` when it is up, else starts one (installing the Debian
    packages if needed) and stops its daemons at the end. Skips, with the reason, when Slurm cannot
    be installed or a Slurm not started by us is running.
    """
    try:
        with slurm_cluster_module.session_cluster() as cluster:
            previous = os.environ.get("SLURM_CONF")
            os.environ["SLURM_CONF"] = str(cluster.conf)
            try:
                yield cluster
            finally:
                if previous is None:
                    os.environ.pop("SLURM_CONF", None)
                else:
                    os.environ["SLURM_CONF"] = previous
    except slurm_cluster_module.ClusterUnavailable as exc:
        pytest.skip(f"no Slurm cluster: {exc}")
