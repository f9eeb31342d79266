"""The errors ``resnet.py make`` and ``train`` raise about datasets and checkpoints.

They subclass ``mountctl.MountctlError`` so one ``except MountctlError`` in a CLI
catches everything mountctl raises on purpose; each message names the object
at fault and says what to run next.
"""

from __future__ import annotations

from mountctl import MountctlError

__all__ = ["DatasetError", "NoShards", "TruncatedShard", "CheckpointError", "remake_hint", "reindex_hint"]


def remake_hint(uri: str = "") -> str:
    """What to do about a dataset that no longer matches its manifest: the one wording of it."""
    return f"re-run `python resnet.py make {uri + ' ' if uri else ''}...` with the original arguments to rewrite it"


def reindex_hint(uri: str) -> str:
    """What to do about an object that changed under a running read: the one wording of it."""
    return (f"the dataset changed under the run: re-index it (`python resnet.py index {uri}`), or restore the "
            "object, and start training again")


class DatasetError(MountctlError):
    """A dataset prefix that training cannot use as it is."""


class NoShards(DatasetError):
    """The prefix holds no manifest (and so no shards training can account for)."""


class TruncatedShard(DatasetError):
    """A shard is shorter than its manifest entry, or its tar stream ends early; ``shard`` names it."""

    shard: str = ""


class CheckpointError(MountctlError):
    """The checkpoint location cannot be written, or there is nothing to resume from."""
