"""Node-shared mounts: one mount per request per node, held by many processes, run by a detached supervisor.

``mount()`` is the one-line entry point (``mountctl.observability.status()`` reports
every shared mount).  Importing this package also keeps in-process ``Mount`` objects
off the directories a supervisor manages.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from ..mounts.handle import MountHandle
from ..mounts.mount import Mount, set_default_guard
from ..mounts.spec import MountSpec
from ..s3 import S3Settings, resolve
from .client import RegistryGuard, SharedMount, acquire, default_mount_dir, release, request_unmount
from .registry import MountRecord, Registry

__all__ = ["mount", "SharedMount", "MountRecord", "Registry", "acquire", "release", "request_unmount",
           "default_mount_dir"]

set_default_guard(RegistryGuard())


class ObjectsView:
    """A mount of a list of objects as its caller sees it: ``path`` is the directory that holds the objects (one
    level under the mount point, ``MountSpec.data_dir``); everything else is the handle's own."""

    def __init__(self, handle: Any) -> None:
        self._handle = handle

    @property
    def path(self) -> str:
        return str(self._handle.spec.data_dir)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._handle, name)


@contextlib.contextmanager
def mount(uri: str, mount_dir: str | None = None, *, backend: str = "auto", shared: bool = True,
          watchdog: bool = True, settings: S3Settings | None = None, **options: Any) -> Iterator[MountHandle]:
    """Mount ``uri`` for the duration of the block; ``m.path`` is the prefix as a directory.

    With ``shared=True`` (the default) processes making the same request share one
    mount under a detached supervisor that remounts it if it dies; with
    ``shared=False`` the mount program is this process's own child (a ``Mount``).
    ``settings`` (default: resolved from the environment) feed the mount program.
    """
    settings = settings or resolve(endpoint_url=options.get("endpoint_url"), region=options.get("region"))
    directory = mount_dir or default_mount_dir(uri, backend, settings, **options)
    spec = MountSpec(uri=uri, mount_dir=directory, backend=backend, **options)
    if not shared:
        with Mount(spec, settings=settings, watchdog=watchdog) as own:
            yield own if spec.objects is None else ObjectsView(own)
        return
    handle = acquire(spec, settings=settings, watchdog=watchdog)
    try:
        yield handle if spec.objects is None else ObjectsView(handle)
    finally:
        handle.release()
