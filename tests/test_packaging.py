"""The card's top-level folders ship under the single `logstat` namespace, nowhere else."""

import subprocess
import sys
import venv
import zipfile
from pathlib import Path

import pytest

from logstat.cli import COMMANDS

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "-q",
            "--no-deps",
            "--no-build-isolation",
            "-w",
            str(out),
            str(ROOT),
        ],
        check=True,
        capture_output=True,
        timeout=300,
    )
    (built,) = out.glob("logstat-*.whl")
    return built


def test_wheel_holds_only_the_logstat_package(wheel: Path) -> None:
    names = zipfile.ZipFile(wheel).namelist()
    top_level = {name.split("/")[0] for name in names}
    assert top_level == {"logstat", next(t for t in top_level if t.endswith(".dist-info"))}
    for layer in ("parsers", "analytics", "runners"):
        assert f"logstat/{layer}/__init__.py" in names
    assert "logstat/runners/specs/gpt2-52b-megatron-ds.toml" in names


@pytest.mark.slow
def test_wheel_in_a_fresh_venv_imports_through_logstat_only(wheel: Path, tmp_path: Path) -> None:
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True).create(env_dir)
    python = env_dir / "bin" / "python"
    subprocess.run([python, "-m", "pip", "install", "-q", "--no-deps", str(wheel)], check=True, timeout=300)
    probe = (
        "import importlib.util as u, logstat.analytics.formulas as f;"
        "print(f.gpt2_params(hidden=8192, layers=64, vocab=50257, seq_len=1024));"
        "print([n for n in ('parsers', 'analytics', 'runners') if u.find_spec(n)])"
    )
    result = subprocess.run([python, "-c", probe], capture_output=True, text=True, check=True, cwd=tmp_path)
    assert result.stdout.split("\n")[:2] == ["51966533632", "[]"]


def test_every_command_is_documented_in_the_readme() -> None:
    readme = (ROOT / "README.md").read_text()
    missing = [name for name in COMMANDS if f"logstat {name}" not in readme]
    assert not missing, f"commands without a README example: {missing}"
