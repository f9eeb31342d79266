"""The ``mountpoint`` kind: a shared mountctl mount, shards opened as plain local files."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, BinaryIO

from mountctl.s3env import S3Settings

__all__ = ["MountpointSource", "mountpoint_source"]


@dataclass(frozen=True)
class MountpointSource:
    root: str
    backend: str
    mount_pid: int | None
    kind: str = "mountpoint"

    def open_shards(self, names: Sequence[str]) -> Iterator[tuple[str, BinaryIO]]:
        from mountctl import open_resilient

        for name in names:
            # open_resilient reopens and seeks back if the watchdog remounts under us.
            with open_resilient(os.path.join(self.root, name)) as stream:
                yield name, stream

    def describe(self) -> dict[str, Any]:
        return {"kind": self.kind, "path": self.root, "backend": self.backend, "mount_pid": self.mount_pid}


@contextlib.contextmanager
def mountpoint_source(uri: str, settings: S3Settings, *, backend: str = "auto", mount_dir: str | None = None,
                      **_: Any) -> Iterator[MountpointSource]:
    """Mount ``uri`` read-only for the run; ranks on one node share the one mount.

    The endpoint is left for the supervisor to resolve from the same environment, so
    this spec matches a plain ``mountctl.mount(uri)`` elsewhere on the node and they share.
    """
    import mountctl

    with mountctl.mount(uri, mount_dir, backend=backend) as mounted:
        yield MountpointSource(root=mounted.path, backend=mounted.backend, mount_pid=mounted.pid)
