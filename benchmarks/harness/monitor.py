"""``ResourceMonitor``: CPU and peak memory of the loader processes and of the mount program during one cell.

A daemon thread samples with psutil every ``interval_s``.  The loader
processes are this process plus the children that appear during the cell
(DataLoader workers); children that were already running (a mount
supervisor, a local S3 server started by a test) and mount programs are
left out of them.  CPU time is accumulated per process from the last sample
it was seen in, so a worker that exits between samples loses at most one
interval.

Memory is reported twice for the loader processes.  RSS summed over them
counts every page that forked DataLoader workers share with the bench
process once per process, so it grows with the worker count and with
whatever the bench process holds.  PSS (``/proc/PID/smaps_rollup``) charges
a shared page to each sharer by its share, so its sum counts it once: the
memory the loader really took.  Both are kept, so older reports still read.

Page-cache use is the node's: how far the kernel's file pages (``Cached`` less ``Shmem`` in ``/proc/meminfo``:
the DataLoader's shared-memory batches are not file pages) grew above where they stood when the cell began, at
their peak. A mount that keeps its pages shows its data there in epoch 1 and about nothing in epoch 2, when it
reads them again. It is the whole machine's figure: a benchmark runs alone on it.
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass
from typing import Any

import psutil

__all__ = ["ResourceMonitor", "Usage", "page_cache_bytes"]

_NOT_LOADERS = ("rclone", "s3fs", "mount-s3", "weed")


@dataclass(frozen=True)
class Usage:
    seconds: float
    loader_cpu_pct: float  # 100 = one core busy
    loader_peak_rss_mb: float  # summed RSS: shared pages counted once per process
    loader_peak_pss_mb: float | None  # summed PSS: shared pages counted once; None where smaps_rollup is unreadable
    program_cpu_pct: float | None
    program_peak_rss_mb: float | None
    page_cache_growth_mb: float | None = None  # the node's file pages, peak growth over the cell; None: unreadable

    def to_dict(self) -> dict[str, Any]:
        return {k: (round(v, 1) if isinstance(v, float) else v) for k, v in self.__dict__.items()}


def _cpu(process: psutil.Process) -> float:
    times = process.cpu_times()
    return times.user + times.system


def _pss_bytes(pid: int) -> int | None:
    """The process's proportional set size, or None where the kernel does not say (no smaps_rollup before
    Linux 4.14, or the process is gone). smaps_rollup, not psutil's memory_full_info: that one walks the whole
    smaps file, too slow to sample a large process five times a second."""
    try:
        with open(f"/proc/{pid}/smaps_rollup", "rb") as rollup:
            for line in rollup:
                if line.startswith(b"Pss:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def page_cache_bytes() -> int | None:
    """The node's file pages in the page cache (``Cached`` less ``Shmem``); None where /proc/meminfo says not."""
    found: dict[str, int] = {}
    try:
        with open("/proc/meminfo") as meminfo:
            for line in meminfo:
                name, _, rest = line.partition(":")
                if name in ("Cached", "Shmem"):
                    found[name] = int(rest.split()[0]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    if "Cached" not in found:
        return None
    return found["Cached"] - found.get("Shmem", 0)


class ResourceMonitor:
    def __init__(self, program_pid: int | None = None, *, interval_s: float = 0.2) -> None:
        self._me = psutil.Process(os.getpid())
        self._program = psutil.Process(program_pid) if program_pid else None
        self._interval_s = interval_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="bench-monitor", daemon=True)
        self._excluded = {p.pid for p in self._me.children(recursive=True)}
        self._start_cpu: dict[int, float] = {}
        self._last_cpu: dict[int, float] = {}
        self._peak_loader_rss = 0
        self._peak_loader_pss: int | None = 0
        self._peak_program_rss = 0
        self._cache_at_start: int | None = None
        self._peak_cache_growth = 0
        self._started = 0.0
        self._usage: Usage | None = None

    def _loaders(self) -> list[psutil.Process]:
        found = [self._me]
        for child in self._me.children(recursive=True):
            if child.pid in self._excluded:
                continue
            try:
                if child.name() in _NOT_LOADERS or "mountctl.shared.supervisor" in " ".join(child.cmdline()):
                    self._excluded.add(child.pid)
                    continue
            except psutil.Error:
                continue
            found.append(child)
        return found

    def _sample(self) -> None:
        rss = 0
        pss: int | None = 0
        for process in self._loaders():
            try:
                with process.oneshot():
                    self._last_cpu[process.pid] = _cpu(process)
                    rss += process.memory_info().rss
            except psutil.Error:
                continue
            own = _pss_bytes(process.pid)
            if own is None and process.pid == self._me.pid:
                pss = None  # no PSS for the bench process itself: the sum would say too little
            elif own is not None and pss is not None:
                pss += own
        self._peak_loader_rss = max(self._peak_loader_rss, rss)
        cached = page_cache_bytes()
        if cached is not None and self._cache_at_start is not None:
            self._peak_cache_growth = max(self._peak_cache_growth, cached - self._cache_at_start)
        if pss is None or self._peak_loader_pss is None:
            self._peak_loader_pss = None
        else:
            self._peak_loader_pss = max(self._peak_loader_pss, pss)
        if self._program is not None:
            try:
                with self._program.oneshot():
                    self._last_cpu[-1] = _cpu(self._program)
                    self._peak_program_rss = max(self._peak_program_rss, self._program.memory_info().rss)
            except psutil.Error:
                pass

    def _run(self) -> None:
        while not self._stop.wait(self._interval_s):
            self._sample()

    def __enter__(self) -> "ResourceMonitor":
        self._start_cpu = {self._me.pid: _cpu(self._me)}
        if self._program is not None:
            try:
                self._start_cpu[-1] = _cpu(self._program)
            except psutil.Error:
                self._program = None
        self._cache_at_start = page_cache_bytes()
        self._started = time.perf_counter()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self._sample()
        seconds = max(time.perf_counter() - self._started, 1e-9)

        def used(pids: list[int]) -> float:
            return sum(self._last_cpu.get(p, 0.0) - self._start_cpu.get(p, 0.0) for p in pids)

        loader_pids = [p for p in self._last_cpu if p != -1]
        self._usage = Usage(
            seconds=seconds,
            loader_cpu_pct=100 * used(loader_pids) / seconds,
            loader_peak_rss_mb=self._peak_loader_rss / 2**20,
            loader_peak_pss_mb=None if self._peak_loader_pss is None else self._peak_loader_pss / 2**20,
            program_cpu_pct=100 * used([-1]) / seconds if self._program is not None else None,
            program_peak_rss_mb=self._peak_program_rss / 2**20 if self._program is not None else None,
            page_cache_growth_mb=None if self._cache_at_start is None else self._peak_cache_growth / 2**20)

    @property
    def usage(self) -> Usage:
        if self._usage is None:
            raise RuntimeError("the monitor reports usage once its block has ended")
        return self._usage
