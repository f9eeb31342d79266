"""The ``mountpoint`` kind: a shared mountctl mount, shards opened as plain local files."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, BinaryIO

from mountctl import S3Settings, parse_s3_uri, s3

__all__ = ["MountpointSource", "mountpoint_source"]


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
