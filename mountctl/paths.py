"""Where mountctl keeps its state (``$MOUNTCTL_HOME``, default ``~/.local/share/mountctl``) and how it writes private files."""

from __future__ import annotations

import fcntl
import json
import os
import secrets
import stat
import time
from typing import Any

from .errors import RegistryError

__all__ = ["lock_within", "home", "private_dir", "runtime_dir", "registry_dir", "local_s3_dir", "managed_mounts_dir",
           "cache_root", "write_private", "write_private_json", "node_key"]


def home() -> str:
    return os.path.abspath(os.path.expanduser(
        os.environ.get("MOUNTCTL_HOME") or os.path.join("~", ".local", "share", "mountctl")))


def private_dir(*parts: str) -> str:
    """A directory only this user can enter, created on first use (its parents too, each 0700).

    One that exists and belongs to someone else (made first by another user, or a link to theirs) is refused:
    as root a chmod would succeed on it silently, and our records would live where they can change them."""
    path = home()
    for part in ("", *parts):
        path = os.path.join(path, part) if part else path
        os.makedirs(path, mode=0o700, exist_ok=True)
        info = os.stat(path)  # a link to a directory of one's own is fine; to another's is not
        if info.st_uid != os.geteuid() or not stat.S_ISDIR(info.st_mode):
            raise RegistryError(f"{path} is not a directory of yours (owner uid {info.st_uid}): another user may have "
                                "made it first; have it removed, or set MOUNTCTL_HOME to a directory of yours")
        os.chmod(path, 0o700)
    return path


def runtime_dir() -> str:
    """Per-mount scratch space (logs, s3fs password file)."""
    return private_dir("run")


def registry_dir() -> str:
    return private_dir("mounts")


def local_s3_dir() -> str:
    return private_dir("local-s3")


def cache_root() -> str:
    """Where training mounts put their data caches: each mount's own cache lives only as long as the mount (cache.py)."""
    return private_dir("cache")


def managed_mounts_dir() -> str:
    """Default mount directories for specs that do not name one."""
    private_dir()
    path = os.path.join(home(), "mnt")
    os.makedirs(path, mode=0o755, exist_ok=True)
    return path


def write_private(path: str, content: bytes | str) -> None:
    """Write a file only its owner can read, atomically and without a world-readable moment."""
    data = content.encode() if isinstance(content, str) else content
    tmp = f"{path}.{os.getpid()}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.fchmod(fd, 0o600)
        os.write(fd, data)
    finally:
        os.close(fd)
    os.replace(tmp, path)


def write_private_json(path: str, data: Any) -> None:
    write_private(path, json.dumps(data, indent=1))


def node_key(*, wait_s: float = 5.0) -> bytes:
    """A random key private to this ``$MOUNTCTL_HOME``: it keys the credentials fingerprint of shared mounts.

    Ranks starting together must all read the same full key: it is written to a file of its
    own and linked into place in one step, so the key file is never seen empty or half written;
    a short one (left by an older mountctl mid-write) is waited for, within ``wait_s``.
    """
    path = os.path.join(private_dir(), "node.key")
    deadline = time.monotonic() + wait_s
    while True:
        try:
            with open(path, "rb") as f:
                key = f.read()
            if len(key) >= 32:
                return key
        except FileNotFoundError:
            tmp = f"{path}.{os.getpid()}.{secrets.token_hex(4)}.tmp"
            write_private(tmp, secrets.token_bytes(32))
            try:
                os.link(tmp, path)  # atomic, and fails if another process linked its key first
            except FileExistsError:
                pass
            finally:
                os.unlink(tmp)
            continue
        if time.monotonic() > deadline:
            raise RegistryError(f"the node key {path} holds {len(key)} bytes, not 32: remove it (shared mounts "
                                "started with it are then seen as different requests) and try again")
        time.sleep(0.01)


def lock_within(fd: int, timeout_s: float, poll_s: float = 0.02) -> bool:
    """Take an exclusive flock on ``fd``, waiting at most ``timeout_s``: False when it stayed busy.

    Non-blocking tries in a loop, because a blocking flock cannot be bounded and a wedged
    holder must never hang the caller.
    """
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            if time.monotonic() > deadline:
                return False
            time.sleep(poll_s)
