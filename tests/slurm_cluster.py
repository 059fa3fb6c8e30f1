"""A real single-node Slurm cluster on this machine, for the test suite and for people.

    python tests/slurm_cluster.py up       # install slurm-wlm + munge if missing, start, wait for idle
    python tests/slurm_cluster.py status   # daemons, sinfo, the SLURM_CONF line to export
    python tests/slurm_cluster.py down     # cancel its jobs, stop the daemons it started (by PID)

Everything lives in one directory (``/tmp/logstat-slurm`` for ``up``/``down``, override with
``LOGSTAT_SLURM_DIR``; a fresh ``/tmp/logstat-slurm-XXXX`` per pytest session): the munge key and
socket, ``slurm.conf``, state, spool, pid and log files. Nothing under ``/etc`` is written: the
Slurm commands find the cluster through ``SLURM_CONF=<dir>/slurm.conf``, which the pytest fixtures
set for the tests marked ``slurm`` and ``up`` prints for you to export. Ports are picked free, so
the cluster runs beside another copy of itself. A Slurm daemon that this module did not start is
never touched: the fixture skips, ``up`` refuses, both naming the process. The daemons of a test
session killed with -9 are stopped by the next session.

Only the standard library is used: ``make slurm-up`` works before the venv exists.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path

DEFAULT_DIR = Path(os.environ.get("LOGSTAT_SLURM_DIR", "/tmp/logstat-slurm"))
#: Every directory this module creates has this in its name; a daemon whose command line holds
#: it was started here (by this session or another), any other Slurm daemon is foreign.
MARKER = "logstat-slurm"
PACKAGES = ("slurm-wlm", "munge")
REQUIRED_PROGRAMS = ("munged", "mungekey", "slurmctld", "slurmd", "sbatch", "squeue", "scontrol", "sinfo")
DAEMON_ORDER = ("munged", "slurmctld", "slurmd")
PARTITION = "debug"
IDLE_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 10.0
INSTALL_LOCK = Path("/tmp/logstat-slurm.install.lock")


class ClusterUnavailable(Exception):
    """Slurm cannot be had on this machine (packages not installable, foreign Slurm running):
    tests that need it are skipped with this message."""


class ClusterError(RuntimeError):
    """The packages are there but the cluster did not come up: a real failure, not a skip."""


@dataclass(frozen=True, kw_only=True)
class Cluster:
    """A running single-node cluster."""

    directory: Path
    """Where its conf, key, socket, state, spool, pids and logs live."""
    node: str
    """The node name (this host's short name, as ``slurmd -C`` reports it)."""
    started_here: bool
    """True if this process started the daemons (and so must stop them)."""

    @property
    def conf(self) -> Path:
        return self.directory / "slurm.conf"

    @property
    def partition(self) -> str:
        return PARTITION

    def env(self) -> dict[str, str]:
        """The environment for Slurm commands talking to this cluster."""
        return {**os.environ, "SLURM_CONF": str(self.conf)}


def _run(
    args: list[str], *, env: dict[str, str] | None = None, timeout: float = 30.0
) -> subprocess.CompletedProcess:
    return subprocess.run(
        args, stdin=subprocess.DEVNULL, capture_output=True, text=True, env=env, timeout=timeout, check=False
    )


def missing_programs(programs: tuple[str, ...] = REQUIRED_PROGRAMS) -> list[str]:
    return [name for name in programs if shutil.which(name) is None]


def ensure_packages(
    programs: tuple[str, ...] = REQUIRED_PROGRAMS, packages: tuple[str, ...] = PACKAGES
) -> None:
    """Install Debian ``packages`` (slurm-wlm and munge by default) when one of ``programs`` is
    missing (root + apt-get only); ClusterUnavailable says why it could not."""
    if not missing_programs(programs):
        return
    if shutil.which("apt-get") is None:
        raise ClusterUnavailable(f"programs missing ({', '.join(missing_programs(programs))}) and no apt-get")
    if os.geteuid() != 0:
        raise ClusterUnavailable(
            f"programs missing ({', '.join(missing_programs(programs))}); apt-get needs root"
        )
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    with _locked(INSTALL_LOCK):
        if not missing_programs(programs):  # another session installed them while we waited
            return
        wait_for_dpkg_lock = ["-o", "DPkg::Lock::Timeout=300"]  # another apt-get may be running
        for args in (
            ["apt-get", *wait_for_dpkg_lock, "update"],
            ["apt-get", *wait_for_dpkg_lock, "install", "-y", "--no-install-recommends", *packages],
        ):
            print(f"slurm_cluster: {' '.join(args)}", file=sys.stderr)
            result = _run(args, env=env, timeout=900)
            if result.returncode != 0:
                tail = (result.stderr or result.stdout).strip().splitlines()[-3:]
                raise ClusterUnavailable(f"`{' '.join(args)}` failed: {' / '.join(tail)}")
    if missing_programs(programs):
        raise ClusterUnavailable(
            f"still missing after installing {packages}: {', '.join(missing_programs(programs))}"
        )


@contextmanager
def _locked(path: Path) -> Iterator[None]:
    with open(path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return ""


def foreign_slurm() -> str | None:
    """A running slurmctld/slurmd not started by this module, described, or None."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            name = (entry / "comm").read_text().strip()
        except OSError:
            continue
        if name in ("slurmctld", "slurmd"):
            cmdline = _cmdline(int(entry.name))
            ours = MARKER in cmdline or f"{DEFAULT_DIR}/" in cmdline
            if cmdline and not ours:  # an empty command line is a zombie: already stopped
                return f"{name} (pid {entry.name}: {cmdline or '?'})"
    return None


def node_line() -> tuple[str, str]:
    """(node name, the NodeName=... line of ``slurmd -C``) describing this machine."""
    result = _run(["slurmd", "-C"])
    for line in result.stdout.splitlines():
        if line.startswith("NodeName="):
            return line.split()[0].removeprefix("NodeName="), line.strip()
    raise ClusterError(f"`slurmd -C` printed no NodeName line: {result.stdout!r} {result.stderr!r}")


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def render_conf(directory: Path, node_description: str, *, ctld_port: int, slurmd_port: int) -> str:
    """slurm.conf of a one-node cluster whose every file is under ``directory``."""
    node = node_description.split()[0].removeprefix("NodeName=")
    return f"""\
# Written by logstat tests/slurm_cluster.py; the cluster lives in {directory}.
ClusterName=logstat
SlurmctldHost={node}(127.0.0.1)
SlurmUser=root
SlurmdUser=root
SlurmctldPort={ctld_port}
SlurmdPort={slurmd_port}
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={directory}/munge.socket
StateSaveLocation={directory}/state
SlurmdSpoolDir={directory}/spool
SlurmctldPidFile={directory}/slurmctld.pid
SlurmdPidFile={directory}/slurmd.pid
SlurmctldLogFile={directory}/slurmctld.log
SlurmdLogFile={directory}/slurmd.log
# No cgroups and no systemd here: track processes by parent PID, bind nothing.
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
# No slurmdbd: no accounting, so finished jobs are read with `scontrol show job`.
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
MailProg=/bin/true
ReturnToService=2
# Keep finished jobs visible to `scontrol show job` for a while, not the default 5 minutes.
MinJobAge=120
# Time-limited and cancelled jobs get SIGKILL 5 s after SIGTERM (default 30 s).
KillWait=5
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
{node_description} NodeAddr=127.0.0.1 State=UNKNOWN
# Jobs may share cores, so a sleeping test job does not hold back a training one.
PartitionName={PARTITION} Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:4
"""


def _pids_file(directory: Path) -> Path:
    return directory / "daemons.json"


def _read_pids(directory: Path) -> dict[str, int]:
    try:
        return {name: int(pid) for name, pid in json.loads(_pids_file(directory).read_text()).items()}
    except (OSError, ValueError):
        return {}


def _ours_alive(directory: Path, pid: int) -> bool:
    """The process ``pid`` is alive and is a daemon of the cluster in ``directory`` (not a reused PID).

    Every daemon's command line names a file inside the directory; the trailing slash keeps
    ``/tmp/logstat-slurm`` from matching ``/tmp/logstat-slurm-abc/`` (a zombie's command line is empty).
    """
    return f"{directory}/" in _cmdline(pid)


def _daemons_in(directory: Path) -> dict[str, int]:
    """Daemons of the cluster in ``directory``: the recorded PIDs, plus any whose record was lost
    (e.g. a start interrupted between spawn and record)."""
    found = {name: pid for name, pid in _read_pids(directory).items() if _ours_alive(directory, pid)}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) not in found.values():
            try:
                name = (entry / "comm").read_text().strip()
            except OSError:
                continue
            if name in DAEMON_ORDER and name not in found and _ours_alive(directory, int(entry.name)):
                found[name] = int(entry.name)
    return found


def running(directory: Path = DEFAULT_DIR) -> Cluster | None:
    """The cluster in ``directory`` if all its daemons are alive and the controller answers."""
    pids = _read_pids(directory)
    if set(pids) != set(DAEMON_ORDER) or not all(_ours_alive(directory, pid) for pid in pids.values()):
        return None
    cluster = Cluster(directory=directory, node=_conf_node(directory), started_here=False)
    if _run(["scontrol", "ping"], env=cluster.env(), timeout=10).returncode != 0:
        return None
    return cluster


def _conf_node(directory: Path) -> str:
    for line in (directory / "slurm.conf").read_text().splitlines():
        if line.startswith("NodeName="):
            return line.split()[0].removeprefix("NodeName=")
    return "?"


def _spawn(directory: Path, name: str, args: list[str]) -> subprocess.Popen:
    # The daemon writes to its own copy of the descriptor: the parent's can be closed at once.
    with open(directory / f"{name}.out", "ab") as log:
        return subprocess.Popen(
            args, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )


def start(directory: Path) -> Cluster:
    """Start munged, slurmctld and slurmd for a cluster in ``directory``; return once the node is idle."""
    foreign = foreign_slurm()
    if foreign:
        raise ClusterUnavailable(f"a Slurm not started by tests/slurm_cluster.py is running: {foreign}")
    ensure_packages()
    directory.mkdir(parents=True, exist_ok=True)
    directory.chmod(0o755)  # munged refuses a socket directory that others cannot traverse
    for sub in ("state", "spool"):
        (directory / sub).mkdir(exist_ok=True)
    key = directory / "munge.key"
    if not key.exists():
        result = _run(["mungekey", "--create", f"--keyfile={key}"])
        if result.returncode != 0:
            raise ClusterError(f"mungekey failed: {result.stderr.strip()}")
    node, description = node_line()
    conf = directory / "slurm.conf"
    conf.write_text(render_conf(directory, description, ctld_port=_free_port(), slurmd_port=_free_port()))
    commands = {
        "munged": [
            "munged", "--foreground", f"--socket={directory}/munge.socket", f"--key-file={key}",
            f"--pid-file={directory}/munged.pid", f"--log-file={directory}/munged.log",
            f"--seed-file={directory}/munged.seed",
        ],
        "slurmctld": ["slurmctld", "-D", "-i", "-f", str(conf)],
        "slurmd": ["slurmd", "-D", "-f", str(conf)],
    }  # fmt: skip
    processes: dict[str, subprocess.Popen] = {}
    cluster = Cluster(directory=directory, node=node, started_here=True)
    (directory / "munge.socket").unlink(missing_ok=True)  # a stale socket would look like a live munged
    try:
        for name in DAEMON_ORDER:
            processes[name] = _spawn(directory, name, commands[name])
            _pids_file(directory).write_text(json.dumps({n: p.pid for n, p in processes.items()}))
            if name == "munged":
                _wait_for(
                    lambda: (directory / "munge.socket").exists(), 10, "munged socket", processes, directory
                )
        _wait_for(
            lambda: node_state(cluster) == "idle", IDLE_TIMEOUT_S, "node idle in sinfo", processes, directory
        )
    except BaseException:
        stop(directory)
        raise
    return cluster


def node_state(cluster: Cluster) -> str:
    result = _run(["sinfo", "-h", "-N", "-o", "%T"], env=cluster.env(), timeout=10)
    return result.stdout.strip() if result.returncode == 0 else ""


def _wait_for(
    condition: Callable[[], bool],
    timeout_s: float,
    what: str,
    processes: dict[str, subprocess.Popen],
    directory: Path,
) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return
        for name, process in processes.items():
            if process.poll() is not None:
                raise ClusterError(
                    f"{name} exited ({process.returncode}) while waiting for {what}: {_log_tail(directory, name)}"
                )
        time.sleep(0.2)
    last = list(processes)[-1]
    raise ClusterError(f"no {what} after {timeout_s:.0f} s: {_log_tail(directory, last)}")


def _log_tail(directory: Path, name: str) -> str:
    lines: list[str] = []
    for path in (directory / f"{name}.out", directory / f"{name}.log"):
        if path.exists():
            lines += path.read_text(errors="replace").splitlines()[-5:]
    return " / ".join(lines) or f"(no log in {directory})"


def cancel_jobs(cluster: Cluster) -> list[str]:
    """Cancel every job of this cluster (only this one: the commands use its SLURM_CONF)."""
    result = _run(["squeue", "-h", "-o", "%A"], env=cluster.env(), timeout=10)
    job_ids = result.stdout.split() if result.returncode == 0 else []
    if job_ids:
        _run(["scancel", *job_ids], env=cluster.env(), timeout=10)
        deadline = time.monotonic() + STOP_TIMEOUT_S
        while time.monotonic() < deadline and _run(["squeue", "-h"], env=cluster.env()).stdout.strip():
            time.sleep(0.5)
    return job_ids


def stop(directory: Path) -> list[str]:
    """Cancel the cluster's jobs and stop the daemons started in ``directory``, by PID; what was stopped."""
    daemons = _daemons_in(directory)
    if "slurmctld" in daemons and (directory / "slurm.conf").exists():
        cancel_jobs(Cluster(directory=directory, node=_conf_node(directory), started_here=True))
    stopped = []
    for name in reversed(DAEMON_ORDER):
        if name in daemons:
            _terminate(directory, daemons[name])
            stopped.append(f"{name} (pid {daemons[name]})")
    _pids_file(directory).unlink(missing_ok=True)
    return stopped


def _terminate(directory: Path, pid: int) -> None:
    """SIGTERM, then SIGKILL after STOP_TIMEOUT_S; checked before each signal so a reused PID is spared."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        if not _ours_alive(directory, pid):
            return
        with suppress(ProcessLookupError):
            os.kill(pid, sig)
        deadline = time.monotonic() + STOP_TIMEOUT_S
        while time.monotonic() < deadline:
            _reap(pid)
            if not _ours_alive(directory, pid):
                return
            time.sleep(0.1)


def _reap(pid: int) -> None:
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass  # not our child (started by `up` in another process): init reaps it


@contextmanager
def session_cluster(*, reuse: bool = True) -> Iterator[Cluster]:
    """The cluster for one test session: reuse a running ``make slurm-up`` one (if ``reuse``), else start
    a fresh one in a temporary directory and stop it (and remove the directory) at the end."""
    existing = running(DEFAULT_DIR) if reuse else None
    if existing is not None:
        yield existing
        return
    stop_abandoned()
    directory = Path(tempfile.mkdtemp(prefix=f"{MARKER}-"))
    _owner_file(directory).write_text(json.dumps(_process_identity(os.getpid())))
    try:
        cluster = start(directory)
        yield cluster
    finally:
        stop(directory)
        shutil.rmtree(directory, ignore_errors=True)


def stop_abandoned() -> list[str]:
    """Stop the clusters of earlier test sessions that died without stopping them (killed with -9);
    a session still running (its owner process alive) is left alone."""
    stopped = []
    for directory in sorted(Path(tempfile.gettempdir()).glob(f"{MARKER}-*")):
        try:
            owner = json.loads(_owner_file(directory).read_text())
        except (OSError, ValueError):
            continue  # not a session directory of this module (or being created right now)
        if _process_identity(owner.get("pid", -1)) == owner:
            continue
        stopped += stop(directory)
        shutil.rmtree(directory, ignore_errors=True)
    return stopped


def _owner_file(directory: Path) -> Path:
    return directory / "owner.json"


def _process_identity(pid: int) -> dict[str, int]:
    """PID and start time (clock ticks since boot): together they name one process, even after PID reuse."""
    try:
        # Field 22 of /proc/PID/stat, counted after the parenthesised command name (which may hold spaces).
        start_ticks = int(Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[19])
    except (OSError, ValueError, IndexError):
        start_ticks = -1
    return {"pid": pid, "start_ticks": start_ticks}


def _status(directory: Path) -> int:
    cluster = running(directory)
    if cluster is None:
        print(f"no cluster running in {directory}")
        return 1
    pids = _read_pids(directory)
    print(f"cluster in {directory}: " + ", ".join(f"{name} pid {pids[name]}" for name in DAEMON_ORDER))
    print(_run(["sinfo"], env=cluster.env()).stdout.rstrip())
    print(f"export SLURM_CONF={cluster.conf}")
    return 0


def main(argv: list[str]) -> int:
    usage = "usage: python tests/slurm_cluster.py up|down|status"
    if len(argv) != 1 or argv[0] not in ("up", "down", "status"):
        print(usage, file=sys.stderr)
        return 2
    command, directory = argv[0], DEFAULT_DIR
    if command == "status":
        return _status(directory)
    if command == "down":
        stopped = stop(directory)
        print(f"stopped {', '.join(stopped)}" if stopped else f"no daemons of ours running in {directory}")
        return 0
    if running(directory) is not None:
        print(f"already up in {directory}")
        return _status(directory)
    stop(directory)  # leftovers of a half-dead cluster (one daemon died): stop the rest first
    try:
        started = time.monotonic()
        cluster = start(directory)
    except (ClusterUnavailable, ClusterError) as exc:
        print(f"slurm_cluster: {exc}", file=sys.stderr)
        return 1
    print(f"up in {time.monotonic() - started:.1f} s; node {cluster.node} idle")
    print(f"export SLURM_CONF={cluster.conf}")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except BrokenPipeError:  # `... status | head`
        sys.exit(0)
