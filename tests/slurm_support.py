"""A real one-machine SLURM cluster for the tests: munged, slurmctld and one slurmd per node name.

Debian's slurm-wlm 22.05 is built with multiple-slurmd support, so two `slurmd -N` daemons with distinct
node names and ports act as two nodes on this host. Every daemon runs in the foreground as a child of the
test (its own session), from a private directory: its own munge key and socket, state, spool, log and pid
files, and loopback ports chosen free. Every process the cluster starts (daemons, slurmstepd, job tasks)
carries SLURM_CONF naming this cluster's config, which is how `stop` finds what outlived its parent.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import secrets
import shutil
import signal
import stat
import subprocess
import sys
import sysconfig
import time
from collections.abc import Callable, Iterator

import psutil

from mountctl.local_s3.ports import free_port

PROGRAMS = ("munged", "slurmctld", "slurmd", "sbatch", "srun", "sinfo", "squeue", "scancel")
USER_PROGRAMS = ("useradd", "userdel", "setcap", "fusermount3")
START_TIMEOUT_S = 90.0  # the test machine is shared and often loaded
STOP_TIMEOUT_S = 20.0


def missing_programs(names: tuple[str, ...] = PROGRAMS) -> list[str]:
    return [name for name in names if shutil.which(name) is None]


def _conf_text(root: str, ctld_port: int, node_ports: dict[str, int], extra: str) -> str:
    nodes = "\n".join(f"NodeName={name} NodeHostname=localhost NodeAddr=127.0.0.1 Port={port} CPUs=2 "
                      "State=UNKNOWN" for name, port in node_ports.items())
    return f"""\
ClusterName=mountctltest
SlurmctldHost=localhost
SlurmctldPort={ctld_port}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={root}/munge/munge.socket
StateSaveLocation={root}/state
SlurmdSpoolDir={root}/spool/%n
SlurmctldPidFile={root}/run/slurmctld.pid
SlurmdPidFile={root}/run/slurmd-%n.pid
SlurmctldLogFile={root}/log/slurmctld.log
SlurmdLogFile={root}/log/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SwitchType=switch/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
MpiDefault=none
ReturnToService=2
KillWait=5
MailProg=/bin/true
{extra}
{nodes}
PartitionName=test Nodes={",".join(node_ports)} Default=YES MaxTime=INFINITE State=UP
"""


def _wait(predicate: Callable[[], bool], timeout_s: float, what: str, log: str | None = None) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            tail = ""
            if log and os.path.exists(log):
                with open(log, errors="replace") as f:
                    tail = "\n" + "".join(f.readlines()[-20:])
            raise RuntimeError(f"{what} did not happen within {timeout_s:.0f}s{tail}")
        time.sleep(0.2)


class SlurmCluster:
    """munged + slurmctld + a slurmd per node name, under ``root``; `start`, run jobs, `stop`."""

    def __init__(self, root: str, nodes: tuple[str, ...] = ("n1", "n2"), extra_conf: str = "") -> None:
        self.root = root
        self.nodes = nodes
        self.extra_conf = extra_conf  # slurm.conf lines such as Epilog=
        self.conf = os.path.join(root, "slurm.conf")
        self.daemons: list[tuple[str, subprocess.Popen]] = []

    def env(self, base: dict[str, str] | None = None) -> dict[str, str]:
        """The environment for any SLURM command against this cluster (and for its daemons)."""
        return {**(os.environ if base is None else base), "SLURM_CONF": self.conf}

    def run(self, *argv: str, timeout: float = 30, env: dict[str, str] | None = None,
            cwd: str | None = None) -> subprocess.CompletedProcess:
        return subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout, check=False,
                              env=self.env(env), cwd=cwd)

    # -- start -----------------------------------------------------------------------------------

    def start(self) -> None:
        for sub in ("munge", "state", "log", "run", *(f"spool/{n}" for n in self.nodes)):
            os.makedirs(os.path.join(self.root, sub), mode=0o755, exist_ok=True)
        key = os.path.join(self.root, "munge", "munge.key")
        with open(os.open(key, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "wb") as f:
            f.write(secrets.token_bytes(1024))
        ctld_port = free_port(what="slurmctld")
        node_ports = {name: free_port(what=f"slurmd {name}") for name in self.nodes}
        with open(self.conf, "w") as f:
            f.write(_conf_text(self.root, ctld_port, node_ports, self.extra_conf))
        try:
            self._start_daemons(key)
        except BaseException:
            self.stop()
            raise

    def _start_daemons(self, key: str) -> None:
        munge_dir = os.path.join(self.root, "munge")
        socket_path = os.path.join(munge_dir, "munge.socket")
        # -f: munged refuses a socket under /tmp's world-writable tree without it.
        self._spawn("munged", ["munged", "-F", "-f", f"--socket={socket_path}", f"--key-file={key}",
                               f"--pid-file={munge_dir}/munged.pid", f"--log-file={munge_dir}/munged.log",
                               f"--seed-file={munge_dir}/munged.seed"])
        _wait(lambda: os.path.exists(socket_path), START_TIMEOUT_S, "munged's socket",
              f"{munge_dir}/munged.log")
        ctld_log = os.path.join(self.root, "log", "slurmctld.log")
        self._spawn("slurmctld", ["slurmctld", "-D", "-i", "-f", self.conf])
        _wait(lambda: self.run("scontrol", "ping").stdout.count("UP") > 0, START_TIMEOUT_S,
              "slurmctld answering `scontrol ping`", ctld_log)
        for name in self.nodes:
            self._spawn(f"slurmd {name}", ["slurmd", "-D", "-f", self.conf, "-N", name])
        _wait(self._all_idle, START_TIMEOUT_S, f"nodes {', '.join(self.nodes)} idle in sinfo", ctld_log)

    def _spawn(self, what: str, argv: list[str]) -> None:
        log = open(os.path.join(self.root, "log", f"{what.replace(' ', '-')}.stderr"), "ab")
        with log:
            process = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log, env=self.env(),
                                       start_new_session=True)
        self.daemons.append((what, process))
        time.sleep(0.1)
        if process.poll() is not None:
            raise RuntimeError(f"{what} exited at start with {process.returncode}; see {log.name}")

    def _all_idle(self) -> bool:
        for what, process in self.daemons:
            if process.poll() is not None:
                raise RuntimeError(f"{what} exited with {process.returncode}; see {self.root}/log")
        shown = self.run("sinfo", "-h", "-N", "-o", "%N %t").stdout.split()
        states = dict(zip(shown[::2], shown[1::2], strict=True))
        return all(states.get(name) == "idle" for name in self.nodes)

    # -- jobs ------------------------------------------------------------------------------------

    def jobs(self) -> list[str]:
        return self.run("squeue", "-h", "-o", "%i").stdout.split()

    def cancel_all(self) -> None:
        if self.jobs():
            self.run("scancel", "--partition", "test")
            with contextlib.suppress(RuntimeError):
                _wait(lambda: not self.jobs(), STOP_TIMEOUT_S, "every job ending after scancel")

    # -- stop ------------------------------------------------------------------------------------

    def stop(self) -> list[str]:
        """Cancel jobs, stop the daemons (slurmd first, munged last), then kill whatever still carries this
        cluster's SLURM_CONF; returns the command lines of what had to be killed that way."""
        if any(name == "slurmctld" and p.poll() is None for name, p in self.daemons):
            self.cancel_all()
        for _, process in reversed(self.daemons):
            _terminate(process)
        self.daemons.clear()
        return self._kill_leftovers()

    def _kill_leftovers(self) -> list[str]:
        left = list(self.processes())
        for process in left:
            with contextlib.suppress(psutil.Error):
                process.kill()
        psutil.wait_procs(left, timeout=STOP_TIMEOUT_S)
        return [" ".join(p.info["cmdline"] or [p.info["name"]]) for p in left]

    def processes(self) -> Iterator[psutil.Process]:
        """Processes started by this cluster: they carry its SLURM_CONF (the daemons, slurmstepd, job tasks)."""
        marker = self.conf
        for process in psutil.process_iter(["name", "cmdline"]):
            with contextlib.suppress(psutil.Error):
                if process.pid != os.getpid() and process.environ().get("SLURM_CONF") == marker:
                    yield process


def _terminate(process: subprocess.Popen) -> None:
    """SIGTERM the daemon's session, then SIGKILL it if it is still there after a bounded wait."""
    if process.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=STOP_TIMEOUT_S)


# -- users -----------------------------------------------------------------------------------------


@contextlib.contextmanager
def system_user(prefix: str) -> Iterator[pwd.struct_passwd]:
    """A throwaway system user (no home, no login shell) for jobs that `sbatch --uid=` runs as another uid;
    removed afterwards. Raises RuntimeError when this machine cannot create users (the caller skips or fails)."""
    name = f"{prefix}{secrets.token_hex(4)}"
    done = subprocess.run(["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", name],
                          capture_output=True, text=True, timeout=30, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"cannot create user {name}: {done.stderr.strip()}")
    try:
        yield pwd.getpwnam(name)
    finally:
        subprocess.run(["userdel", name], capture_output=True, timeout=30, check=False)


def _others_can_run(path: str) -> bool:
    """Whether a user other than the owner can execute ``path``: every directory above it must let others in."""
    real = os.path.realpath(path)
    parts = [real] + [os.path.dirname(real)]
    while parts[-1] != "/":
        parts.append(os.path.dirname(parts[-1]))
    return all(os.stat(p).st_mode & stat.S_IXOTH for p in parts)


def python_for_other_users(repo: str) -> tuple[str, str]:
    """(interpreter, PYTHONPATH) with which a job under another uid imports this checkout and the venv's packages.

    The venv's interpreter may sit where only its owner can reach (on the test machine it links into root's
    0700 home); then the system's Python of the same minor version loads the venv's site-packages instead.
    Raises RuntimeError when neither is possible."""
    site = sysconfig.get_paths()["purelib"]
    if _others_can_run(sys.executable):
        return sys.executable, repo
    system = "/usr/bin/python3"
    if os.path.exists(system) and _others_can_run(system):
        done = subprocess.run([system, "-c", "import sys; print(sys.version_info[:2])"], capture_output=True,
                              text=True, timeout=30, check=False)
        if done.stdout.strip() == str(tuple(sys.version_info[:2])):
            return system, os.pathsep.join([repo, site])
    raise RuntimeError(f"no Python another user can run with this venv's packages: {sys.executable} is not "
                       f"reachable by other users and {system} is absent or another version")


def fusermount_for_other_users(bin_dir: str) -> str:
    """Put a fusermount3 with which other users can mount FUSE into ``bin_dir`` (first on their PATH); returns it.

    On a usual node /dev/fuse is 0666 and the setuid fusermount3 does a user's mount. In the test container
    /dev/fuse is 0600 root and the setuid fusermount3 fails for a user ("failed to open /dev/fuse: Permission
    denied"). A copy with file capabilities does what the setuid program does elsewhere (CAP_DAC_OVERRIDE to
    open /dev/fuse, CAP_SYS_ADMIN to mount and unmount); only that program is privileged, never the user's job,
    which keeps every permission check this test is about."""
    path = os.path.join(bin_dir, "fusermount3")
    shutil.copy(shutil.which("fusermount3") or "fusermount3", path)
    os.chmod(path, 0o755)
    done = subprocess.run(["setcap", "cap_dac_override,cap_sys_admin+ep", path], capture_output=True, text=True,
                          timeout=30, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"cannot give {path} file capabilities: {done.stderr.strip()}")
    return path
