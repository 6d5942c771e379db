"""A throwaway single-node SLURM cluster on 127.0.0.1, for the SLURM end-to-end test.

    python tests/support/slurm/cluster.py start STATE_DIR   # prints `export SLURM_CONF=...`
    python tests/support/slurm/cluster.py stop STATE_DIR

One node (this host, all its CPUs, 90 % of its memory, one fake GPU backed by /dev/null so that
``sbatch --gpus=1`` jobs run and see ``CUDA_VISIBLE_DEVICES=0``), one default partition
(``PARTITION``), no accounting database (job status through ``squeue``, finished jobs kept visible
for ``MinJobAge`` = 600 s). Everything the daemons write (config, munge key and socket, state,
spool, logs, PID files) lives in STATE_DIR; clients find the cluster through ``SLURM_CONF``. Ports
are picked free on 127.0.0.1.

One thing lives outside STATE_DIR while the cluster runs: ``/etc/slurm/slurm.conf``, a symlink to
its config. Snakemake's SLURM jobstep plugin (0.6) starts each job's ``srun`` with every ``SLURM_*``
variable but a few job ids removed, ``SLURM_CONF`` included, so srun inside a job only finds the
compiled-in path. The link is made only where no such file exists (a machine with its own SLURM
configured reports the cluster unavailable) and removed by ``stop``.

Needs Debian's ``slurm-wlm`` and ``munge``: when ``slurmctld`` is missing they are installed with
apt-get, if this runs as root and apt-get exists. Otherwise ``start`` raises ``Unavailable`` (the CLI
prints ``unavailable: <reason>`` and exits with status 3) so tests can skip with that reason.
``stop`` ends exactly the daemons ``start`` started, by the PIDs it recorded, never by name.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import closing, contextmanager
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/support/: also when run as a script
import debian_packages  # noqa: E402
from debian_packages import binary  # noqa: E402

PARTITION = "celldag"
PACKAGES = ("slurm-wlm", "munge")
STARTED = "started.json"  # the daemons start() started: name, pid
NEEDED = ("slurmctld", "slurmd", "munged", "munge", "sbatch", "sinfo", "squeue", "scontrol")
SYSTEM_CONF = Path("/etc/slurm/slurm.conf")  # where srun looks when SLURM_CONF is gone (Debian's build)


class Unavailable(RuntimeError):
    """SLURM cannot run on this machine (not installed and not installable here)."""


def ensure_installed() -> None:
    """Install slurm-wlm and munge with apt-get when slurmctld is missing, or raise Unavailable."""
    try:
        debian_packages.ensure_installed(PACKAGES, NEEDED)
    except debian_packages.NotInstallable as err:
        raise Unavailable(str(err)) from None


def short_hostname() -> str:
    try:
        name = subprocess.run(["hostname", "-s"], capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        name = ""
    return name or socket.gethostname().split(".")[0]


def free_port() -> int:
    with closing(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def total_memory_mb() -> int:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemTotal:"):
            return int(line.split()[1]) // 1024
    raise RuntimeError("no MemTotal in /proc/meminfo")


class Layout:
    """Where everything of one cluster lives inside its state directory."""

    def __init__(self, state_dir: Path | str):
        self.root = Path(state_dir).resolve()
        self.etc, self.munge, self.run, self.log = (self.root / name for name in ("etc", "munge", "run", "log"))
        self.ctld_state, self.spool = self.root / "ctld", self.root / "spool"
        self.conf = self.etc / "slurm.conf"
        self.munge_socket = self.munge / "munge.socket.2"
        self.munge_key = self.munge / "munge.key"
        self.pid = {
            "munged": self.run / "munged.pid",
            "slurmctld": self.run / "slurmctld.pid",
            "slurmd": self.run / "slurmd.pid",
        }

    def dirs(self) -> tuple[Path, ...]:
        return (self.root, self.etc, self.munge, self.run, self.log, self.ctld_state, self.spool)

    def env(self) -> dict[str, str]:
        """What clients (sinfo, sbatch, squeue, Snakemake's SLURM plugin) need to reach this cluster."""
        return {"SLURM_CONF": str(self.conf)}


def slurm_conf(layout: Layout, host: str, cpus: int, memory_mb: int, ctld_port: int, slurmd_port: int) -> str:
    node = (
        f"NodeName={host} NodeAddr=127.0.0.1 NodeHostname={host} CPUs={cpus} Sockets=1 CoresPerSocket={cpus} "
        f"ThreadsPerCore=1 RealMemory={memory_mb} Gres=gpu:1 State=UNKNOWN"
    )
    lines = [
        "ClusterName=celldagtest",
        f"SlurmctldHost={host}",
        "SlurmctldAddr=127.0.0.1",
        f"SlurmctldPort={ctld_port}",
        f"SlurmdPort={slurmd_port}",
        "SlurmUser=root",
        "SlurmdUser=root",
        "AuthType=auth/munge",
        "CredType=cred/munge",
        f"AuthInfo=socket={layout.munge_socket}",
        f"StateSaveLocation={layout.ctld_state}",
        f"SlurmdSpoolDir={layout.spool}",
        f"SlurmctldPidFile={layout.pid['slurmctld']}",
        f"SlurmdPidFile={layout.pid['slurmd']}",
        f"SlurmctldLogFile={layout.log / 'slurmctld.log'}",
        f"SlurmdLogFile={layout.log / 'slurmd.log'}",
        "ProctrackType=proctrack/linuxproc",
        "TaskPlugin=task/none",
        "SelectType=select/cons_tres",
        "SelectTypeParameters=CR_Core_Memory",
        "AccountingStorageType=accounting_storage/none",
        "JobCompType=jobcomp/none",
        "JobAcctGatherType=jobacct_gather/none",
        "MpiDefault=none",
        "ReturnToService=2",
        "MinJobAge=600",  # finished jobs stay in squeue for 10 min: the plugin's status queries see them
        "SlurmdParameters=config_overrides",  # the node line below is the truth, whatever the hardware says
        "InactiveLimit=0",
        "KillWait=5",
        "GresTypes=gpu",
        node,
        f"PartitionName={PARTITION} Nodes={host} Default=YES MaxTime=INFINITE State=UP",
    ]
    return "\n".join(lines) + "\n"


def _alive(pid: int, name: str) -> bool:
    """Whether pid is running and is the program we started (a recycled PID is someone else's)."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return any(Path(part.decode(errors="replace")).name == name for part in cmdline[:1])


def _read_pid(path: Path) -> int | None:
    try:
        return int(path.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def _wait(predicate, timeout: float, interval: float = 0.2) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return predicate()


def _record(layout: Layout, name: str, pid: int) -> None:
    path = layout.root / STARTED
    started = json.loads(path.read_text()) if path.exists() else []
    started.append({"name": name, "pid": pid})
    path.write_text(json.dumps(started))


def _tail(path: Path, lines: int = 15) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def _running(state_root: Path) -> bool:
    """Whether the cluster of a state directory still has its slurmctld."""
    try:
        started = json.loads((state_root / STARTED).read_text())
    except (OSError, ValueError):
        return False
    return any(entry["name"] == "slurmctld" and _alive(entry["pid"], "slurmctld") for entry in started)


def _link_system_conf(layout: Layout) -> None:
    """Point /etc/slurm/slurm.conf at this cluster's config (see the module docstring), or raise Unavailable."""
    if SYSTEM_CONF.is_symlink():
        target = Path(os.readlink(SYSTEM_CONF))
        if target != layout.conf and _running(target.parent.parent):
            raise Unavailable(f"another test cluster is running ({SYSTEM_CONF} points to {target})")
        SYSTEM_CONF.unlink()  # left behind by a cluster that is gone
    elif SYSTEM_CONF.exists():
        raise Unavailable(f"{SYSTEM_CONF} exists (this machine's own SLURM); jobs' srun would read it, not SLURM_CONF")
    SYSTEM_CONF.parent.mkdir(parents=True, exist_ok=True)
    SYSTEM_CONF.symlink_to(layout.conf)


def _unlink_system_conf(layout: Layout) -> None:
    if SYSTEM_CONF.is_symlink() and Path(os.readlink(SYSTEM_CONF)) == layout.conf:
        SYSTEM_CONF.unlink()


def _daemon(layout: Layout, name: str, command: list[str], env: dict[str, str], log: Path) -> int:
    """Start a self-daemonising program, wait for its PID file and record the PID."""
    pid_file = layout.pid[name]
    with open(layout.log / f"{name}.stdout", "ab") as out:
        result = subprocess.run(command, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=out, timeout=60)
    pid = None
    if _wait(lambda: (p := _read_pid(pid_file)) is not None and _alive(p, name), 30):
        pid = _read_pid(pid_file)
    if pid is None:
        raise RuntimeError(
            f"{name} did not start (exit {result.returncode}); {log}:\n{_tail(log)}\n"
            f"{layout.log / (name + '.stdout')}:\n{_tail(layout.log / (name + '.stdout'))}"
        )
    _record(layout, name, pid)
    return pid


def start(state_dir: Path | str, timeout: float = 90) -> dict[str, str]:
    """Bring the cluster up; returns the environment variables clients need. Raises Unavailable."""
    ensure_installed()
    if os.geteuid() != 0:
        raise Unavailable("slurmd must run as root (it starts jobs as the submitting user)")
    layout = Layout(state_dir)
    if len(str(layout.spool)) > 70:  # slurmd puts unix sockets there; their paths are limited to 108 bytes
        raise ValueError(f"state directory path too long for SLURM's sockets: {layout.root}")
    if (layout.root / STARTED).exists():
        stop(layout.root)  # a previous cluster in this directory: never leave it running underneath
    for path in layout.dirs():
        path.mkdir(parents=True, exist_ok=True)
        path.chmod(0o700)  # munged refuses sockets and keys in folders others can write
    (layout.root / STARTED).unlink(missing_ok=True)
    _link_system_conf(layout)
    host = short_hostname()
    env = {key: value for key, value in os.environ.items() if not key.startswith(("SLURM_", "SBATCH_", "SRUN_"))}
    env |= layout.env()

    try:
        layout.munge_key.write_bytes(os.urandom(1024))
        layout.munge_key.chmod(0o600)
        munged = [
            binary("munged"),
            "--force",
            f"--socket={layout.munge_socket}",
            f"--key-file={layout.munge_key}",
            f"--pid-file={layout.pid['munged']}",
            f"--log-file={layout.log / 'munged.log'}",
            f"--seed-file={layout.munge / 'munged.seed'}",
        ]
        _daemon(layout, "munged", munged, env, layout.log / "munged.log")
        credential = subprocess.run(
            [binary("munge"), "-n", f"--socket={layout.munge_socket}"], capture_output=True, timeout=30
        )
        check = subprocess.run(
            [binary("unmunge"), f"--socket={layout.munge_socket}"],
            input=credential.stdout,
            capture_output=True,
            timeout=30,
        )
        if check.returncode != 0:
            raise RuntimeError(f"munge does not authenticate: {check.stderr.decode(errors='replace').strip()}")

        layout.conf.write_text(
            slurm_conf(layout, host, os.cpu_count() or 1, int(total_memory_mb() * 0.9), free_port(), free_port())
        )
        (layout.etc / "gres.conf").write_text(f"NodeName={host} Name=gpu File=/dev/null\n")  # a GPU slurmd can hand out
        _daemon(layout, "slurmctld", [binary("slurmctld"), "-c"], env, layout.log / "slurmctld.log")
        _daemon(layout, "slurmd", [binary("slurmd"), "-N", host], env, layout.log / "slurmd.log")

        def node_state() -> str:
            out = subprocess.run(
                [binary("sinfo"), "-h", "-N", "-n", host, "-o", "%t"],
                env=env,
                capture_output=True,
                text=True,
                timeout=30,
            )
            return out.stdout.strip()

        if not _wait(lambda: node_state() == "idle", timeout, interval=0.5):
            show = subprocess.run(
                [binary("scontrol"), "show", "node", host], env=env, capture_output=True, text=True, timeout=30
            )
            raise RuntimeError(
                f"node {host} is {node_state()!r}, not idle, after {timeout:.0f} s\n{show.stdout}{show.stderr}\n"
                f"slurmctld.log:\n{_tail(layout.log / 'slurmctld.log')}\n"
                f"slurmd.log:\n{_tail(layout.log / 'slurmd.log')}"
            )
    except BaseException:
        stop(layout.root)
        raise
    return layout.env()


def stop(state_dir: Path | str, timeout: float = 20) -> list[str]:
    """Cancel this cluster's jobs, then end the daemons start() recorded (by PID); returns their names."""
    layout = Layout(state_dir)
    record = layout.root / STARTED
    if not record.exists():
        _unlink_system_conf(layout)
        return []
    started = json.loads(record.read_text())
    names = {entry["name"] for entry in started}
    if {"slurmctld", "slurmd"} <= names and binary("scancel"):
        env = {key: value for key, value in os.environ.items() if not key.startswith("SLURM_")} | layout.env()
        subprocess.run([binary("scancel"), "--user", str(os.geteuid())], env=env, capture_output=True, timeout=30)
        squeue = [binary("squeue"), "-h", "-t", "RUNNING,COMPLETING,PENDING", "-o", "%i"]
        _wait(
            lambda: not subprocess.run(squeue, env=env, capture_output=True, text=True, timeout=30).stdout.strip(),
            15,
            0.5,
        )
    stopped = []
    for entry in reversed(started):  # slurmd, slurmctld, then munged
        pid, name = entry["pid"], entry["name"]
        if not _alive(pid, name):
            continue
        os.kill(pid, signal.SIGTERM)
        if not _wait(lambda: not _alive(pid, name), timeout):
            os.kill(pid, signal.SIGKILL)
            _wait(lambda: not _alive(pid, name), 5)
        stopped.append(name)
    record.unlink()
    _unlink_system_conf(layout)
    return stopped


@contextmanager
def running_cluster(state_dir: Path | str) -> Iterator[dict[str, str]]:
    """A running cluster for the duration of the block; yields the client environment (SLURM_CONF).

    Raises Unavailable before starting anything when SLURM cannot run here. Always stops what it started.
    """
    env = start(state_dir)
    try:
        yield env
    finally:
        stop(state_dir)


def main(argv: list[str]) -> int:
    if len(argv) != 2 or argv[0] not in ("start", "stop"):
        print(__doc__.strip().splitlines()[0] + "\nusage: cluster.py start|stop STATE_DIR", file=sys.stderr)
        return 2
    action, state_dir = argv
    if action == "stop":
        stopped = stop(state_dir)
        print(f"stopped: {', '.join(stopped) or 'nothing'}")
        return 0
    try:
        env = start(state_dir)
    except Unavailable as err:
        print(f"unavailable: {err}")
        return 3
    for key, value in env.items():
        print(f"export {key}={value}")
    print(
        f"# partition: {PARTITION}; stop with: "
        f"{sys.executable} {Path(__file__).resolve()} stop {Path(state_dir).resolve()}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
