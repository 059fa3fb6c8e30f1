"""The single-node Slurm cluster fixture (tests/slurm_cluster.py), for tests marked ``slurm``."""

from __future__ import annotations

import importlib.util
import shutil
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
    """A running one-node Slurm cluster (``cluster.env()`` is the environment that reaches it).

    Reuses the cluster of ``make slurm-up`` when it is up, else starts one (installing the Debian
    packages if needed) and stops its daemons at the end. Skips, with the reason, when Slurm cannot
    be installed or a Slurm not started by us is running.
    """
    try:
        with slurm_cluster_module.session_cluster() as cluster:
            yield cluster
    except slurm_cluster_module.ClusterUnavailable as exc:
        pytest.skip(f"no Slurm cluster: {exc}")


@pytest.fixture(scope="session")
def shellcheck() -> str:
    """The path of shellcheck, installed from Debian's package when it is missing (as the Slurm
    packages are); skips with the reason where it cannot be installed (not root, no apt-get)."""
    try:
        slurm_cluster_module.ensure_packages(programs=("shellcheck",), packages=("shellcheck",))
    except slurm_cluster_module.ClusterUnavailable as exc:
        pytest.skip(f"no shellcheck: {exc}")
    return shutil.which("shellcheck")


@pytest.fixture(autouse=True)
def _slurm_conf_for_slurm_tests(request, monkeypatch) -> None:
    """Tests marked ``slurm`` get the cluster and ``SLURM_CONF`` pointing at it, for their duration
    only: other tests (e.g. ones that pick a backend by whether ``sinfo`` answers) never see it."""
    if request.node.get_closest_marker("slurm") is not None:
        cluster = request.getfixturevalue("slurm_cluster")
        monkeypatch.setenv("SLURM_CONF", str(cluster.conf))
