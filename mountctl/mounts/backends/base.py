"""What every mount program's backend shares: the ``Backend`` contract and the flag helpers all of them use.

Each backend knows only three things: its command line, the environment its child needs (credentials travel
there or in a 0600 file, never on the command line), and how to recognise its own entry in the mount table.
Starting, waiting and stopping belong to the supervisor (``mounts.mount``).
"""

from __future__ import annotations

import functools
import os
import subprocess
from typing import ClassVar

from ...errors import BackendNotFound
from ...programs import find_program
from ...s3 import S3Settings
from ..cache import CachePlan, free_mb, plan_cache
from ..mounttable import MountEntry
from ..spec import MountSpec

__all__ = ["Backend", "MIB", "cache_plan", "flag_value", "set_flag", "ownership_flags"]

MIB = 1 << 20


@functools.lru_cache(maxsize=32)
def _version_line(path: str, mtime_ns: int) -> str:
    """One run of ``path --version`` per binary (a replaced binary has a new mtime): every mount asks."""
    done = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=10, stdin=subprocess.DEVNULL)
    lines = (done.stdout or done.stderr).strip().splitlines()
    return lines[0] if lines else "unknown"


class Backend:
    name: ClassVar[str]
    program: ClassVar[str]
    install_hint: ClassVar[str]

    def executable(self) -> str:
        path = find_program(self.program)
        if path is None:
            raise BackendNotFound(
                f"backend {self.name!r} needs the program {self.program!r}, which is not on PATH; "
                f"{self.install_hint}, or choose another with --backend", program=self.program)
        return path

    def available(self) -> bool:
        return find_program(self.program) is not None

    def version(self, executable: str | None = None) -> str:
        """The first line of ``--version`` of ``executable`` (default: the one found now).

        Asked of a binary mountctl is about to start (``Mount`` records it then), never of a running process's
        ``/proc/PID/exe``: a pid from a record may by now be any other program's."""
        try:
            path = executable or self.executable()
            return _version_line(path, os.stat(path).st_mtime_ns)
        except (OSError, subprocess.TimeoutExpired, BackendNotFound) as exc:
            return f"unknown ({exc})"

    def memory_bound(self, spec: MountSpec) -> tuple[int | None, str]:
        """The memory bound the program runs with (None: none) and, when it is not the one asked, why."""
        return spec.memory_mb, ""

    def command(self, spec: MountSpec, settings: S3Settings, workdir: str) -> list[str]:
        raise NotImplementedError

    def environment(self, spec: MountSpec, settings: S3Settings, workdir: str) -> dict[str, str]:
        return settings.child_env()

    def owns(self, entry: MountEntry) -> bool:
        raise NotImplementedError

    def _extra(self, spec: MountSpec) -> list[str]:
        return list(spec.extra_args.get(self.name, ()))


def cache_plan(spec: MountSpec, workdir: str) -> CachePlan | None:
    """The cache this spec's program gets (``cache.plan_cache``: the one rule for every program), or None."""
    if not (spec.cache_dir or spec.cache_size_mb):
        return None
    return plan_cache(spec.cache_dir or workdir, spec.cache_size_mb, free=free_mb(spec.cache_dir or workdir))[0]


def ownership_flags(spec: MountSpec) -> list[str]:
    """``--uid N --gid N --allow-other``: the spelling mount-s3 and rclone share."""
    flags = []
    if spec.uid is not None:
        flags += ["--uid", str(spec.uid)]
    if spec.gid is not None:
        flags += ["--gid", str(spec.gid)]
    if spec.allow_other:
        flags.append("--allow-other")
    return flags


def flag_value(argv: list[str], name: str) -> str | None:
    """The last value given to ``name`` (as ``name value`` or ``name=value``), or None."""
    value = None
    for i, arg in enumerate(argv):
        if arg == name and i + 1 < len(argv):
            value = argv[i + 1]
        elif arg.startswith(name + "="):
            value = arg.split("=", 1)[1]
    return value


def set_flag(argv: list[str], name: str, value: str) -> list[str]:
    """``argv`` with every ``name`` replaced by one ``name value`` at the end (the last one given wins)."""
    kept, skip = [], False
    for i, arg in enumerate(argv):
        if skip:
            skip = False
            continue
        if arg == name and i + 1 < len(argv):
            skip = True
            continue
        if arg.startswith(name + "="):
            continue
        kept.append(arg)
    return kept + [name, value]
