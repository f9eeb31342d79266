"""What every mount program's backend shares: the ``Backend`` contract and the flag helpers all of them use.

Each backend knows only three things: its command line, the environment its child needs (credentials travel
there or in a 0600 file, never on the command line), and how to recognise its own entry in the mount table.
Starting, waiting and stopping belong to the supervisor (``mounts.mount``).

What a program can do is asked of its class, never of its name (``if backend == "mount-s3"``): the capabilities
below, with the defaults most programs have, which a backend overrides at the top of its class.
"""

from __future__ import annotations

import functools
import os
import subprocess
from typing import Any, ClassVar

from ...errors import BackendNotFound
from ...programs import find_program
from ...s3 import S3Settings
from ..backend_names import BUNDLED_PROGRAMS, OBJECT_LIST_PROGRAM
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
    # With a data cache and no ``warm`` asked, the mount reads the whole tree into its cache once mounted
    # (``warm.warm_for``): for a program whose prefetcher never reads across files.
    warms_by_itself: ClassVar[bool] = False
    # An existing file can be opened for writing again; False: new files only (a save writes a new name).
    overwrites_files: ClassVar[bool] = True
    # S3 refusing a read (a rotated, revoked key) shows in the program's log, where ``AuthWatch`` finds it.
    # False: a refused read may hang silently, so the mount's keys are asked of S3 itself from time to time.
    logs_refused_reads: ClassVar[bool] = True

    @property
    def mounts_object_lists(self) -> bool:
        """It mounts exactly the objects of a list (``MountSpec.objects``); said in ``backend_names``, which
        MountSpec reads beneath these classes."""
        return self.name == OBJECT_LIST_PROGRAM

    @property
    def bundled(self) -> bool:
        """mountctl builds this program itself (into the venv's libexec/), used where no other is installed."""
        return self.program in BUNDLED_PROGRAMS

    def program_figures(self, workdir: str) -> dict[str, Any]:
        """What the running program says of itself (its own counters), bounded; {} when it has no way to say."""
        return {}

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

    def keeps_pages(self, spec: MountSpec) -> bool:
        """The kernel keeps a file's pages across opens of this mount (mountctl's mount-s3, keep_cache.rs), so that
        with no data cache a warm can still fill memory for the loader's later opens (``warm.warm_for``)."""
        return False


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
