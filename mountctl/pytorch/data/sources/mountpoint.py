"""The ``mountpoint`` kind: a shared mountctl mount, shards opened as plain local files."""

from __future__ import annotations

import argparse
import contextlib
import errno
import os
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, BinaryIO, TypeVar

from mountctl import (
    BACKEND_NAMES,
    InvalidSpec,
    ObjectChanged,
    S3Settings,
    VersionPin,
    get_backend,
    open_resilient,
    parse_s3_uri,
    s3,
)
from mountctl.pytorch.data.read_ahead.next_shards import InMemoryAhead, NextShards
from mountctl.pytorch.data.read_ahead.policy import ReadAhead, choose_read_ahead
from mountctl.pytorch.data.sources.pins import shard_pins
from mountctl.pytorch.data.sources.reader_state import PerProcessState
from mountctl.pytorch.data.sources.refreshing import Credentials

__all__ = ["MountpointOptions", "MountpointSource", "mountpoint_source", "FileReader", "add_mountpoint_arguments",
           "memory_bound_mb"]

T = TypeVar("T")

# What a mount program needs besides its read buffers, and what one reader streaming a shard needs in them
# (rclone's default 32 MiB read-ahead plus chunks in flight; s3fs needs far less, it reads through files).
_PROGRAM_MB = 128
_PER_READER_MB = 64


def memory_bound_mb(readers: int, shards_ahead: int = 0) -> int:
    """The mount's memory bound for ``readers`` processes on this node each reading one shard at a time
    (plus ``shards_ahead`` warmed ahead by each): what the plan reads at once, and no more."""
    return _PROGRAM_MB + _PER_READER_MB * max(1, readers) * (1 + max(0, shards_ahead))


class _StoreQuestions:
    """What a reader through the mount asks S3 itself (one HEAD each): an object's ETag or size now.

    After a key rotation the watchdog remounts with new keys, and these resolve them again too (a reopen's
    version check with revoked keys would wait out the bound).
    """

    def __init__(self, uri: str, settings: S3Settings) -> None:
        self.location = parse_s3_uri(uri)
        self.credentials = Credentials(settings, "mountpoint")

    def _ask(self, name: str, question: Callable[[Any, str, str], T]) -> T:
        key = self.location.prefix + name
        return self.credentials.call(f"s3://{self.location.bucket}/{key}", lambda: question(
            self.credentials.client("head", s3.short_client), self.location.bucket, key))

    def etag_now(self, name: str) -> Callable[[], str | None]:
        return lambda: self._ask(name, s3.object_etag_now)

    def size_now(self, name: str) -> Callable[[], int | None]:
        # None only when the store answers that the object is gone; raises while it is unreachable,
        # so an outage is waited out, not called a deletion
        return lambda: self._ask(name, s3.object_size_now)


@dataclass
class FileReader(PerProcessState):
    """Map-style reads of files under ``root`` (a mount or a local directory): whole, or ``pread`` of a range.

    Range reads keep one descriptor per file per process; threads share it (``pread`` has no file position),
    and a lock makes sure two threads never both open one.  ``close`` gives them back: the map-style
    datamodule calls it when an epoch's dataset is replaced and when training ends, so a process reading
    without workers neither gathers a descriptor per shard per epoch nor holds the mount busy at unmount.

    A read that the mount fails as the shard path's reads can fail (its program killed, ENOTCONN or
    ECONNABORTED until the watchdog remounts; EIO; the file briefly gone while the mount is replaced) is
    read again through ``open_resilient``, which waits for the new mount within the outage bound, and the
    dead descriptor is dropped so that the next read opens a new one.  Given the mount's ``uri`` and
    ``settings``, each shard is read at one version: the index's ETag (``etags``, by name), else the one S3
    reports at the first open; every open of a descriptor for ranges, and every reread, asks S3 (one HEAD)
    and fails with ``ObjectChanged`` on another version rather than read a new shard at the old offsets.
    Whole objects are not asked at their first open (a HEAD per sample would double a class tree's
    requests); they are read again from their first byte, so no two versions are ever joined.
    """

    root: str
    names: tuple[str, ...]
    uri: str = ""  # s3://bucket/prefix/ behind root; "" for a local directory (nothing to ask)
    settings: S3Settings | None = None
    etags: tuple[str | None, ...] | None = None

    def __post_init__(self) -> None:
        self._fds: dict[int, int] = {}
        self._pins: dict[int, VersionPin] = {}
        self._store: _StoreQuestions | None = None
        self._pid = os.getpid()
        self._lock = threading.Lock()

    def _mine(self) -> None:
        """After fork the parent's descriptors and clients are not ours to share (call under the lock)."""
        if self._pid != os.getpid():
            self._fds, self._pins, self._store, self._pid = {}, {}, None, os.getpid()

    def _questions(self) -> _StoreQuestions | None:
        """This process's way to ask S3 about the objects (None for a local directory); call under the lock."""
        self._mine()
        if self._store is None and self.uri and self.settings is not None:
            self._store = _StoreQuestions(self.uri, self.settings)
        return self._store

    def _pin(self, j: int) -> VersionPin | None:
        """One pin per object and process, shared by its descriptors: the version seen first holds for all."""
        with self._lock:
            store = self._questions()
            if store is None:
                return None
            pin = self._pins.get(j)
            if pin is None:
                pin = self._pins[j] = shard_pins(self.uri, self.names[j:j + 1],
                                                 None if self.etags is None else self.etags[j:j + 1],
                                                 store.etag_now)[0]
            return pin

    def _size_now(self, j: int) -> Callable[[], int | None] | None:
        with self._lock:
            store = self._questions()
        return None if store is None else store.size_now(self.names[j])

    def read(self, j: int, offset: int | None = None, length: int | None = None) -> bytes:
        path = os.path.join(self.root, self.names[j])
        try:
            if offset is None or length is None:
                with open(path, "rb") as f:
                    return f.read()
            return os.pread(self._descriptor(j, path), length, offset)
        except OSError:
            # open_resilient tells a remount or an outage (waited for) from any other error (raised at once)
            if offset is not None:
                self._forget(j)
        return self._read_resilient(j, path, offset, length)

    def _read_resilient(self, j: int, path: str, offset: int | None, length: int | None) -> bytes:
        """The read again, through the mount's replacement: bounded, and at the version read so far."""
        if offset is None or length is None:
            with open_resilient(path, size_in_s3=self._size_now(j)) as f:
                return f.read()
        with open_resilient(path, buffering=max(1, length), pin=self._pin(j), size_in_s3=self._size_now(j)) as f:
            f.seek(offset)
            return f.read(length)

    def _descriptor(self, j: int, path: str) -> int:
        with self._lock:
            self._mine()
            fd = self._fds.get(j)
        if fd is not None:
            return fd
        pin = self._pin(j)
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        try:
            if pin is not None and pin.can_ask:
                _check_at_open(pin, path)
        except BaseException:
            os.close(fd)
            raise
        with self._lock:
            kept = self._fds.setdefault(j, fd)
        if kept != fd:  # another thread opened it meanwhile: use one, give the other back
            os.close(fd)
        return kept

    def _forget(self, j: int) -> None:
        with self._lock:
            fd = self._fds.pop(j, None) if self._pid == os.getpid() else None
        if fd is not None:
            with contextlib.suppress(OSError):
                os.close(fd)

    def close(self) -> None:
        with self._lock:
            fds, self._fds = self._fds, {}
            if self._pid != os.getpid():
                return  # the parent's descriptors, copied by fork: closing them here would not free the parent's
        for fd in fds.values():
            with contextlib.suppress(OSError):
                os.close(fd)


def _readers_in_this_rank() -> int:
    """The readers of this rank: its DataLoader's workers, seen from one of them; 1 outside a worker."""
    from torch.utils.data import get_worker_info

    info = get_worker_info()
    return 1 if info is None else max(1, info.num_workers)


def _check_at_open(pin: VersionPin, path: str) -> None:
    """A new descriptor reads the pinned version: another ETag fails; a store that does not answer passes
    (as the first open of a shard does: a reread after a failure asks again and waits for the store)."""
    try:
        present = pin.verify()
    except ObjectChanged:
        raise
    except Exception:  # noqa: BLE001  the store does not answer: the read goes on, checked at its reread
        return
    if not present:
        raise FileNotFoundError(errno.ENOENT, "the S3 object behind this file no longer exists", path)


@dataclass(frozen=True)
class MountpointSource:
    root: str
    backend: str
    mount_pid: int | None
    uri: str
    settings: S3Settings
    kind: str = "mountpoint"
    cache_dir: str | None = None  # where the mount's data cache lives; None: no cache
    cache_size_mb: int | None = None
    read_ahead_dir: str | None = None  # the node's record of claimed shards, for the warmer into the cache
    read_ahead: ReadAhead | None = None  # what choose_read_ahead decided for the run; None: nothing reads ahead

    def in_memory_plan(self) -> InMemoryAhead:
        """How far this process reads ahead into memory (the policy's answer for its rank's readers)."""
        if self.read_ahead is None:
            return InMemoryAhead(0, 0)
        return self.read_ahead.in_memory_plan(_readers_in_this_rank())

    reads_ahead = True  # open_shards takes ``ends``: a shard read ahead is held only as far as its reader reads

    def open_shards(self, names: Sequence[str], etags: Sequence[str | None] | None = None,
                    ends: Sequence[int | None] | None = None) -> Iterator[tuple[str, BinaryIO]]:
        """The shards through the mount, each read at one version: ``etags`` (the index's, by name), else the
        one S3 reports at the first open; a reopen (remount, outage) that finds another fails with ObjectChanged.
        ``ends``: how far into each shard its reader reads (``next_shards.bytes_for_samples``; None: to its end),
        so that a worker's piece of a shard is read ahead, not the whole shard."""
        from mountctl.pytorch.data.read_ahead.cache_warmer import ShardCacheWarmer

        location = parse_s3_uri(self.uri)
        store = _StoreQuestions(self.uri, self.settings)
        pins = shard_pins(str(location), names, etags, store.etag_now)
        warmer = None
        if self.read_ahead is not None and self.read_ahead.into_cache and self.read_ahead_dir is not None:
            warmer = ShardCacheWarmer(self.root, names, self.read_ahead_dir,
                                      shards_ahead=self.read_ahead.shards_ahead,
                                      slots=self.read_ahead.warm_slots).start()

        def open_one(index: int) -> BinaryIO:
            # open_resilient reopens and seeks back if the watchdog remounts under us, and
            # fails at once if S3 no longer has the object.
            # An early or empty end of file is checked against S3 (s3fs serves a file it can no longer
            # fetch as empty): a failed read, retried through the remount.
            # With its pin, every reopen first asks S3 whether the object is still the version read so far.
            return open_resilient(os.path.join(self.root, names[index]), size_in_s3=store.size_now(names[index]),
                                  pin=pins[index])

        plan = self.in_memory_plan()
        limits = [plan.shard_bytes if end is None else min(plan.shard_bytes, end)
                  for end in (ends if ends is not None else [None] * len(names))]
        shards = NextShards(names, open_one, ahead=plan.shards, limits=limits)
        try:
            for index, (name, stream) in enumerate(shards):
                if warmer is not None:
                    warmer.at(index)
                yield name, stream
        finally:
            shards.close()  # its threads stop now, not whenever the iteration is collected
            if warmer is not None:
                warmer.stop()

    def describe(self) -> dict[str, Any]:
        plan = self.in_memory_plan()
        return {"kind": self.kind, "path": self.root, "backend": self.backend, "mount_pid": self.mount_pid,
                "cache_dir": self.cache_dir, "cache_size_mb": self.cache_size_mb,
                "read_ahead": self.read_ahead_dir is not None, "in_memory_ahead": plan.shards, "in_memory_bytes": plan.shard_bytes}

    def map_reader(self, names: Sequence[str], *, ranged: bool = False,
                   etags: Sequence[str | None] | None = None) -> FileReader:
        """Objects (or, ``ranged``, byte ranges of shards) read through the mount as files, each at the
        version ``etags`` names (the index's), surviving a remount."""
        return FileReader(self.root, tuple(names), self.uri, self.settings, None if etags is None else tuple(etags))


@dataclass(frozen=True)
class MountpointOptions:
    """What a run asks of the mountpoint kind, and only of it: the mount program, where, its cache and read-ahead.

    ``TrainConfig`` and ``BenchConfig`` hold one each and pass it to ``open_source`` as ``mountpoint=``; the other
    kinds ignore it.  A new option of this kind is a field here (and, for the command line, a flag in
    ``add_mountpoint_arguments`` and a line in ``from_args``).  Checked at construction, like ``MountSpec``.
    """

    backend: str = "auto"  # the mount program (BACKEND_NAMES); auto picks the best one installed
    mount_dir: str | None = None  # None: one under $MOUNTCTL_HOME/mnt named after the request (shared)
    cache: bool = True  # the mount's node-local data cache
    cache_dir: str | None = None  # None: $MOUNTCTL_HOME/cache
    cache_size_mb: int | None = None  # None: the dataset's size, at most half the free disk
    # None (default): each reader reads its next shards into memory while it decodes, and a per-file dataset
    # mounted from its index is warmed whole by mount-s3 when it fits; True warms each reader's next
    # ``shards_ahead`` shards into the cache instead; False: none of these
    read_ahead: bool | None = None
    from_index: bool = False  # mount exactly the objects the run's index lists (mount-s3's manifest mount)
    objects: str | None = None  # an object list made already (``index_mount.object_list_for``): mounted as it is
    shards_ahead: int = 2  # with ``read_ahead=True``: each reader's next shards warmed into the cache
    memory_mb: int | None = None  # the mount's memory bound; None: what the run's readers read at once

    def __post_init__(self) -> None:
        if self.backend not in BACKEND_NAMES:
            raise InvalidSpec(f"unknown mount backend {self.backend!r}: choose one of {', '.join(BACKEND_NAMES)}")
        if self.cache_size_mb is not None and self.cache_size_mb < 1:
            raise InvalidSpec(f"--cache-size-mb must be positive, not {self.cache_size_mb}")
        if self.from_index and self.backend != "auto" and not get_backend(self.backend).mounts_object_lists:
            # refused at the dry run, not after the index had been loaded
            raise InvalidSpec(f"--from-index mounts with mountctl's mount-s3 only: drop --backend {self.backend}, "
                              "or drop --from-index")

    def check_kind(self, source_kind: str) -> None:
        """Refuse what only this kind can do, asked of another: ``--from-index`` was silently ignored for s3io and
        fsspec.  (The other options only tune the mount, and another kind has none to tune.)"""
        if self.from_index and source_kind != "mountpoint":
            raise InvalidSpec(f"--from-index mounts the objects the index lists, which only --source-kind mountpoint "
                              f"does: drop --from-index for --source-kind {source_kind}")

    @classmethod
    def from_args(cls, args: Any) -> MountpointOptions:
        """The options a command line parsed: ``--backend`` and ``--mount-dir`` (each command adds its own) and
        what ``add_mountpoint_arguments`` added."""
        return cls(backend=args.backend, mount_dir=args.mount_dir, cache=args.cache, cache_dir=args.cache_dir,
                   cache_size_mb=args.cache_size_mb, read_ahead=args.read_ahead, from_index=args.from_index)


@contextlib.contextmanager
def mountpoint_source(uri: str, settings: S3Settings, *, mountpoint: MountpointOptions | None = None,
                      dataset_bytes: int | None = None, readers: int | None = None, manifest: Any = None,
                      whole_files: bool = False, per_file: bool = False) -> Iterator[MountpointSource]:
    """Mount ``uri`` read-only for the run as ``mountpoint`` asks (its fields below; None: the defaults); ranks
    on one node share the one mount.  The other keywords say what the run reads, as ``open_source`` passes them.

    The mount program gets exactly ``settings`` (endpoint, region, credentials), so this
    route reads what the other kinds read; ranks making the same request share one mount.
    With ``cache`` (the default) the program keeps what it read on the node's disk
    (``$MOUNTCTL_HOME/cache`` or ``cache_dir``; size: ``dataset_bytes``, at most half the
    free disk, or ``cache_size_mb``) for the mount's lifetime. Each reader reads its next shards into memory on
    threads while it decodes (``read_ahead=None``, the default; ``next_shards.py``, 0 to 4 a reader, by the
    node's ranks, readers and memory, ``budget.py``); ``read_ahead=True`` warms its next ``shards_ahead`` shards
    into the cache instead (with no cache, none asked or no room for one on the disk, it changes nothing), and
    ``False`` reads each shard only at its turn (measured, docs/training.md "Read-ahead").  Pass ``dataset_bytes``
    from the manifest: without it the size is one LIST of the objects directly under the prefix,
    which misses the files layout's ``train/<class>/`` objects.  ``readers`` (DataLoader workers
    per rank) bounds the program's memory to what the plan reads at once, for every rank on this
    node (``budget.ranks_on_node``: torchrun's or SLURM's count); ``memory_mb`` sets the bound instead. Without
    ``readers`` each reader counts its DataLoader's workers itself, to size its read-ahead.  ``objects`` (an object list made from
    the dataset's index, ``index_mount.object_list_for``) mounts exactly those objects with mount-s3: no LIST or
    HEAD when a file is opened, each read pinned to the index's ETag; ``from_index`` makes that list from the
    run's ``manifest`` here, the one kind that mounts. ``whole_files``: the run reads each shard whole, front to
    back (not map-style), so mount-s3 may fetch a file's first 16 MiB at once (``MountSpec.whole_files``).
    ``per_file``: the dataset is one object per sample (the files layout), which has no shards to read ahead: mounted
    from its index (``objects``/``from_index``), and unless ``read_ahead=False``, the mount warms the whole tree into
    its cache instead when all of it fits (mount-s3's automatic warm, ``mountctl.mounts.warm.warm_for``). Not on a
    plain mount: the warm's walk would list every folder, which the index spares the trainer (one LIST page per
    1,000 files, ``tests/test_big_prefix.py``), while a list mount answers it from the list. Shards never get it.
    """
    import mountctl

    asked = mountpoint or MountpointOptions()
    objects = asked.objects
    if asked.from_index and objects is None:
        from mountctl.pytorch.data.index.index_mount import object_list_for

        objects = object_list_for(manifest, settings, uri)
    location = parse_s3_uri(uri)
    options: dict[str, Any] = {}
    if asked.cache:
        if dataset_bytes is None:
            dataset_bytes = sum(s3.list_object_sizes(s3.short_client(settings), location.bucket,
                                                     location.prefix).values())
        options = mountctl.cache_options(dataset_bytes, asked.cache_dir, asked.cache_size_mb)
    # Shards: the plan's read-ahead into the cache only when asked. Since a shard's first GET covers 16 MiB
    # (``whole_files``) it no longer wins: a tie on 16 MB shards, for a second pass through FUSE (docs/training.md).
    # The policy is told of the cache the disk has room for (cache_options leaves it out when it has none).
    ahead = choose_read_ahead(asked.read_ahead, cache="cache_dir" in options, per_file=per_file,
                              listed=objects is not None, whole_files=whole_files, readers=readers,
                              shards_ahead=asked.shards_ahead)
    memory_mb = asked.memory_mb
    if memory_mb is None and readers is not None:
        # each shard read ahead is a file open at once in the mount program, so the bound counts them
        memory_mb = memory_bound_mb(ahead.readers_on_node, ahead.open_ahead())
    if memory_mb is not None:
        options["memory_mb"] = memory_mb
    if objects is not None:
        options["objects"] = objects
    if ahead.whole_files:
        options["whole_files"] = True
    options["warm"] = ahead.mount_warm
    with mountctl.mount(uri, asked.mount_dir, backend=asked.backend, settings=settings, **options) as mounted:
        record = None
        if ahead.into_cache:
            record = os.path.join(mountctl.mount_cache_dir(options["cache_dir"], mounted.path), "read-ahead")
            os.makedirs(record, mode=0o700, exist_ok=True)
        cache_in_use = mounted.cache or {}  # what the program runs with, which may differ from what was asked
        yield MountpointSource(root=mounted.path, backend=mounted.backend, mount_pid=mounted.pid,
                               uri=str(location), settings=settings, cache_dir=cache_in_use.get("cache_dir"),
                               cache_size_mb=cache_in_use.get("cache_size_mb"), read_ahead_dir=record,
                               read_ahead=ahead)


def add_mountpoint_arguments(parser: Any) -> None:
    """This kind's command-line options (``resnet.py train`` and ``bench``): the cache and read-ahead."""
    parser.add_argument("--no-cache", dest="cache", action="store_false",
                        help="mountpoint kind: no node-local data cache (and so no --read-ahead into it)")
    parser.add_argument("--cache-dir", default=None,
                        help="mountpoint kind: where the data cache lives (default: $MOUNTCTL_HOME/cache)")
    parser.add_argument("--cache-size-mb", type=int, default=None,
                        help="mountpoint kind: data cache cap in MiB (default: the dataset's size, at most "
                        "half the free disk)")
    parser.add_argument("--read-ahead", action=argparse.BooleanOptionalAction, default=None,
                        help="mountpoint kind: by default each reader reads its next shards into memory while it "
                        "decodes (up to 4 a reader, by the node's readers and memory); --read-ahead warms its next 2 "
                        "shards into the cache instead (it ties, docs/training.md); --no-read-ahead reads each shard only when its "
                        "turn comes, and turns off mount-s3's warm of a per-file dataset mounted --from-index")
    parser.add_argument("--from-index", action=argparse.BooleanOptionalAction, default=False,
                        help="mountpoint kind: mount exactly the objects the dataset's index lists, with mountctl's "
                        "mount-s3: no LIST or HEAD per open, each read pinned to the indexed ETag (default off)")
