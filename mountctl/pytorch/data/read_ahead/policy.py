"""Every read-ahead of a mountpoint-kind run, decided in one function from the node, the dataset and the request.

Four layers can read ahead of a reader: its threads into memory (``next_shards.py``), the plan's warmer into the
mount's cache (``cache_warmer.py``), mount-s3's warm of a whole per-file dataset (``mountctl.mounts.warm``), and
mount-s3's wide first GET of a file read from its first byte (``MountSpec.whole_files``). Decided apart, two of them
read the same next shards (each fetched twice) and the node's memory bound counted neither in full; decided here,
at most one layer reads a shard ahead, and the bound counts every file each reader holds open ahead.
"""

from __future__ import annotations

from dataclasses import dataclass

from mountctl.pytorch.data.read_ahead.budget import memory_for_readers, ranks_on_node
from mountctl.pytorch.data.read_ahead.cache_warmer import warm_slots
from mountctl.pytorch.data.read_ahead.next_shards import InMemoryAhead, in_memory_ahead

__all__ = ["ReadAhead", "choose_read_ahead"]


@dataclass(frozen=True)
class ReadAhead:
    """What reads ahead in one run, and the node facts it was sized by: picklable, so that each reader
    sizes its own part from it (``in_memory_plan``)."""

    in_memory: bool  # each reader's next shards into memory while it decodes
    into_cache: bool  # the plan's warmer: each reader's next ``shards_ahead`` shards into the mount's cache
    shards_ahead: int
    warm_slots: int  # shards the warmers of the node read at once (cache_warmer.warm_slots)
    mount_warm: str | None  # MountSpec.warm: None lets mount-s3 warm a per-file dataset mounted from its list
    whole_files: bool  # mount-s3's first GET covers a file's first 16 MiB (files read whole, front to back)
    ranks_on_node: int
    readers_per_rank: int | None  # as the request says; None: each reader counts its DataLoader's workers
    readers_on_node: int  # every rank's readers, as far as the request says (1 a rank when it does not)
    memory: int  # what the node's readers may use, in bytes

    def in_memory_plan(self, readers_in_rank: int = 1) -> InMemoryAhead:
        """How far each reader reads ahead into memory: the node's share over every reader on the node.
        ``readers_in_rank``: the reader's DataLoader workers, counted where the request did not say."""
        if not self.in_memory:
            return InMemoryAhead(0, 0)
        readers = max(1, self.readers_per_rank or readers_in_rank)
        return in_memory_ahead(readers * self.ranks_on_node, self.memory)

    def open_ahead(self) -> int:
        """Files each reader holds open ahead of the one it reads: what the mount's memory bound counts."""
        return self.in_memory_plan().shards + (self.shards_ahead if self.into_cache else 0)


def choose_read_ahead(asked: bool | None, *, cache: bool, per_file: bool = False, listed: bool = False,
                      whole_files: bool = False, readers: int | None = None, shards_ahead: int = 2,
                      memory: int | None = None) -> ReadAhead:
    """The run's read-ahead. ``asked``: None (the default: shards into memory), True (into the cache instead,
    where there is one), False (none at all). ``cache``: the mount has a data cache, as the disk allows (one
    asked for that the disk has no room for is none: its readers read into memory instead). ``per_file``: one
    object per sample, whose shard layers stay as asked (its map-style reads do not use them, and the memory
    bound keeps counting them); mounted from its list (``listed``) mount-s3 warms it whole unless ``asked`` is
    False (on a plain mount the warm's walk would list every folder). ``whole_files``: the run reads each file
    from its first byte to its last. ``readers``: each rank's DataLoader workers, None where the run does not
    say (each worker counts its own then, ``ReadAhead.in_memory_plan``)."""
    into_cache = bool(asked) and cache
    ranks = ranks_on_node()
    readers_on_node = max(1, readers or 1) * ranks
    return ReadAhead(
        in_memory=asked is not False and not into_cache,
        into_cache=into_cache, shards_ahead=max(0, shards_ahead), warm_slots=warm_slots(readers_on_node),
        mount_warm=None if (per_file and listed and asked is not False) else "off",
        whole_files=whole_files, ranks_on_node=ranks, readers_per_rank=readers, readers_on_node=readers_on_node,
        memory=memory_for_readers() if memory is None else memory)
