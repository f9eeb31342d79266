"""FUSE mounts' connections: which process serves one, and taking them down (polite unmount, lazy unmount, and
aborting a wedged connection)."""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
from dataclasses import dataclass

from .mounttable import MountEntry, find_mount

__all__ = ["UnmountResult", "unmount", "abort_connection", "force_clear", "serving_pid"]

log = logging.getLogger("mountctl")

_FUSE_CONNECTIONS = "/sys/fs/fuse/connections"


@dataclass(frozen=True)
class UnmountResult:
    ok: bool
    busy: bool
    message: str


def _run(argv: list[str], timeout_s: float) -> tuple[int, str]:
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s,
                              stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return 124, f"{argv[0]} did not return within {timeout_s:g}s"
    except FileNotFoundError:
        return 127, f"{argv[0]} is not installed"
    return done.returncode, (done.stderr or done.stdout).strip()


def unmount(mount_point: str, *, lazy: bool = False, timeout_s: float = 5.0) -> UnmountResult:
    """Unmount once; ``busy`` tells the caller to wait or go lazy."""
    if find_mount(mount_point) is None:
        return UnmountResult(True, False, "not mounted")
    attempts = []
    if shutil.which("fusermount3"):
        attempts.append(["fusermount3", "-uz" if lazy else "-u", mount_point])
    elif shutil.which("fusermount"):
        attempts.append(["fusermount", "-uz" if lazy else "-u", mount_point])
    attempts.append(["umount", "-l", mount_point] if lazy else ["umount", mount_point])
    message = ""
    for argv in attempts:
        code, message = _run(argv, timeout_s)
        if find_mount(mount_point) is None:
            return UnmountResult(True, False, message or "unmounted")
        if "busy" in message.lower():
            return UnmountResult(False, True, message)
    return UnmountResult(False, False, message or "still mounted")


def abort_connection(entry: MountEntry) -> bool:
    """Fail every pending and future request of a FUSE connection (unblocks hung readers)."""
    if not entry.is_fuse:
        return False
    path = os.path.join(_FUSE_CONNECTIONS, str(entry.fuse_connection), "abort")
    mounted_here = False
    if not os.path.exists(path) and os.geteuid() == 0:
        # The control filesystem is often not mounted in containers; root can mount it for
        # the abort and take it away again, so mountctl leaves no mount of its own behind.
        mounted_here = _run(["mount", "-t", "fusectl", "none", _FUSE_CONNECTIONS], 5.0)[0] == 0
    try:
        with open(path, "w") as control:
            control.write("1")
        return True
    except OSError as exc:
        log.debug("could not abort FUSE connection %s: %s", entry.fuse_connection, exc)
        return False
    finally:
        if mounted_here:
            _run(["umount", _FUSE_CONNECTIONS], 5.0)


def force_clear(mount_point: str, *, timeout_s: float = 5.0) -> UnmountResult:
    """Clear a dead or wedged mount: abort its connection, then detach it lazily."""
    entry = find_mount(mount_point)
    if entry is None:
        return UnmountResult(True, False, "not mounted")
    abort_connection(entry)
    return unmount(mount_point, lazy=True, timeout_s=timeout_s)


def serving_pid(entry: MountEntry) -> int | None:
    """The process serving a FUSE mount, for a caller that was not told (a mount without a registry record).

    The kernel does not say which process reads a connection's ``/dev/fuse``.  Mount programs name
    their mount point on their command line (rclone, s3fs and mount-s3 all take it as an argument),
    so the server is a process that holds ``/dev/fuse`` open and names the mount point.  Where several
    do (a predecessor detached lazily and still running), the youngest: the mount table's entry at a
    directory is the newest mount there.  None when no such process is visible to this user.
    """
    import psutil

    if not entry.is_fuse:
        return None
    target = os.fsencode(os.path.normpath(entry.mount_point))
    found: list[tuple[float, int]] = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/cmdline", "rb") as f:
                args = f.read().split(b"\0")
        except OSError:  # gone meanwhile
            continue
        if target not in {os.path.normpath(arg) for arg in args if arg.startswith(b"/")}:
            continue
        if _holds_dev_fuse(int(name)):
            try:
                found.append((psutil.Process(int(name)).create_time(), int(name)))
            except psutil.Error:
                continue
    return max(found)[1] if found else None


def _holds_dev_fuse(pid: int) -> bool:
    try:
        names = os.listdir(f"/proc/{pid}/fd")
    except OSError:  # another user's process, or gone
        return False
    for name in names:
        try:
            if os.readlink(f"/proc/{pid}/fd/{name}") == "/dev/fuse":
                return True
        except OSError:
            continue
    return False
