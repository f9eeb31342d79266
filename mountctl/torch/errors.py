"""The errors ``resnet.py make`` and ``train`` raise about datasets and checkpoints.

They subclass ``mountctl.MountError`` so one ``except MountError`` in a CLI
catches everything mountctl raises on purpose; each message names the object
at fault and says what to run next.
"""

from __future__ import annotations

from mountctl.errors import MountError

__all__ = ["DatasetError", "NoShards", "TruncatedShard", "CheckpointError"]


class DatasetError(MountError):
    """A dataset prefix that training cannot use as it is."""


class NoShards(DatasetError):
    """The prefix holds no manifest (and so no shards training can account for)."""


class TruncatedShard(DatasetError):
    """A shard is shorter than its manifest entry, or its tar stream ends early."""

    def __init__(self, message: str, shard: str = "") -> None:
        super().__init__(message)
        self.shard = shard

    def __reduce__(self):  # type: ignore[no-untyped-def]
        # DataLoader workers pickle exceptions back to the main process: keep the shard name.
        return (type(self), (str(self), self.shard))


class CheckpointError(MountError):
    """The checkpoint location cannot be written, or there is nothing to resume from."""
