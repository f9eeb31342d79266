"""Closing an s3fs file system's client, from any thread, without a warning at exit.

A DataLoader worker's finalizer may run on fsspec's own loop thread when a garbage collection there
drops the reader: closing by waiting on that loop then raised "Calling sync() from within a running
loop" (seen in CI as an unraisable exception).  These tests use s3fs's real loop and client; the
creator is wrapped only to see where its close ran.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import s3fs
from fsspec.asyn import sync

from mountctl.pytorch.data.sources.fsspec_s3 import close_filesystem


class _Watched:
    """The real client creator; remembers the thread its ``__aexit__`` ran on."""

    def __init__(self, creator: Any) -> None:
        self.creator = creator
        self.closed_on: str | None = None

    async def __aexit__(self, *exc: Any) -> None:
        self.closed_on = threading.current_thread().name
        await self.creator.__aexit__(*exc)


def _connected() -> tuple[Any, _Watched]:
    fs = s3fs.S3FileSystem(skip_instance_cache=True, key="k", secret="s", endpoint_url="http://127.0.0.1:9")
    fs.connect()  # builds the client; nothing is sent
    watched = fs._s3creator = _Watched(fs._s3creator)
    return fs, watched


def test_a_close_from_the_caller_thread_waits_for_the_client():
    fs, watched = _connected()
    close_filesystem(fs)
    assert watched.closed_on == "fsspecIO" and fs._s3creator is None


def test_a_close_on_fsspecs_own_loop_thread_is_scheduled_not_an_error():
    fs, watched = _connected()

    async def from_the_loop() -> None:
        close_filesystem(fs)  # the old code raised NotImplementedError here

    sync(fs.loop, from_the_loop)
    sync(fs.loop, asyncio.sleep, 0.1)  # the scheduled close runs on the loop
    assert watched.closed_on == "fsspecIO" and fs._s3creator is None


def test_closing_twice_does_nothing_the_second_time():
    fs, watched = _connected()
    close_filesystem(fs)
    watched.closed_on = None
    close_filesystem(fs)
    assert watched.closed_on is None
