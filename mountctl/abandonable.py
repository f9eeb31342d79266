"""A blocking call on a FUSE file that the caller can walk away from.

A store that accepts connections and never answers leaves a read inside the mount program
(rclone waits minutes for its own timeouts) and the reading thread blocked in the kernel,
where no exception reaches it.  ``AbandonableCaller`` runs each call on one worker thread of
its own and waits for it with a timeout: a call that outlasts it is abandoned (its thread
stays blocked until the program gives up, then ends) and the caller gets ``TimeoutError``.
Calls hand back their result, never write into the caller's memory, so an abandoned call
that completes late changes nothing the caller still uses.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from typing import Any, Generic, TypeVar

__all__ = ["AbandonableCaller"]

T = TypeVar("T")


class _Call(Generic[T]):
    def __init__(self, fn: Callable[[], T]) -> None:
        self.fn = fn
        self.done = threading.Event()
        self.result: Any = None
        self.error: BaseException | None = None


class AbandonableCaller:
    """One worker thread, made on first use and again after a call was abandoned."""

    def __init__(self, name: str = "mountctl-bounded-read") -> None:
        self._name = name
        self._queue: queue.SimpleQueue[_Call[Any] | None] | None = None

    def call(self, fn: Callable[[], T], timeout_s: float) -> T:
        """``fn()`` on the worker; ``TimeoutError`` when it has not returned within ``timeout_s``."""
        if self._queue is None:
            self._queue = queue.SimpleQueue()
            threading.Thread(target=_serve, args=(self._queue,), name=self._name, daemon=True).start()
        job: _Call[T] = _Call(fn)
        self._queue.put(job)
        if not job.done.wait(timeout_s):
            # The worker is stuck in the kernel: leave it one "stop" to find when it wakes, and use a new one.
            self._queue.put(None)
            self._queue = None
            raise TimeoutError(f"no answer within {timeout_s:g}s")
        if job.error is not None:
            raise job.error
        return job.result

    def close(self) -> None:
        if self._queue is not None:
            self._queue.put(None)
            self._queue = None


def _serve(jobs: queue.SimpleQueue[_Call[Any] | None]) -> None:
    while True:
        job = jobs.get()
        if job is None:
            return
        try:
            job.result = job.fn()
        except BaseException as exc:  # noqa: BLE001  handed to the caller, which raises it
            job.error = exc
        job.done.set()
