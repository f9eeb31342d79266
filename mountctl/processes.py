"""Is this process alive? A process is named by pid and start time, so a recycled pid never counts.

Also how a child that leads its own process group is killed, so the group goes with it, which files any
process still uses (before one that may outlive its owner is removed), and how a Python child of ours starts
without importing from the caller's working directory.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterable, Mapping
from typing import Any

__all__ = ["process_identity", "process_alive", "same_process", "start_ticks", "pid_running", "kill_group",
           "paths_in_use", "CHILD_CWD", "python_module_argv", "python_child_env"]

# Where a Python child of ours runs.  `python -m` puts its working directory first on sys.path, so started from
# the caller's (/tmp, a shared scratch folder) a `mountctl/` package that another user planted there would run
# in our place, as root.  "/" only root can write.
CHILD_CWD = "/"


def start_ticks(pid: int) -> int | None:
    """When ``pid`` started, in clock ticks after boot (``/proc/PID/stat``, field 22); None where unreadable.

    psutil's ``create_time`` adds these ticks to a boot time that the kernel derives from the wall clock, so it
    moves when the clock is stepped (an NTP correction of 33 s was seen mid-bench): a live process then read as
    gone, and a local S3 server whose run ended was left running. The ticks do not move.
    """
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rpartition(b")")[2].split()  # the command name may hold spaces and parentheses
        return int(fields[19])  # fields[0] is field 3 (the state)
    except (OSError, IndexError, ValueError):
        return None


def process_identity(pid: int | None = None) -> dict[str, Any]:
    import psutil

    pid = os.getpid() if pid is None else pid
    return {"pid": pid, "create_time": psutil.Process(pid).create_time(), "start_ticks": start_ticks(pid)}


def same_process(process: Any, identity: Mapping[str, Any]) -> bool:
    """``process`` (a ``psutil.Process``) is the one ``identity`` names: by its start in ticks after boot where
    both are known, else by psutil's start time (an identity written before the ticks were recorded)."""
    recorded = identity.get("start_ticks")
    if recorded is not None:
        now = start_ticks(process.pid)
        if now is not None:
            return bool(now == recorded)
    return bool(process.create_time() == identity.get("create_time"))


def process_alive(identity: dict[str, Any] | None) -> bool:
    """The process of ``identity`` (pid and start time) still runs and is not a zombie."""
    if not identity or not identity.get("pid"):
        return False
    import psutil

    try:
        process = psutil.Process(identity["pid"])
        return same_process(process, identity) and process.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def pid_running(pid: int | None) -> bool:
    """A bare pid runs and is not a zombie (for children whose start time nobody recorded)."""
    if not pid:
        return False
    import psutil

    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def kill_group(child: subprocess.Popen[bytes], wait_s: float) -> bool:
    """SIGKILL the process group ``child`` leads and reap it; True once it has exited.

    False when it is still there ``wait_s`` later: it is stuck in the kernel (a FUSE request to a
    wedged mount, say), which no signal interrupts; the kernel reaps it once that wait ends, and the
    caller decides whether to abort the FUSE connection that holds it.
    """
    if child.poll() is not None:
        return True
    try:
        os.killpg(child.pid, signal.SIGKILL)
    except ProcessLookupError:  # the group is gone: reap the leader if it was ours
        child.poll()
        return True
    try:
        child.wait(timeout=wait_s)
    except subprocess.TimeoutExpired:
        return False
    return True


def paths_in_use(candidates: Iterable[str]) -> set[str]:
    """Those of ``candidates`` (absolute paths of files or directories) that a live process uses: it has the file,
    or a file under the directory, open.  Read from ``/proc/PID/fd`` only: never the files themselves, nor a
    process's command line (reading that waits for its memory map, which a thread stuck in a FUSE page fault holds).
    Processes this user may not look into count for nothing, so call it for paths only this user's processes can
    use (under a private directory of its own)."""
    wanted = {os.path.normpath(path) for path in candidates}
    found: set[str] = set()

    def note(seen: str) -> None:
        for path in wanted - found:
            if seen == path or seen.startswith(path + "/"):
                found.add(path)

    for entry in os.listdir("/proc"):
        if not entry.isdigit() or found == wanted:
            continue
        try:
            for fd in os.listdir(f"/proc/{entry}/fd"):
                try:
                    note(os.readlink(f"/proc/{entry}/fd/{fd}").removesuffix(" (deleted)"))
                except OSError:  # closed meanwhile
                    continue
        except OSError:  # gone meanwhile, or not ours to look into
            continue
    return found


def python_module_argv(module: str, *args: str) -> list[str]:
    """The command line that runs ``module`` of ours in this interpreter, never from the working directory.

    -P (Python 3.11+) keeps even ``CHILD_CWD`` off sys.path.  Not -I: it would drop PYTHONPATH too, through
    which a job under another uid (SLURM) finds this checkout.  Start it with ``cwd=CHILD_CWD`` and
    ``env=python_child_env(...)``; every path in ``args`` must be absolute.
    """
    safe_path = ["-P"] if sys.version_info >= (3, 11) else []
    return [sys.executable, *safe_path, "-m", module, *args]


def python_child_env(env: Mapping[str, str]) -> dict[str, str]:
    """``env`` with a PYTHONPATH that cannot name the working directory: its empty entries (which mean the
    working directory) are dropped, and relative ones made absolute against the caller's."""
    child = dict(env)
    child.pop("PYTHONSAFEPATH", None)  # -P says it; nothing to inherit
    entries = [os.path.abspath(entry) for entry in child.get("PYTHONPATH", "").split(os.pathsep) if entry]
    if entries:
        child["PYTHONPATH"] = os.pathsep.join(entries)
    else:
        child.pop("PYTHONPATH", None)
    return child
