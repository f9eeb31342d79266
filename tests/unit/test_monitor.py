"""The bench's memory figure for the loader counts a page that forked workers share with the bench process once.

Real processes, no fake: the test process writes a buffer, forks workers that only hold it (as DataLoader workers
hold what the parent had), and the monitor sums their memory as it does in a bench cell.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from benchmarks.harness.monitor import ResourceMonitor

_BUFFER_MB = 128
_WORKERS = 3


@contextmanager
def _forked_holders(count: int) -> Iterator[None]:
    """`count` children forked now that hold the parent's pages until the block ends (then exit, and are reaped)."""
    read_end, write_end = os.pipe()
    pids = []
    try:
        for _ in range(count):
            pid = os.fork()
            if pid == 0:  # the child: wait for the parent's end of the pipe to close, touching nothing
                os.close(write_end)
                os.read(read_end, 1)
                os._exit(0)
            pids.append(pid)
        yield
    finally:
        os.close(write_end)
        os.close(read_end)
        for pid in pids:
            os.waitpid(pid, 0)


@pytest.mark.skipif(not os.path.exists("/proc/self/smaps_rollup"), reason="PSS needs Linux 4.14's smaps_rollup")
def test_pss_counts_pages_shared_with_forked_workers_once_and_rss_once_per_process() -> None:
    buffer = b"\x01" * (_BUFFER_MB * 2**20)  # written, so every page is resident before the fork
    monitor = ResourceMonitor(interval_s=0.05)  # children that exist now are not loaders: fork after this
    with _forked_holders(_WORKERS), monitor:
        pass
    usage = monitor.usage
    assert usage.loader_peak_pss_mb is not None
    # RSS charges the shared buffer to the parent and to every worker; PSS charges it once, shared out.
    assert usage.loader_peak_rss_mb >= (_WORKERS + 1) * _BUFFER_MB
    assert _BUFFER_MB <= usage.loader_peak_pss_mb < usage.loader_peak_rss_mb - _WORKERS * _BUFFER_MB * 0.9
    assert usage.to_dict()["loader_peak_pss_mb"] == round(usage.loader_peak_pss_mb, 1)
    del buffer


def test_the_page_cache_a_cell_fills_is_reported_beside_its_figures(tmp_path):
    # A real file on disk, written, flushed and dropped from the page cache, then read inside the monitor: the
    # node's file pages grow by about its size (other processes on the machine may add a little, never take it).
    size = 64 << 20
    path = tmp_path / "data.bin"
    with open(path, "wb") as f:
        f.write(os.urandom(size))
        f.flush()
        os.fsync(f.fileno())
        os.posix_fadvise(f.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)
    with ResourceMonitor(interval_s=0.05) as monitor:
        with open(path, "rb") as f:
            while f.read(1 << 20):
                pass
    grown = monitor.usage.page_cache_growth_mb
    assert grown is not None and grown >= 0.8 * size / 2**20, grown
