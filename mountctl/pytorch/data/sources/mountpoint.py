"""The ``mountpoint`` kind: a shared mountctl mount, shards opened as plain local files."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, BinaryIO

from mountctl import S3Settings, parse_s3_uri, s3
from mountctl.pytorch.data.sources.reader_state import PerProcessState

__all__ = ["MountpointSource", "mountpoint_source", "FileReader"]


@dataclass
class FileReader(PerProcessState):
    """Map-style reads of files under ``root`` (a mount or a local directory): whole, or ``pread`` of a range.

    Range reads keep one descriptor per file per process; threads share it (``pread`` has no file position).
    """

    root: str
    names: tuple[str, ...]

    def __post_init__(self) -> None:
        self._fds: dict[int, int] = {}
        self._pid = os.getpid()

    def read(self, j: int, offset: int | None = None, length: int | None = None) -> bytes:
        path = os.path.join(self.root, self.names[j])
        if offset is None or length is None:
            with open(path, "rb") as f:
                return f.read()
        if self._pid != os.getpid():  # descriptors of the parent are not ours to share after fork
            self._fds, self._pid = {}, os.getpid()
        fd = self._fds.get(j)
        if fd is None:
            fd = self._fds.setdefault(j, os.open(path, os.O_RDONLY | os.O_CLOEXEC))
        return os.pread(fd, length, offset)

    def close(self) -> None:
        for fd in self._fds.values():
            os.close(fd)
        self._fds = {}


@dataclass(frozen=True)
class MountpointSource:
    root: str
    backend: str
    mount_pid: int | None
    uri: str
    settings: S3Settings
    kind: str = "mountpoint"

    def open_shards(self, names: Sequence[str]) -> Iterator[tuple[str, BinaryIO]]:
        from mountctl import open_resilient

        location = parse_s3_uri(self.uri)
        for name in names:
            def still_exists(key: str = location.prefix + name) -> bool:
                return s3.object_size(s3.short_client(self.settings), location.bucket, key) is not None

            # open_resilient reopens and seeks back if the watchdog remounts under us, and
            # fails at once if S3 no longer has the object.
            with open_resilient(os.path.join(self.root, name), still_exists=still_exists) as stream:
                yield name, stream

    def describe(self) -> dict[str, Any]:
        return {"kind": self.kind, "path": self.root, "backend": self.backend, "mount_pid": self.mount_pid}

    def map_reader(self, names: Sequence[str], *, ranged: bool = False) -> FileReader:
        """Objects (or, ``ranged``, byte ranges of shards) read through the mount as files."""
        return FileReader(self.root, tuple(names))


@contextlib.contextmanager
def mountpoint_source(uri: str, settings: S3Settings, *, backend: str = "auto", mount_dir: str | None = None,
                      **_: Any) -> Iterator[MountpointSource]:
    """Mount ``uri`` read-only for the run; ranks on one node share the one mount.

    The mount program gets exactly ``settings`` (endpoint, region, credentials), so this
    route reads what the other kinds read; ranks making the same request share one mount.
    """
    import mountctl

    with mountctl.mount(uri, mount_dir, backend=backend, settings=settings) as mounted:
        yield MountpointSource(root=mounted.path, backend=mounted.backend, mount_pid=mounted.pid,
                               uri=str(parse_s3_uri(uri)), settings=settings)
