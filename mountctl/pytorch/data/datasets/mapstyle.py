"""``MapSampleDataset``: a map-style dataset, one sample per index, from single objects or indexed shards.

A sample is either a whole object (the files layout: ``train/<class>/<key>.jpg``)
or a byte range of a shard found through the manifest's tar index.  The bytes
come from a source kind's ``map_reader`` (a file through the mount, with
``pread`` for ranges; s3torchconnector's ``S3MapDataset``; s3fs), then go
through the same decode as the shard path, so every kind yields identical
samples.  It works with any sampler (``shuffle=True``, ``DistributedSampler``,
``ExactlyOnceBatchSampler``) and any number of workers.

Read-ahead: ``__getitems__`` (what a DataLoader calls with a whole batch of
indices) fetches the batch's objects on threads, at most ``readahead_threads``
at once and at most ``readahead_bytes`` fetched but not yet decoded, decoding
each as soon as it is its turn; so one object's latency overlaps the others'
instead of adding up.  ``readahead_threads=0`` reads one at a time.

Every read runs on a daemon thread of its own (``_BoundedReads``), waited for
at most ``FETCH_TIMEOUT_S``: a read that hangs in a wedged mount is abandoned
there, gives up its place among the ``readahead_threads``, and holds up neither
the reads after it nor the interpreter's exit.
"""

from __future__ import annotations

import collections
import os
import threading
import zlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

import torch
from torch.utils.data import Dataset

from mountctl import MountctlError
from mountctl.pytorch.data.datasets.shards import IMAGE_EXTENSIONS, RawSample, decode
from mountctl.pytorch.data.index.manifest import MANIFEST_NAME, Manifest
from mountctl.pytorch.errors import DatasetError, remake_hint

__all__ = ["MapSampleDataset", "SampleRef", "ObjectReader", "image_folder", "collate", "FETCH_TIMEOUT_S",
           "JPEG_MAGIC"]

FETCH_TIMEOUT_S = 300.0  # a bound on any one object's read
JPEG_MAGIC = b"\xff\xd8\xff"

T = TypeVar("T")


class ObjectReader(Protocol):
    """Reads object ``j`` of the names it was made with: whole, or ``length`` bytes at ``offset``."""

    def read(self, j: int, offset: int | None = None, length: int | None = None) -> bytes: ...


@dataclass(frozen=True)
class SampleRef:
    """Where sample ``index`` lives: object ``container``, whole or from ``offset`` (jpg then cls)."""

    index: int
    container: int
    label: int  # -1: read from the shard's .cls member
    offset: int | None = None
    length: int | None = None  # whole range read: jpg, padding, cls header, cls
    jpg_size: int = 0
    cls_at: int = 0  # where the .cls bytes start within the range
    cls_size: int = 0
    crc32: int | None = None
    key: str = ""  # what --sample-log names it by: the object key, or SHARD#N for the N-th sample of a shard


def _refs_of(manifest: Manifest, uri: str) -> tuple[list[str], list[SampleRef]]:
    if manifest.layout == "files":
        return ([f.key for f in manifest.files],
                [SampleRef(i, i, f.label, jpg_size=f.bytes, key=f.key) for i, f in enumerate(manifest.files)])
    if not manifest.indexed:
        raise DatasetError(f"{uri}{MANIFEST_NAME} has no tar index, which random access into its shards needs "
                           f"(it was written before the index existed); add one without re-uploading the shards: "
                           f"`python resnet.py index {uri}`")
    refs = []
    for j, shard in enumerate(manifest.shards):
        for k, (jpg_at, jpg_size, cls_at, cls_size, crc) in enumerate(shard.members or ()):
            if shard.labels is not None:  # the index holds the label: one range, the image alone
                refs.append(SampleRef(shard.first_index + k, j, shard.labels[k], jpg_at, jpg_size, jpg_size,
                                      crc32=crc, key=f"{shard.name}#{k}"))
                continue
            refs.append(SampleRef(shard.first_index + k, j, -1, jpg_at, cls_at + cls_size - jpg_at, jpg_size,
                                  cls_at - jpg_at, cls_size, crc, f"{shard.name}#{k}"))
    return [s.name for s in manifest.shards], refs


def _split(item: Any) -> tuple[int, int | None]:
    """An index from any sampler: an int, or ``(epoch, index)`` from ``ExactlyOnceBatchSampler``."""
    if isinstance(item, (tuple, list)):
        return int(item[1]), int(item[0])
    return int(item), None


class MapSampleDataset(Dataset):
    """Item ``i``: ``(uint8 CHW image, label, index)``, plus the epoch when asked with ``(epoch, i)``.

    ``classes``, ``class_to_idx``, ``samples`` and ``targets`` are there as on
    torchvision's ``ImageFolder`` where the dataset is a folder of classes.
    """

    def __init__(self, reader: ObjectReader, names: Sequence[str], refs: Sequence[SampleRef], *, image_size: int,
                 uri: str = "", readahead_threads: int = 16, readahead_bytes: int = 64 << 20,
                 classes: Sequence[str] = (), fix_hint: str = "") -> None:
        if not refs:
            raise DatasetError(f"no samples at {uri or 'the dataset'}")
        self.reader = reader
        self.names = list(names)
        self.refs = list(refs)
        self.image_size = image_size
        self.uri = uri
        self.readahead_threads = readahead_threads
        self.readahead_bytes = readahead_bytes
        self.classes = list(classes)
        self.fix_hint = fix_hint or remake_hint(uri)  # what to run when an object no longer matches the index
        self.class_to_idx = {name: i for i, name in enumerate(self.classes)}
        self._pool: _BoundedReads | None = None
        self._pool_pid = 0

    @classmethod
    def from_manifest(cls, manifest: Manifest, source: Any, uri: str, **options: Any) -> "MapSampleDataset":
        """Files layout: one object per sample; shards layout: ranged reads through the tar index."""
        names, refs = _refs_of(manifest, uri)
        # Each object at the version the index names: a replaced one fails in one line, never read at old offsets.
        etags = [f.etag for f in manifest.files] if manifest.layout == "files" else [s.etag for s in manifest.shards]
        reader = source.map_reader(names, ranged=manifest.layout == "shards", etags=etags)
        return cls(reader, names, refs, image_size=manifest.image_size, uri=uri, classes=manifest.classes,
                   fix_hint=manifest.fix_hint(uri), **options)

    @property
    def samples(self) -> list[tuple[str, int]]:
        return [(self.names[r.container], r.label) for r in self.refs]

    @property
    def targets(self) -> list[int]:
        return [r.label for r in self.refs]

    @property
    def keys(self) -> list[str]:
        """Each sample's key by index: the object's key, or ``SHARD#N`` for a sample inside a shard."""
        return [r.key or self.names[r.container] for r in self.refs]

    def __len__(self) -> int:
        return len(self.refs)

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_pool"] = None  # threads do not cross into a worker; each process makes its own pool
        return state

    def _fetch(self, ref: SampleRef) -> bytes:
        name = self.names[ref.container]
        try:
            data = self.reader.read(ref.container, ref.offset, ref.length)
        except MountctlError:  # DatasetError, and ObjectChanged: its one line says which object and what to do
            raise
        except Exception as exc:  # each route words a missing object its own way
            text = f"{type(exc).__name__}: {exc}"
            missing = isinstance(exc, FileNotFoundError) or any(
                word in text for word in ("NoSuchKey", "Not Found", "not found", "does not exist", "404"))
            if missing:
                raise DatasetError(f"object {self.uri}{name} named by the dataset's index is missing: "
                                   f"{self.fix_hint}") from None
            raise DatasetError(f"reading object {self.uri}{name} failed: {text}") from None
        if ref.length is not None and len(data) != ref.length:
            raise DatasetError(f"the tar index of shard {self.uri}{name} does not match the shard: sample "
                               f"{ref.index} should be {ref.length} bytes at offset {ref.offset}, the shard gave "
                               f"{len(data)}; rebuild the index with `python resnet.py index {self.uri}`")
        return data

    def _sample(self, ref: SampleRef, data: bytes, epoch: int | None) -> tuple[Any, ...]:
        name = self.names[ref.container]
        label = ref.label
        if ref.offset is not None:
            image = data[:ref.jpg_size]
            if ref.crc32 is not None and zlib.crc32(image) != ref.crc32:
                raise DatasetError(f"the tar index of shard {self.uri}{name} does not match the shard: the "
                                   f"checksum of sample {ref.index} at offset {ref.offset} differs (the shard was "
                                   f"rewritten?); rebuild the index with `python resnet.py index {self.uri}`")
            try:
                label = label if label >= 0 else int(data[ref.cls_at:ref.cls_at + ref.cls_size])
            except ValueError:
                raise DatasetError(f"sample {ref.index} of shard {self.uri}{name}: its .cls is not an integer "
                                   f"label; rebuild the index with `python resnet.py index {self.uri}`") from None
        else:
            image = data
        # make's shards hold JPEGs only; a user's shards (labels in the index) may hold PNG or WebP too.
        jpeg_only = name.lower().endswith((".jpg", ".jpeg")) or (name.endswith(".tar") and ref.label < 0)
        if jpeg_only and not image.startswith(JPEG_MAGIC):
            where = f"object {self.uri}{name}" if ref.offset is None else f"sample {ref.index} of {self.uri}{name}"
            raise DatasetError(f"{where} is not a JPEG (it starts with {image[:8]!r}); replace or remove it")
        raw = RawSample(key=name, index=ref.index, image=image, label=label, shard=self.uri + name)
        sample = decode(raw, self.image_size)
        return sample if epoch is None else (*sample, epoch)

    def _no_answer(self, ref: SampleRef) -> DatasetError:
        return DatasetError(f"object {self.uri}{self.names[ref.container]} gave no bytes in {FETCH_TIMEOUT_S:g} s; "
                            "check the source (`mountctl status` for a mount)")

    def _fetch_bounded(self, ref: SampleRef) -> bytes:
        """``_fetch`` on a daemon thread this one can walk away from: a read blocked in a hung mount never holds
        the caller (with no DataLoader worker, the training loop itself), the next read, or the exit."""
        try:
            return self._threads().submit(self._fetch, ref).result(FETCH_TIMEOUT_S)
        except _NoAnswer:
            raise self._no_answer(ref) from None

    def __getitem__(self, item: Any) -> tuple[Any, ...]:
        index, epoch = _split(item)
        ref = self.refs[index]
        return self._sample(ref, self._fetch_bounded(ref), epoch)

    def _threads(self) -> _BoundedReads:
        if self._pool is None or self._pool_pid != os.getpid():  # after fork: the parent's reads are not ours
            self._pool = _BoundedReads(max(1, self.readahead_threads))
            self._pool_pid = os.getpid()
        return self._pool

    def _read_ahead(self, items: Sequence[Any]) -> Iterator[tuple[Any, ...]]:
        """Fetch in parallel (bounded in threads and bytes), decode in order."""
        pool = self._threads()
        wanted = [(_split(item), self.refs[_split(item)[0]]) for item in items]
        pending: collections.deque[tuple[_Read[bytes], SampleRef, int | None, int]] = collections.deque()
        in_flight, following = 0, 0
        try:
            while following < len(wanted) or pending:
                while following < len(wanted) and len(pending) < 2 * self.readahead_threads:
                    (_, epoch), ref = wanted[following]
                    size = ref.length or ref.jpg_size
                    if pending and in_flight + size > self.readahead_bytes:
                        break
                    pending.append((pool.submit(self._fetch, ref), ref, epoch, size))
                    in_flight += size
                    following += 1
                future, ref, epoch, size = pending.popleft()
                try:
                    data = future.result(FETCH_TIMEOUT_S)
                except _NoAnswer:
                    raise self._no_answer(ref) from None
                in_flight -= size
                yield self._sample(ref, data, epoch)
        finally:  # a batch that failed leaves its other reads behind: none may hold a place the next batch needs
            for future, *_ in pending:
                future.abandon()

    def __getitems__(self, items: Sequence[Any]) -> list[tuple[Any, ...]]:
        if self.readahead_threads <= 0 or len(items) <= 1:
            return [self[item] for item in items]
        return list(self._read_ahead(items))


class _NoAnswer(Exception):
    """A read gave nothing within its bound (not the read's own errors, a socket's TimeoutError among them)."""


class _Read(Generic[T]):
    """One read on a daemon thread of its own; ``result`` waits for it with a bound, and walks away after it.

    Not a pool's worker: the interpreter joins those at exit, and a fixed number of them ends up each holding a read
    that never returned, with every later read queued behind them."""

    def __init__(self, fn: Callable[[], T], places: threading.Semaphore) -> None:
        self._fn = fn
        self._places = places
        self._lock = threading.Lock()
        self._holding = False  # it holds one of the places (it is reading)
        self._abandoned = False
        self._done = threading.Event()
        self._value: Any = None
        self._error: BaseException | None = None
        threading.Thread(target=self._run, name="mountctl-map-read", daemon=True).start()

    def _run(self) -> None:
        self._places.acquire()
        with self._lock:
            if self._abandoned:  # walked away from before it began: give the place back, read nothing
                self._places.release()
                return
            self._holding = True
        try:
            self._value = self._fn()
        except BaseException as exc:  # noqa: BLE001  handed to the caller, which raises it
            self._error = exc
        finally:
            self._give_back()
            self._done.set()

    def _give_back(self) -> None:
        with self._lock:
            if self._holding:
                self._holding = False
                self._places.release()

    def result(self, timeout_s: float) -> T:
        """The read's bytes; ``_NoAnswer`` when it gave nothing within ``timeout_s`` (it is then abandoned)."""
        if not self._done.wait(timeout_s):
            self.abandon()
            raise _NoAnswer(f"no answer within {timeout_s:g}s")
        if self._error is not None:
            raise self._error
        return self._value

    def abandon(self) -> None:
        """Walk away: its thread stays blocked until the mount answers, holding no place and nothing in use."""
        with self._lock:
            self._abandoned = True
        self._give_back()


class _BoundedReads:
    """At most ``limit`` reads at once, each on a daemon thread of its own (``_Read``); an abandoned read frees its
    place at once, so reads that hang never fill the places the next reads need."""

    def __init__(self, limit: int) -> None:
        self._places = threading.Semaphore(max(1, limit))

    def submit(self, fn: Callable[..., T], *args: Any) -> _Read[T]:
        return _Read(lambda: fn(*args), self._places)


def collate(samples: Sequence[tuple[Any, ...]]) -> dict[str, Any]:
    """A batch as the shard path makes it: images, labels, index (a tuple) and epoch."""
    return {"images": torch.stack([s[0] for s in samples]),
            "labels": torch.tensor([s[1] for s in samples], dtype=torch.long),
            "index": tuple(int(s[2]) for s in samples),
            "epoch": samples[0][3] if len(samples[0]) > 3 else 0}


def image_folder(root: str, *, image_size: int, reader: ObjectReader | None = None, **options: Any
                 ) -> MapSampleDataset:
    """An ImageFolder over a directory (e.g. a mount): ``root/<class>/<image>``, classes sorted by name.

    The same classes, ``class_to_idx`` and sample order as torchvision's ``ImageFolder``; a class
    folder without images is an error naming it, as it would silently shift no labels but train none.
    """
    from mountctl.pytorch.data.sources.mountpoint import FileReader

    try:
        classes = sorted(entry.name for entry in os.scandir(root) if entry.is_dir())
    except OSError as exc:
        raise DatasetError(f"cannot list the image folder {root}: {exc}") from None
    if not classes:
        raise DatasetError(f"{root} has no class folders: an ImageFolder holds ROOT/<class>/<image>.jpg")
    names: list[str] = []
    refs: list[SampleRef] = []
    for label, name in enumerate(classes):
        files = sorted(f for f in os.listdir(os.path.join(root, name))
                       if f.lower().rpartition(".")[2] in IMAGE_EXTENSIONS)
        if not files:
            raise DatasetError(f"class folder {os.path.join(root, name)} holds no images "
                               f"({'/'.join(IMAGE_EXTENSIONS)}); add images or remove the folder")
        for file in files:
            refs.append(SampleRef(len(names), len(names), label))
            names.append(f"{name}/{file}")
    return MapSampleDataset(reader or FileReader(root, tuple(names)), names, refs, image_size=image_size,
                            uri=root.rstrip("/") + "/", classes=classes, **options)
