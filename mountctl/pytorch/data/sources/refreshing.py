"""Reads that survive rotated credentials: on S3 refusing the keys, resolve them again and reopen where the read was.

A job that reads with ``AWS_PROFILE`` keeps the keys it resolved at the start; when the
credentials file switches to new keys and the old ones are revoked, every later
request fails with 403.  The client libraries (s3torchconnector, s3fs) do not read
the file again, so the source kinds that use them do it here: resolve the chain again
(``mountctl.s3.refresh_credentials``), rebuild the client, reopen the object at the
byte already delivered.  Bounded (a few tries with a short backoff) and one log line
per refresh.

Many read-ahead threads share one ``Credentials``: the first to meet a refusal refreshes
under a lock while the others wait for it, then every thread retries with the new
client (a generation number tells a thread that someone else already refreshed).  A
read that fails because the refresh closed its client under it is retried the same way.

A reopen at an offset must find the same version of the object: given a ``VersionPin``, the
stream turns S3's refusal of the pinned ``If-Match`` (412, however the library words it) into
``ObjectChanged``; the kinds' ``open_at`` send that ``If-Match`` or compare the ETag themselves.
"""

from __future__ import annotations

import io
import logging
import threading
import time
from collections.abc import Callable
from typing import Any, BinaryIO, TypeVar

from mountctl import ObjectChanged, S3Settings, VersionPin, s3

__all__ = ["Credentials", "RefreshingStream", "buffered", "MAX_REFRESHES"]

log = logging.getLogger("mountctl")

MAX_REFRESHES = 3  # per read; with the backoff below, at most ~3.5 s of waiting
_BACKOFF_S = (0.5, 1.0, 2.0)

T = TypeVar("T")


class Credentials:
    """The settings one process reads with now, and the clients built from them (rebuilt after a refresh)."""

    def __init__(self, settings: S3Settings, kind: str) -> None:
        self.settings = settings
        self.kind = kind
        self.refreshes = 0
        self.generation = 0  # bumped by each refresh: which settings a read started with
        self._lock = threading.RLock()
        self._clients: dict[str, Any] = {}
        self._closers: dict[str, Callable[[Any], None]] = {}

    def client(self, name: str, build: Callable[[S3Settings], Any],
               close: Callable[[Any], None] | None = None) -> Any:
        """A client for the current settings, built once (``name`` tells clients of one process apart).

        ``close`` ends it when it is replaced after a refresh, or at ``close()``.
        """
        with self._lock:  # one client per name, even when several threads ask at once
            found = self._clients.get(name)
            if found is None:
                found = self._clients[name] = build(self.settings)
                if close is not None:
                    self._closers[name] = close
            return found

    def close(self) -> None:
        with self._lock:
            clients, self._clients = self._clients, {}
            closers, self._closers = self._closers, {}
        for name, client in clients.items():
            if name in closers:
                closers[name](client)

    def refresh(self, exc: BaseException, what: str, attempt: int, seen: int | None = None) -> None:
        """Resolve the credentials again after S3 refused them (``exc``); raise ``exc`` when out of tries.

        ``seen`` is the generation the refused request was made with: when another thread has
        refreshed since, this one only retries, with that thread's keys.
        """
        if attempt >= MAX_REFRESHES or not self.settings.credentials_from_chain:
            raise exc
        with self._lock:
            if seen is not None and seen != self.generation:
                return
            time.sleep(_BACKOFF_S[min(attempt, len(_BACKOFF_S) - 1)])
            old = self.settings
            self.settings = s3.refresh_credentials(old)
            self.close()
            self.refreshes += 1
            self.generation += 1
        changed = self.settings.access_key_id != old.access_key_id or self.settings.session_token != old.session_token
        log.warning("%s: S3 refused the credentials reading %s (%s); resolved them again from profile %s (%s) "
                    "and retrying", self.kind, what, _code(exc), old.profile or "default",
                    "new keys" if changed else "unchanged")

    def call(self, what: str, operation: Callable[[], T]) -> T:
        """``operation()``, retried with fresh credentials while S3 refuses them (bounded)."""
        attempt = 0
        while True:
            seen = self.generation
            try:
                return operation()
            except Exception as exc:
                if isinstance(exc, ObjectChanged):
                    raise
                if s3.is_auth_error(exc):
                    self.refresh(exc, what, attempt, seen)
                elif seen == self.generation or attempt >= MAX_REFRESHES:
                    raise
                # else another thread's refresh closed the client under this read: retry with the new one
                attempt += 1


def _code(exc: BaseException) -> str:
    response = getattr(exc, "response", None)
    if isinstance(response, dict):
        return str(response.get("Error", {}).get("Code", "")) or "403"
    return type(exc).__name__


class RefreshingStream(io.RawIOBase):
    """One object read front to back; ``open_at(settings, offset)`` (re)opens it at a byte.

    On an authorization error the credentials are resolved again and the object is
    reopened at the byte reached, so the reader sees one stream: no byte lost or repeated.
    """

    def __init__(self, name: str, credentials: Credentials, open_at: Callable[[int], BinaryIO],
                 pin: VersionPin | None = None) -> None:
        super().__init__()
        self.name = name
        self._pin = pin
        self._credentials = credentials
        self._open_at = open_at
        self._stream: BinaryIO | None = None
        self._offset = 0

    def readable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._offset

    def readinto(self, buffer: Any) -> int:
        view = memoryview(buffer).cast("B")

        def read() -> bytes:
            try:
                if self._stream is None:
                    self._stream = self._open_at(self._offset)
                return self._stream.read(len(view))
            except Exception as exc:
                self._drop()
                if self._pin is not None and s3.is_precondition_failed(exc):
                    raise self._pin.changed() from None
                raise

        data = self._credentials.call(self.name, read)
        view[:len(data)] = data
        self._offset += len(data)
        return len(data)

    def _drop(self) -> None:
        stream, self._stream = self._stream, None
        if stream is not None:
            try:
                stream.close()
            except Exception:  # closing a refused stream may fail too; it is gone either way
                pass

    def close(self) -> None:
        self._drop()
        super().close()


def buffered(raw: RefreshingStream, buffer_size: int = 1 << 20) -> BinaryIO:
    return io.BufferedReader(raw, buffer_size=buffer_size)
