"""Picklable map-style readers: per-process state (clients, descriptors) is left out when pickled.

A reader is made in the main process and copied into each DataLoader worker; a
client or file descriptor made before the fork must not be shared, so only the
dataclass fields travel and ``__post_init__`` starts the state afresh.
"""

from __future__ import annotations

import dataclasses
from typing import Any

__all__ = ["PerProcessState"]


class PerProcessState:
    def __post_init__(self) -> None:  # subclasses set up their per-process state here
        pass

    def __getstate__(self) -> dict[str, Any]:
        return {field.name: getattr(self, field.name) for field in dataclasses.fields(self)}  # type: ignore[arg-type]

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self.__post_init__()
