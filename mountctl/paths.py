"""Where mountctl keeps its state: ``$MOUNTCTL_HOME`` (default ``~/.local/share/mountctl``), all 0700."""

from __future__ import annotations

import os

__all__ = ["home", "private_dir", "runtime_dir", "registry_dir", "local_s3_dir", "managed_mounts_dir"]


def home() -> str:
    return os.path.abspath(os.path.expanduser(
        os.environ.get("MOUNTCTL_HOME") or os.path.join("~", ".local", "share", "mountctl")))


def private_dir(*parts: str) -> str:
    """A directory only this user can enter, created on first use."""
    path = os.path.join(home(), *parts)
    os.makedirs(path, mode=0o700, exist_ok=True)
    os.chmod(path, 0o700)
    return path


def runtime_dir() -> str:
    """Per-mount scratch space (logs, s3fs password file, caches)."""
    private_dir()
    return private_dir("run")


def registry_dir() -> str:
    private_dir()
    return private_dir("mounts")


def local_s3_dir() -> str:
    private_dir()
    return private_dir("local-s3")


def managed_mounts_dir() -> str:
    """Default mount directories for specs that do not name one."""
    private_dir()
    path = os.path.join(home(), "mnt")
    os.makedirs(path, mode=0o755, exist_ok=True)
    return path
