"""A node's readers on one mount: ``ranks`` processes standing for a node's ranks, each with ``threads`` readers.

Each rank is a separate process (as DDP ranks are), started first and released together
once every one is ready, so Python's start-up is not part of anyone's time.  A rank's
threads read whole files in 1 MiB blocks and check every size; what failed is kept with
its error, never raised, so a cell reports every failed read.  Stdlib only: the test of
64 readers and the benchmark cell both run it, without importing torch in any rank.
"""

from __future__ import annotations

import json
import select
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass

__all__ = ["RankReads", "NodeReads", "read_as_ranks"]

_RANK = r"""
import json, os, sys, threading, time
root, threads, expected = sys.argv[1], int(sys.argv[2]), json.loads(sys.argv[3])
names = sorted(expected)
failures, got = [], [0] * threads
def read(slot):
    for name in names[slot::threads]:
        total = 0
        try:
            with open(os.path.join(root, name), "rb") as f:
                while block := f.read(1 << 20):
                    total += len(block)
            if total != expected[name]:
                failures.append(f"{name}: read {total} bytes of {expected[name]}")
        except OSError as e:
            failures.append(f"{name}: {type(e).__name__}: {e.strerror}")
        got[slot] += total
print("ready", flush=True)
sys.stdin.readline()
started = time.perf_counter()
workers = [threading.Thread(target=read, args=(i,)) for i in range(threads)]
for w in workers: w.start()
for w in workers: w.join()
print(json.dumps({"bytes": sum(got), "seconds": time.perf_counter() - started, "failures": failures}), flush=True)
"""


@dataclass(frozen=True)
class RankReads:
    rank: int
    bytes: int
    seconds: float
    failures: tuple[str, ...]

    @property
    def mb_s(self) -> float:
        return self.bytes / 1e6 / max(self.seconds, 1e-9)


@dataclass(frozen=True)
class NodeReads:
    ranks: tuple[RankReads, ...]
    seconds: float  # from the release of every rank to the last one done

    @property
    def bytes(self) -> int:
        return sum(r.bytes for r in self.ranks)

    @property
    def failures(self) -> list[str]:
        return [f"rank {r.rank}: {failure}" for r in self.ranks for failure in r.failures]

    @property
    def aggregate_mb_s(self) -> float:
        return self.bytes / 1e6 / max(self.seconds, 1e-9)

    @property
    def slowest_share(self) -> float:
        """The slowest rank's rate against the mean rank's: 1.0 when every rank got an equal share."""
        rates = [r.mb_s for r in self.ranks]
        mean = statistics.fmean(rates) if rates else 0.0
        return min(rates) / mean if mean else 0.0


def read_as_ranks(root: str, sizes: dict[str, int], *, ranks: int = 8, threads: int = 8,
                  timeout_s: float = 300.0) -> NodeReads:
    """Read every file of ``sizes`` (name: bytes) under ``root`` once, split over ``ranks`` x ``threads``."""
    names = sorted(sizes)
    children = []
    for rank in range(ranks):
        share = {name: sizes[name] for name in names[rank::ranks]}
        children.append(subprocess.Popen([sys.executable, "-I", "-S", "-c", _RANK, root, str(threads),
                                          json.dumps(share)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                         stderr=subprocess.PIPE, text=True, start_new_session=True))
    deadline = time.monotonic() + timeout_s
    try:
        for child in children:  # every rank ready before any starts (bounded like the rest)
            if not _ready(child, deadline):
                raise TimeoutError(f"a reader rank did not start within {timeout_s:g}s")
        started = time.perf_counter()
        for child in children:
            assert child.stdin is not None
            child.stdin.write("go\n")
            child.stdin.flush()
        results = [_finish(rank, child, deadline) for rank, child in enumerate(children)]
        return NodeReads(tuple(results), time.perf_counter() - started)
    finally:
        for child in children:
            if child.poll() is None:
                child.kill()
            try:
                child.wait(timeout=10)
            except subprocess.TimeoutExpired:  # blocked in a wedged mount: its unmount will release it
                pass


def _ready(child: subprocess.Popen[str], deadline: float) -> bool:
    assert child.stdout is not None
    while time.monotonic() < deadline:
        if select.select([child.stdout], [], [], max(0.0, min(1.0, deadline - time.monotonic())))[0]:
            return child.stdout.readline().strip() == "ready"
        if child.poll() is not None:
            return False
    return False


def _finish(rank: int, child: subprocess.Popen[str], deadline: float) -> RankReads:
    try:
        out, err = child.communicate(timeout=max(0.1, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        child.kill()
        return RankReads(rank, 0, 0.0, ("did not finish within its bound (a stalled mount?)",))
    try:
        report = json.loads(out.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return RankReads(rank, 0, 0.0, (f"exited with status {child.returncode}: {err.strip()[-300:]}",))
    return RankReads(rank, report["bytes"], report["seconds"], tuple(report["failures"]))

