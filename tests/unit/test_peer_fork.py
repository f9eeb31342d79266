"""A MosaicML Streaming dataset opened in one process gives each forked DataLoader worker S3 connections of its own.

streaming-community 0.14 keeps the boto3 client it read index.json with; a forked worker inherited it, and
its keep-alive connection, so workers shared one TCP connection (tests/test_peer_stall.py shows the effect
through the far proxy).  Here the library's real downloader, a real fork, no server: the client object
stands in for one holding connections, since only whether the child still holds it matters.
"""

from __future__ import annotations

import os

import pytest

from benchmarks.harness.peer_data import fresh_connections_after_fork
from mountctl.pytorch.errors import DatasetError


class _Opened:
    """The part of a ``StreamingDataset`` the workaround reads: its streams, each with its downloader."""

    def __init__(self, *downloaders: object) -> None:
        self.streams = [type("Stream", (), {"_downloader": d})() for d in downloaders]


def _in_child(check) -> int:
    """Run ``check`` in a forked child; its exit status (0: it held)."""
    pid = os.fork()
    if pid == 0:
        os._exit(0 if check() else 1)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)


def test_a_forked_worker_does_not_inherit_the_opening_process_s3_client():
    from streaming.base.storage.download import S3Downloader

    downloader = S3Downloader()
    client = downloader._s3_client = object()
    fresh_connections_after_fork(_Opened(downloader))
    assert _in_child(lambda: downloader._s3_client is None) == 0
    assert downloader._s3_client is client, "the opening process keeps its own client"


def test_a_streaming_version_without_the_expected_downloader_is_refused():
    with pytest.raises(DatasetError, match="streaming-community"):
        fresh_connections_after_fork(_Opened(object()))
    with pytest.raises(DatasetError, match="streaming-community"):
        fresh_connections_after_fork(object())
