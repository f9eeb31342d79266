"""Which tar members make which sample: webdataset's rule, the one place the index and the read both use.

A regular member belongs to a sample unless it is webdataset's metadata (a name like ``__index__`` or
``__meta__/x.json``: two underscores at both ends).  A name that only begins with ``__`` (``__a.jpg``) is an
ordinary sample's member, as webdataset reads it.  The sample key is the name up to the first dot of its
basename, the member's key what follows, lowercased; consecutive members with one sample key form a sample,
and a member key that repeats within a sample is an error (webdataset raises it too).  A sample's image is
the first of ``IMAGE_KEYS`` it holds, in that order.

``tarwalk`` (the index) and ``shards.read_shard`` (the shard path at training time) both place members with
``SampleGroups``, so an index can never count a shard's samples differently from the reader that serves them.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from mountctl.pytorch.data.index.manifest import IMAGE_KEYS
from mountctl.pytorch.errors import DatasetError

__all__ = ["split_member_name", "is_metadata", "SampleGroups", "sample_members", "image_key"]

_METADATA = re.compile(r"__[^/]*__($|/)")  # webdataset's skip_meta
_SAMPLE_NAME = re.compile(r"^((?:.*/|)[^.]+)[.]([^/]*)$")  # webdataset's base_plus_ext


def is_metadata(name: str) -> bool:
    """webdataset's metadata members, which belong to no sample."""
    return ("/" not in name and name.startswith("__") and name.endswith("__")) or bool(_METADATA.match(name))


def split_member_name(name: str) -> tuple[str, str] | None:
    """``("dir/img0001", "seg.png")`` for ``dir/img0001.seg.png``: the sample key and the member's key."""
    found = _SAMPLE_NAME.match(name)
    return (found.group(1), found.group(2)) if found else None


def image_key(keys: Iterable[str]) -> str | None:
    """The member key of a sample's image: the first of ``IMAGE_KEYS`` the sample holds."""
    present = set(keys)
    return next((key for key in IMAGE_KEYS if key in present), None)


class SampleGroups:
    """Places a shard's regular members, in tar order, into samples."""

    def __init__(self, shard: str) -> None:
        self.shard = shard
        self.key: str | None = None
        self.members: set[str] = set()

    def place(self, name: str) -> tuple[str, str, bool] | None:
        """(sample key, member key, whether it starts a sample), or None for a member of no sample."""
        if is_metadata(name):
            return None
        parts = split_member_name(name)
        if parts is None:
            return None
        key, member = parts[0], parts[1].lower()
        starts = key != self.key
        if starts:
            self.key, self.members = key, set()
        elif member in self.members:
            raise DatasetError(f"shard {self.shard} holds member {member!r} of sample {key!r} twice ({name}); "
                               "webdataset refuses such a shard too: rewrite it with one member per key")
        self.members.add(member)
        return key, member, starts


def sample_members(names: Iterable[str], shard: str = "") -> list[tuple[str, list[str]]]:
    """Each sample's key and member keys, for a shard's regular member ``names`` in tar order."""
    groups = SampleGroups(shard)
    samples: list[tuple[str, list[str]]] = []
    for name in names:
        placed = groups.place(name)
        if placed is None:
            continue
        key, member, starts = placed
        if starts:
            samples.append((key, []))
        samples[-1][1].append(member)
    return samples

