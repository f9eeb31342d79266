"""``MapSampleDataset``: a map-style dataset, one sample per index, from single objects or indexed shards.

A sample is either a whole object (the files layout: ``train/<class>/<key>.jpg``)
or a byte range of a shard found through the manifest's tar index.  The bytes
come from a source kind's ``map_reader`` (a file through the mount, with
``pread`` for ranges; s3torchconnector's ``S3MapDataset``; s3fs), then go
through the same decode as the shard path, so every kind yields identical
samples.  It works with any sampler (``shuffle=True``, ``DistributedSampler``,
``ExactlyOnceBatchSampler``) and any number of workers.

Read-ahead: ``__getitems__`` (what a DataLoader calls with a whole batch of
indices) fetches the batch's objects from a thread pool, at most
``readahead_threads`` at once and at most ``readahead_bytes`` fetched but not
yet decoded, decoding each as soon as it is its turn; so one object's latency
overlaps the others' instead of adding up.  ``readahead_threads=0`` reads one
at a time.
"""

from __future__ import annotations

import collections
import concurrent.futures
import os
import queue
import threading
import zlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import torch
from torch.utils.data import Dataset

from mountctl import MountctlError
from mountctl.pytorch.data.manifest import MANIFEST_NAME, Manifest
from mountctl.pytorch.data.shards import IMAGE_EXTENSIONS, RawSample, decode
from mountctl.pytorch.errors import DatasetError, remake_hint

__all__ = ["MapSampleDataset", "SampleRef", "ObjectReader", "image_folder", "collate", "FETCH_TIMEOUT_S",
           "JPEG_MAGIC"]

FETCH_TIMEOUT_S = 300.0  # a bound on any one object's read
JPEG_MAGIC = b"\xff\xd8\xff"


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
        self._pool: _DaemonThreads | None = None
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
        """``_fetch`` on a pool thread this one can walk away from: a read blocked in a hung mount never holds
        the caller (with no DataLoader worker, the training loop itself)."""
        # A daemon thread of its own per read: a read that never returns is abandoned there, so the next read does
        # not queue behind it, and the interpreter does not wait for it at exit (a pool's workers are joined then).
        future: concurrent.futures.Future[bytes] = concurrent.futures.Future()

        def read() -> None:
            try:
                future.set_result(self._fetch(ref))
            except BaseException as exc:  # noqa: BLE001  handed to the caller, which raises it
                future.set_exception(exc)

        threading.Thread(target=read, name="mountctl-bounded-read", daemon=True).start()
        try:
            return future.result(timeout=FETCH_TIMEOUT_S)
        except concurrent.futures.TimeoutError:
            raise self._no_answer(ref) from None

    def __getitem__(self, item: Any) -> tuple[Any, ...]:
        index, epoch = _split(item)
        ref = self.refs[index]
        return self._sample(ref, self._fetch_bounded(ref), epoch)

    def _threads(self) -> _DaemonThreads:
        if self._pool is None or self._pool_pid != os.getpid():
            self._pool = _DaemonThreads(max(1, self.readahead_threads), "mountctl-readahead")
            self._pool_pid = os.getpid()
        return self._pool

    def _read_ahead(self, items: Sequence[Any]) -> Iterator[tuple[Any, ...]]:
        """Fetch in parallel (bounded in threads and bytes), decode in order."""
        pool = self._threads()
        wanted = [(_split(item), self.refs[_split(item)[0]]) for item in items]
        pending: collections.deque[tuple[concurrent.futures.Future[bytes], SampleRef, int | None, int]] = (
            collections.deque())
        in_flight, following = 0, 0
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
                data = future.result(timeout=FETCH_TIMEOUT_S)
            except concurrent.futures.TimeoutError:
                raise self._no_answer(ref) from None
            in_flight -= size
            yield self._sample(ref, data, epoch)

    def __getitems__(self, items: Sequence[Any]) -> list[tuple[Any, ...]]:
        if self.readahead_threads <= 0 or len(items) <= 1:
            return [self[item] for item in items]
        return list(self._read_ahead(items))


class _DaemonThreads:
    """The read-ahead's threads, as daemons: a read blocked in a hung mount is abandoned at its bound, never joined.

    Not ``ThreadPoolExecutor``: the interpreter joins its workers at exit, so one read that never returned made the
    process hang when it ended."""

    def __init__(self, threads: int, name: str) -> None:
        self._jobs: queue.SimpleQueue[tuple[concurrent.futures.Future[Any], Callable[..., Any], tuple[Any, ...]]] = (
            queue.SimpleQueue())
        for number in range(threads):
            threading.Thread(target=self._serve, name=f"{name}-{number}", daemon=True).start()

    def submit(self, fn: Callable[..., Any], *args: Any) -> concurrent.futures.Future[Any]:
        future: concurrent.futures.Future[Any] = concurrent.futures.Future()
        self._jobs.put((future, fn, args))
        return future

    def _serve(self) -> None:
        while True:
            future, fn, args = self._jobs.get()
            if not future.set_running_or_notify_cancel():
                continue
            try:
                future.set_result(fn(*args))
            except BaseException as exc:  # noqa: BLE001  handed to whoever waits on the future
                future.set_exception(exc)


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
