"""``MountHandle``: what every mount handle offers, in-process (``Mount``) or node-shared (``SharedMount``)."""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

from .health import Health
from .spec import MountSpec

__all__ = ["MountHandle"]


@runtime_checkable
class MountHandle(Protocol):
    spec: MountSpec

    @property
    def path(self) -> str: ...

    @property
    def backend(self) -> str: ...

    @property
    def pid(self) -> int | None: ...

    @property
    def log_path(self) -> str | None: ...

    @property
    def restarts(self) -> int: ...

    @property
    def cache(self) -> dict[str, Any] | None: ...

    def health(self, timeout_s: float | None = None) -> Health: ...

    def stop(self) -> None: ...
