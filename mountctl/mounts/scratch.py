"""Scratch directories of in-process mounts (logs, password file), and the sweep of those whose owner died."""

from __future__ import annotations

import json
import os
import shutil
import tempfile

from .. import paths
from ..processes import process_alive, process_identity
from .fusectl import force_clear
from .mounttable import find_mount
from .probe import probe_path

__all__ = ["make_workdir", "remove_workdir", "log_dir", "log_files", "sweep_abandoned_workdirs"]

_PREFIX = "mount-"


def make_workdir(mount_dir: str, *, cache_dir: str | None = None) -> str:
    """A private scratch directory naming its owner (and the mount's data cache), so the next start can
    tidy up after a SIGKILL."""
    workdir = tempfile.mkdtemp(prefix=_PREFIX, dir=paths.runtime_dir())
    os.makedirs(log_dir(workdir), mode=0o700)
    paths.write_private_json(os.path.join(workdir, "owner.json"),
                             {**process_identity(), "mount_dir": mount_dir, "cache_dir": cache_dir})
    return workdir


def log_dir(workdir: str) -> str:
    return os.path.join(workdir, "logs")


def log_files(workdir: str) -> list[str]:
    found = []
    for root, _, files in os.walk(log_dir(workdir)):
        found += [os.path.join(root, name) for name in sorted(files)]
    return found


def remove_workdir(workdir: str) -> None:
    shutil.rmtree(workdir, ignore_errors=True)


def sweep_abandoned_workdirs() -> list[str]:
    """Remove scratch dirs of in-process mounts whose owner died, clearing their mounts first."""
    cleared = []
    run = paths.runtime_dir()
    for name in os.listdir(run):
        workdir = os.path.join(run, name)
        if not name.startswith(_PREFIX):
            continue
        try:
            with open(os.path.join(workdir, "owner.json")) as f:
                owner = json.load(f)
        except (OSError, ValueError):
            continue
        if process_alive(owner):
            continue
        mount_dir = owner.get("mount_dir", "")
        if mount_dir and find_mount(mount_dir) is not None and not probe_path(mount_dir, 2.0, list_dir=False).ok:
            force_clear(mount_dir)
            cleared.append(f"stale mount {mount_dir}")
        remove_workdir(workdir)
        cleared.append(f"scratch dir {workdir}")
        if owner.get("cache_dir"):
            shutil.rmtree(owner["cache_dir"], ignore_errors=True)
            cleared.append(f"data cache {owner['cache_dir']}")
    return cleared
