"""Probes of a mounted path that can never hang the caller.

A FUSE request to a stopped or wedged daemon blocks the calling thread in the
kernel, so every probe runs in a short-lived child process that the caller
abandons (and kills) when the bound runs out.
"""

from __future__ import annotations

import errno
import json
import subprocess
import sys
import time
from dataclasses import dataclass

__all__ = ["ProbeResult", "probe_path"]

# Runs in the child: stat the root, look up a name that cannot exist, list one entry,
# read a few bytes of one file.  The kernel answers a stat of the root from its
# attribute cache, so only the fresh lookup is sure to reach the daemon.
_PROBE = r"""
import errno, json, os, sys
path, list_dir, read_file = sys.argv[1], sys.argv[2] == "1", sys.argv[3]
print("reached", flush=True)
try:
    os.stat(path)
    try:
        os.stat(os.path.join(path, ".mountctl-probe-" + os.urandom(8).hex()))
    except FileNotFoundError:
        pass
    if list_dir:
        with os.scandir(path) as entries:
            next(entries, None)
    if read_file:
        with open(os.path.join(path, read_file), "rb") as f:
            f.read(4096)
    print(json.dumps({"ok": True}))
except OSError as e:
    print(json.dumps({"ok": False, "errno": e.errno, "error": f"{type(e).__name__}: {e.strerror}"}))
"""


@dataclass(frozen=True)
class ProbeResult:
    ok: bool
    latency_s: float
    timed_out: bool = False
    # False when the bound ran out before the child got as far as the mount (a loaded machine starting Python
    # slowly): such a timeout says nothing about the mount program.
    reached: bool = True
    errno: int | None = None
    error: str = ""

    @property
    def not_connected(self) -> bool:
        return self.errno == errno.ENOTCONN


def probe_path(path: str, timeout_s: float, *, list_dir: bool = True, read_file: str = "") -> ProbeResult:
    """Stat (and optionally list and read) ``path`` in a child, giving up after ``timeout_s``."""
    started = time.monotonic()
    child = subprocess.Popen(
        [sys.executable, "-I", "-S", "-c", _PROBE, path, "1" if list_dir else "0", read_file],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        stdin=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        out, _ = child.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired as expired:
        reached = b"reached" in (expired.output or b"")
        child.kill()
        # A child blocked in a FUSE request dies on SIGKILL (the kernel's wait is killable);
        # still, never wait for it without a bound.
        try:
            child.wait(timeout=0.2)
        except subprocess.TimeoutExpired:
            pass
        return ProbeResult(False, time.monotonic() - started, timed_out=True, reached=reached,
                           error=f"no answer from {path} within {timeout_s:g}s")
    latency = time.monotonic() - started
    try:
        report = json.loads(out.decode().rpartition("reached\n")[2] or "{}")
    except ValueError:
        report = {}
    if report.get("ok"):
        return ProbeResult(True, latency)
    return ProbeResult(False, latency, errno=report.get("errno"),
                       error=report.get("error") or f"probe exited with status {child.returncode}")
