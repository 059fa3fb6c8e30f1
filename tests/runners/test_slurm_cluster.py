"""The test cluster itself: its slurm.conf, and a hand-written sbatch script run on it for real."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from .conftest import slurm_cluster_module as sc


def test_render_conf_puts_every_file_under_the_cluster_directory(tmp_path: Path) -> None:
    node = "NodeName=n1 CPUs=2 Boards=1 SocketsPerBoard=1 CoresPerSocket=2 ThreadsPerCore=1 RealMemory=1000"
    conf = sc.render_conf(tmp_path, node, ctld_port=1234, slurmd_port=1235)
    settings = dict(
        line.split("=", 1)
        for line in conf.splitlines()
        if line and not line.startswith(("#", "Node", "Part"))
    )
    for key in (
        "StateSaveLocation",
        "SlurmdSpoolDir",
        "SlurmctldPidFile",
        "SlurmdPidFile",
        "SlurmctldLogFile",
    ):
        assert settings[key].startswith(str(tmp_path)), key
    assert settings["AuthInfo"] == f"socket={tmp_path}/munge.socket"
    assert settings["SlurmctldHost"] == "n1(127.0.0.1)"
    assert (settings["SlurmctldPort"], settings["SlurmdPort"]) == ("1234", "1235")
    assert settings["ProctrackType"] == "proctrack/linuxproc"
    assert settings["TaskPlugin"] == "task/none"
    assert settings["AccountingStorageType"] == "accounting_storage/none"
    assert settings["MailProg"] == "/bin/true"
    assert settings["ReturnToService"] == "2"
    assert f"{node} NodeAddr=127.0.0.1 State=UNKNOWN" in conf.splitlines()


def test_a_daemon_without_the_marker_in_its_command_line_is_foreign(tmp_path: Path) -> None:
    # A process named slurmd (a copy of `sleep`) whose command line lacks the marker: must be reported.
    fake = tmp_path / "slurmd"
    fake.symlink_to("/bin/sleep")
    process = subprocess.Popen([str(fake), "30"])
    try:
        deadline = time.monotonic() + 5
        found = None
        while found is None and time.monotonic() < deadline:
            found = sc.foreign_slurm()
            time.sleep(0.05)
        assert found is not None and f"pid {process.pid}" in found
    finally:
        process.kill()
        process.wait()


@pytest.mark.slow
@pytest.mark.slurm
def test_hand_written_sbatch_script_runs_on_the_cluster(slurm_cluster, tmp_path: Path) -> None:
    tmp_path.chmod(0o755)
    script = tmp_path / "hello.sbatch"
    script.write_text(
        "#!/bin/bash\n"
        "#SBATCH --job-name=hello\n"
        "#SBATCH --nodes=1\n"
        "#SBATCH --ntasks-per-node=1\n"
        "#SBATCH --time=1\n"
        f"#SBATCH --output={tmp_path}/%x-%j.out\n"
        'srun bash -c \'echo "rank=$SLURM_PROCID master=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)"\'\n'
    )
    env = slurm_cluster.env()
    submitted = subprocess.run(["sbatch", "--parsable", str(script)], capture_output=True, text=True, env=env)
    assert submitted.returncode == 0, submitted.stderr
    job_id = submitted.stdout.strip().split(";")[0]
    assert job_id.isdigit()
    deadline = time.monotonic() + 60
    state = ""
    while time.monotonic() < deadline:
        shown = subprocess.run(
            ["scontrol", "show", "job", job_id], capture_output=True, text=True, env=env
        ).stdout
        state = shown.split("JobState=")[1].split()[0]
        if state not in ("PENDING", "RUNNING", "CONFIGURING", "COMPLETING"):
            break
        time.sleep(0.5)
    assert state == "COMPLETED"
    assert "ExitCode=0:0" in shown
    assert (tmp_path / f"hello-{job_id}.out").read_text() == f"rank=0 master={slurm_cluster.node}\n"


def test_missing_programs_without_apt_get_is_a_skip_reason_not_a_crash(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # an empty PATH: no Slurm, no apt-get
    assert sc.missing_programs() == list(sc.REQUIRED_PROGRAMS)
    with pytest.raises(
        sc.ClusterUnavailable, match=r"programs missing \(munged, mungekey, .*\) and no apt-get"
    ):
        sc.ensure_packages()


@pytest.mark.slow
@pytest.mark.slurm
def test_a_session_killed_with_sigkill_has_its_daemons_stopped_by_the_next(slurm_cluster) -> None:
    # A second cluster beside this session's one, owned by a process that dies without cleaning up.
    child_code = (
        "import sys, time\n"
        f"sys.path.insert(0, {str(Path(sc.__file__).parent)!r})\n"
        "import slurm_cluster\n"
        "with slurm_cluster.session_cluster(reuse=False) as cluster:\n"
        "    print(cluster.directory, flush=True)\n"
        "    time.sleep(600)\n"
    )
    child = subprocess.Popen([sys.executable, "-c", child_code], stdout=subprocess.PIPE, text=True)
    directory = Path(child.stdout.readline().strip())
    daemons = sc._daemons_in(directory)
    assert sorted(daemons) == sorted(sc.DAEMON_ORDER)
    assert (
        subprocess.run(
            ["sinfo", "-h", "-o", "%T"],
            env={**os.environ, "SLURM_CONF": str(directory / "slurm.conf")},
            capture_output=True,
            text=True,
        ).stdout.strip()
        == "idle"
    )
    child.kill()
    child.wait()
    child.stdout.close()

    stopped = sc.stop_abandoned()

    assert sorted(stopped) == sorted(f"{name} (pid {pid})" for name, pid in daemons.items())
    assert not directory.exists()
    assert sc.running(slurm_cluster.directory) is not None  # this session's cluster (owner alive) untouched
