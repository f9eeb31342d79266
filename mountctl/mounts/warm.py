"""Warming a mount's data cache ahead of the loader: read the dataset's files once, in parallel.

A loader that opens one file per sample (``ImageFolder``, DLIO's reader) pays a round trip per
file in epoch 1, one file at a time per worker.  When the files are known (a list, or the whole
tree), a pool of readers can fetch them into the mount program's own cache first, many at once,
so that the loader's opens find them there.  Nothing in the user's code changes.

The reads run in a child process (``python -m mountctl.mounts.warm``), never in the caller: a read of a
wedged FUSE mount blocks in the kernel, and only a process can be abandoned and killed.  The child
is bounded in time, can be cancelled, and is killed with its whole group when either happens.  A
file that cannot be read (gone from the store, say) is reported, not fatal.  Only what fits in the
cache is read (listing order), since warming more would evict what was warmed first.

``auto`` (what a mount-s3 mount with a data cache does when nobody says, see ``warm_for``) warms the whole tree
only when all of it fits the cache: the walk stops at the first file past the budget and reads nothing, so a mount
of a bucket far larger than its cache costs a bounded listing and no GET.

A mount with no data cache whose program keeps the kernel's page cache across opens (mountctl's mount-s3, read
only) is warmed the same way into the page cache, within a quarter of the memory the node has available
(``page_cache_budget_bytes``): the loader's later open of a warmed file is answered from memory.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from typing import Any

from ..errors import InvalidSpec
from ..processes import CHILD_CWD, kill_group, python_child_env, python_module_argv
from ..teardown import spawn_with_parent_death_signal
from .backends import get_backend

__all__ = ["WarmReport", "Warmer", "warm", "read_listing", "cache_budget_bytes", "page_cache_budget_bytes",
           "available_memory_bytes", "warm_for", "WARM_ALL", "WARM_AUTO", "WARM_OFF", "DEFAULT_WORKERS"]

# Reads in flight: enough to hide a far store's tens of ms per request behind each other, few enough
# for a mount program on two cores (each read is one open and one GET through the mount).
DEFAULT_WORKERS = 16
DEFAULT_TIMEOUT_S = 3600.0
WARM_ALL = "all"
WARM_AUTO = "auto"  # the whole tree when it fits the cache, else nothing
WARM_OFF = "off"
# The share of the cache that warming may fill: the rest stays for what the loader reads beside it.
_CACHE_SHARE = 0.9
# The share of the node's available memory a warm into the page cache may fill: the loader's own processes, its
# decoded batches and the mount program need the rest, and the kernel would evict the first files warmed.
_PAGE_CACHE_SHARE = 0.25
_CHUNK = 1 << 20
_KILL_WAIT_S = 10.0


@dataclass
class WarmReport:
    """What one warm did.  ``missing``/``failed`` name files that could not be read (not fatal)."""

    files: int = 0
    bytes: int = 0
    seconds: float = 0.0
    skipped: int = 0  # files left out because the cache could not hold them
    missing: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    timed_out: bool = False
    cancelled: bool = False
    error: str = ""
    outgrown_bytes: int = 0  # an ``auto`` warm that read nothing: the tree outgrows the cache (at least this much)

    @property
    def complete(self) -> bool:
        return not (self.missing or self.failed or self.skipped or self.timed_out or self.cancelled or self.error
                    or self.outgrown_bytes)

    def summary(self) -> str:
        if self.outgrown_bytes:
            return (f"nothing warmed: the files under the mount outgrow the cache (more than "
                    f"{self.outgrown_bytes / 1e6:.1f} MB), and an automatic warm reads a tree only when all of it "
                    f"fits; give --warm (or warm='all') to warm the first files that fit, or a larger --cache-size")
        text = f"{self.files} files, {self.bytes / 1e6:.1f} MB in {self.seconds:.1f}s"
        for name, value in (("left out (cache full)", self.skipped), ("missing", len(self.missing)),
                            ("unreadable", len(self.failed))):
            if value:
                text += f", {value} {name}"
        if self.timed_out:
            text += ", stopped at its time bound"
        if self.cancelled:
            text += ", cancelled"
        if self.error:
            text += f", failed: {self.error}"
        return text

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def warm_for(asked: str | None, program: str, has_cache: bool, keeps_pages: bool = False) -> str | None:
    """The warm a mount gets: what was asked (``all``, ``auto`` or a list file), nothing for ``off``, and when
    nothing was asked ``auto`` for a mount-s3 mount with a data cache, or with none where the program keeps the
    kernel's page cache across opens (``keeps_pages``: ``Backend.keeps_pages``).

    Why mount-s3 and not the others: Mountpoint's prefetcher never reads across files, so a standard loader's cold
    first epoch waits one round trip per file (DLIO's AU falls without the warm: BENCHMARKS.md, "DLIO", routes
    ``mount/mount-s3+no-warm`` and ``mount/mount-s3``); rclone and s3fs spend more CPU per GB, which the loader
    needs on a small machine.
    """
    if asked == WARM_OFF:
        return None
    if asked is not None:
        return asked
    return WARM_AUTO if (has_cache or keeps_pages) and get_backend(program).warms_by_itself else None


def read_listing(listing: str) -> list[str] | None:
    """The files a ``--warm`` value names: None for ``all`` and ``auto`` (the whole tree), else the list file's
    lines (paths relative to the mount; blank lines and ``#`` comments skipped)."""
    if listing in (WARM_ALL, WARM_AUTO):
        return None
    try:
        with open(os.path.expanduser(listing)) as f:
            return [line.strip().lstrip("/") for line in f if line.strip() and not line.startswith("#")]
    except OSError as exc:
        raise InvalidSpec(f"cannot read the warm list {listing!r}: {exc.strerror}; give a file with one path "
                          f"(relative to the mount) per line, or {WARM_ALL!r} for every file") from None


class Warmer:
    """One warm running in a child process: ``start``, then ``wait`` or ``cancel``; nothing outlives it."""

    def __init__(self, root: str, names: Iterable[str] | None = None, *, budget_bytes: int | None = None,
                 workers: int = DEFAULT_WORKERS, timeout_s: float = DEFAULT_TIMEOUT_S,
                 only_if_fits: bool = False) -> None:
        if workers < 1 or timeout_s <= 0:
            raise InvalidSpec(f"warm needs at least one worker and a positive time bound, not {workers} and "
                              f"{timeout_s!r}")
        if only_if_fits and (names is not None or budget_bytes is None):
            raise InvalidSpec("an automatic warm reads the whole tree within a cache budget: give no list, and a budget")
        self.only_if_fits = only_if_fits
        self.root = root
        self.names = None if names is None else list(names)
        self.budget_bytes = budget_bytes
        self.workers = workers
        self.timeout_s = timeout_s
        self._child: subprocess.Popen[bytes] | None = None
        self._cancelled = threading.Event()
        self._started = 0.0

    def start(self) -> Warmer:
        argv = python_module_argv("mountctl.mounts.warm", os.path.abspath(self.root), "--workers", str(self.workers))
        if self.budget_bytes is not None:
            argv += ["--budget-bytes", str(self.budget_bytes)]
        if self.names is not None:
            argv.append("--stdin")
        if self.only_if_fits:
            argv.append("--only-if-fits")
        self._started = time.monotonic()
        # Its own session: a cancel kills the reader and every thread of it, never our group.  The kernel
        # also stops it when this process dies (a SIGKILLed supervisor must not leave a reader behind).
        self._child = spawn_with_parent_death_signal(
            argv, stdin=subprocess.PIPE if self.names is not None else subprocess.DEVNULL, stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL, start_new_session=True, close_fds=True, cwd=CHILD_CWD,
            env=python_child_env(os.environ))
        if self.names is not None:
            threading.Thread(target=self._feed, args=(self._child, self.names), daemon=True,
                             name="mountctl-warm-feed").start()
        return self

    @staticmethod
    def _feed(child: subprocess.Popen[bytes], names: list[str]) -> None:
        assert child.stdin is not None
        try:
            child.stdin.write("".join(name + "\n" for name in names).encode())
            child.stdin.close()
        except (BrokenPipeError, ValueError, OSError):  # killed meanwhile: nothing left to feed
            return

    @property
    def pid(self) -> int | None:
        """The reader's process id while it runs (it is a child of this process)."""
        return self._child.pid if self._child is not None else None

    def in_background(self, on_done: Callable[[WarmReport], None]) -> Warmer:
        """Start, and hand the report to ``on_done`` from a daemon thread when the warm ends."""
        self.start()
        threading.Thread(target=lambda: on_done(self.wait()), daemon=True, name="mountctl-warm").start()
        return self

    def cancel(self) -> None:
        self._cancelled.set()
        self._kill()

    def wait(self) -> WarmReport:
        """Block until the warm ends, its time bound passes or ``cancel`` is called; never longer."""
        child = self._child
        if child is None:
            raise RuntimeError("Warmer.wait() before start()")
        result: list[str] = []

        def read() -> None:
            assert child.stdout is not None
            result.append(child.stdout.read().decode(errors="replace"))

        reader = threading.Thread(target=read, daemon=True, name="mountctl-warm-read")
        reader.start()
        deadline = self._started + self.timeout_s
        while child.poll() is None and not self._cancelled.is_set() and time.monotonic() < deadline:
            time.sleep(0.05)
        timed_out = child.poll() is None and not self._cancelled.is_set()
        self._kill()
        reader.join(timeout=_KILL_WAIT_S)
        report = _parse_report(result[0] if result else "")
        report.seconds = round(time.monotonic() - self._started, 3)
        report.timed_out = report.timed_out or timed_out
        report.cancelled = self._cancelled.is_set()
        if child.returncode not in (0, None) and not (report.timed_out or report.cancelled) and not report.error:
            report.error = f"the warm reader exited with status {child.returncode}"
        return report

    def _kill(self) -> None:
        if self._child is not None:
            kill_group(self._child, _KILL_WAIT_S)  # one stuck in a wedged mount's kernel wait is reaped later


def _parse_report(out: str) -> WarmReport:
    """The child's last line is its JSON report; a killed child printed none."""
    for line in reversed(out.strip().splitlines()):
        try:
            data = json.loads(line)
        except ValueError:
            continue
        known = WarmReport.__dataclass_fields__
        return WarmReport(**{k: v for k, v in data.items() if k in known})
    return WarmReport()


def warm(root: str, names: Iterable[str] | None = None, *, budget_bytes: int | None = None,
         workers: int = DEFAULT_WORKERS, timeout_s: float = DEFAULT_TIMEOUT_S) -> WarmReport:
    """Read ``names`` (paths under ``root``; None: every file below it) into the mount's cache and report.

    Returns within ``timeout_s`` (plus a kill); what was read by then stays cached.
    """
    return Warmer(root, names, budget_bytes=budget_bytes, workers=workers, timeout_s=timeout_s).start().wait()


# -- the child: python -m mountctl.mounts.warm ROOT [--stdin] [--workers N] [--budget-bytes B] ---------------


def _walk_lazily(root: str, report: WarmReport) -> Iterator[str]:
    """Every file under ``root``, sorted per folder; a folder that cannot be listed goes into ``report.failed``
    (``os.walk`` drops such errors by default, and a partial walk then passed as a complete warm)."""

    def unlisted(error: OSError) -> None:
        where = os.path.relpath(error.filename or root, root)
        report.failed.append(f"{where}/: cannot list it ({error.strerror or error})")

    for directory, dirs, files in os.walk(root, onerror=unlisted):
        dirs.sort()
        for name in sorted(files):
            yield os.path.relpath(os.path.join(directory, name), root)


def _within_budget(root: str, names: Iterable[str], budget: int | None, report: WarmReport, *,
                   all_or_none: bool = False) -> list[tuple[str, int]]:
    """The files to read, in order, while their sizes fit ``budget``; a missing file is reported here.

    ``all_or_none`` (an automatic warm, over the lazy walk of the whole tree): every file when all of them fit, else
    none and ``report.outgrown_bytes`` set.  The first file past the budget ends the walk, so a tree far larger than
    the cache is listed only as far as the budget.  Its names are the walk's own, never outside the mount, and a file
    that cannot be sized (gone since the walk listed it) is left out unreported."""
    chosen, total = [], 0
    for name in names:
        if not all_or_none and os.path.normpath(name).split(os.sep, 1)[0] == "..":
            report.failed.append(f"{name}: outside the mount")
            continue
        try:
            size = os.stat(os.path.join(root, name)).st_size
        except FileNotFoundError:
            if not all_or_none:
                report.missing.append(name)
            continue
        except OSError as exc:
            if not all_or_none:
                report.failed.append(f"{name}: {exc.strerror}")
            continue
        if budget is not None and total + size > budget:
            if all_or_none:
                report.outgrown_bytes = total + size
                return []
            report.skipped += 1
            continue
        total += size
        chosen.append((name, size))
    return chosen


def _read_one(root: str, name: str) -> int:
    read = 0
    with open(os.path.join(root, name), "rb", buffering=0) as f:
        while chunk := f.read(_CHUNK):
            read += len(chunk)
    return read


def _child_main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m mountctl.mounts.warm")
    parser.add_argument("root")
    parser.add_argument("--stdin", action="store_true", help="read the file list from stdin")
    parser.add_argument("--workers", type=int, default=DEFAULT_WORKERS)
    parser.add_argument("--budget-bytes", type=int)
    parser.add_argument("--only-if-fits", action="store_true", help="the whole tree, or nothing if it outgrows "
                        "the budget")
    args = parser.parse_args(argv)
    report = WarmReport()
    if args.stdin:
        names: Iterable[str] = [line.strip() for line in sys.stdin if line.strip()]
    else:
        names = _walk_lazily(args.root, report)
    chosen = _within_budget(args.root, names, args.budget_bytes, report, all_or_none=args.only_if_fits)
    lock = threading.Lock()

    def read(item: tuple[str, int]) -> None:
        name = item[0]
        try:
            size = _read_one(args.root, name)
        except FileNotFoundError:
            with lock:
                report.missing.append(name)
            return
        except OSError as exc:
            with lock:
                report.failed.append(f"{name}: {exc.strerror or exc}")
            return
        with lock:
            report.files += 1
            report.bytes += size

    with ThreadPoolExecutor(max(1, args.workers), thread_name_prefix="warm") as pool:
        list(pool.map(read, chosen))
    print(json.dumps(report.to_dict()), flush=True)
    return 0


def cache_budget_bytes(cache_size_mb: int | None) -> int | None:
    """How much of a cache of ``cache_size_mb`` warming may fill (None: no cache, nothing to warm into)."""
    return int(cache_size_mb * (1 << 20) * _CACHE_SHARE) if cache_size_mb else None


def available_memory_bytes() -> int:
    """MemAvailable from /proc/meminfo (what the page cache can hold beside what runs); 1 GiB where unknown."""
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 1 << 30


def page_cache_budget_bytes() -> int:
    """How much a warm into the kernel's page cache may read: a quarter of the node's available memory."""
    return int(available_memory_bytes() * _PAGE_CACHE_SHARE)


if __name__ == "__main__":
    sys.exit(_child_main(sys.argv[1:]))
