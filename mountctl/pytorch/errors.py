"""The errors ``resnet.py make`` and ``train`` raise about datasets and checkpoints.

They subclass ``mountctl.MountctlError`` so one ``except MountctlError`` in a CLI
catches everything mountctl raises on purpose; each message names the object
at fault and says what to run next.
"""

from __future__ import annotations

from mountctl import MountctlError

__all__ = ["DatasetError", "NoShards", "TruncatedShard", "CheckpointError"]


class DatasetError(MountctlError):
    """A dataset prefix that training cannot use as it is."""


class NoShards(DatasetError):
    """The prefix holds no manifest (and so no shards training can account for)."""


class TruncatedShard(DatasetError):
    """A shard is shorter than its manifest entry, or its tar stream ends early; ``shard`` names it."""

    shard: str = ""


class CheckpointError(MountctlError):
    """The checkpoint location cannot be written, or there is nothing to resume from."""
