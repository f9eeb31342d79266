"""The exporter's view of the node: mounts probed in the background on an interval, scrapes served from the last round.

A scrape that probed every mount itself cost a process per mount per request and two
remote-control calls, and walked every cache directory: a scraper every few seconds
(or fifty at once) made the exporter the node's busiest program.  Here one daemon
thread probes all mounts every ``interval_s``; a scrape reads only the registry
records (a few small files, no process started) and joins them with the last probe
of each mount.  A mount that appears between rounds wakes the prober at once.

Cache sizes come from the program's own count where it keeps one (rclone's
``vfs/stats``); other caches are walked at most once every ``cache_walk_s``.
"""

from __future__ import annotations

import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from ..shared.registry import MountRecord, Registry
from .metrics import combine, directory_bytes, probe_figures, record_figures

__all__ = ["StatusSnapshot"]

log = logging.getLogger("mountctl")


class StatusSnapshot:
    """``rows()`` as ``status()`` has them, from the last background probe of each mount."""

    def __init__(self, timeout_s: float = 2.0, interval_s: float = 10.0, *, cache_walk_s: float = 60.0,
                 registry: Registry | None = None) -> None:
        self.timeout_s = timeout_s
        self.interval_s = interval_s
        self.cache_walk_s = cache_walk_s
        self._registry = registry
        self._probed: dict[str, dict[str, Any]] = {}
        self._walked: dict[str, tuple[float, int]] = {}
        self._covered: set[str] = set()
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self.rounds = 0

    def _records(self) -> list[MountRecord]:
        return (self._registry or Registry()).records()

    def rows(self) -> list[dict[str, Any]]:
        """One row per managed mount now: the record as it is, the probe as it was last taken."""
        rows = []
        for record in self._records():
            with self._lock:
                probed = self._probed.get(record.mount_dir)
                covered = record.mount_dir in self._covered
            if probed is None and not covered:
                self._wake.set()  # a new mount: probe it now rather than at the next round
            rows.append(combine(record_figures(record), probed))
        return rows

    def probe_round(self) -> None:
        """Probe every mount once (in parallel, each bounded by ``timeout_s``) and keep the results."""
        records = self._records()
        with self._lock:
            self._covered = {record.mount_dir for record in records}  # this round answers for them
        with ThreadPoolExecutor(max_workers=max(1, min(8, len(records)))) as pool:
            results = list(pool.map(lambda r: probe_figures(r, self.timeout_s, self._cache_bytes), records))
        with self._lock:
            self._probed = {record.mount_dir: result for record, result in zip(records, results, strict=True)}
            self.rounds += 1

    def _cache_bytes(self, path: str) -> int:
        now = time.monotonic()
        with self._lock:
            walked = self._walked.get(path)
        if walked is not None and now - walked[0] < self.cache_walk_s:
            return walked[1]
        size = directory_bytes(path)
        with self._lock:
            self._walked[path] = (now, size)
        return size

    def _loop(self) -> None:
        while not self._stopping.is_set():
            # Cleared before the round reads the registry: a mount that appears during the round is either in it
            # or wakes the next one, and a wake is used once (left set, every round would follow the last by 1 s).
            self._wake.clear()
            try:
                self.probe_round()
            except Exception:  # a broken round is logged; the next one may succeed, scrapes keep the last
                log.exception("exporter: probing the mounts failed")
            # At least a second between rounds, however often scrapes wake it: no scrape rate makes it fork more.
            if self._stopping.wait(min(1.0, self.interval_s)):
                return
            self._wake.wait(self.interval_s)

    def start(self) -> StatusSnapshot:
        self._thread = threading.Thread(target=self._loop, name="mountctl-exporter-probe", daemon=True)
        self._thread.start()
        return self

    def stop(self, timeout_s: float = 5.0) -> None:
        self._stopping.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=timeout_s)
            self._thread = None
