"""The 64-reader cell's figures: each rank's share and the aggregate, from what the ranks reported."""

from __future__ import annotations

import pytest

from benchmarks.harness.node_reads import NodeReads, RankReads


def test_the_slowest_rank_is_measured_against_the_mean_rank():
    reads = NodeReads((RankReads(0, 100_000_000, 1.0, ()), RankReads(1, 100_000_000, 2.0, ())), seconds=2.0)
    assert reads.aggregate_mb_s == pytest.approx(100.0)
    assert reads.slowest_share == pytest.approx(50 / 75)


def test_every_failed_read_is_kept_with_its_rank():
    reads = NodeReads((RankReads(0, 0, 1.0, ("a.bin: OSError: Transport endpoint is not connected",)),
                       RankReads(1, 5, 1.0, ())), seconds=1.0)
    assert reads.failures == ["rank 0: a.bin: OSError: Transport endpoint is not connected"]
    assert reads.bytes == 5


def test_no_ranks_read_nothing_and_share_nothing():
    reads = NodeReads((), seconds=0.0)
    assert reads.bytes == 0 and reads.slowest_share == 0.0 and reads.failures == []
