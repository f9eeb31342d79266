"""``resnet.py index URI``: describe a user's own data once, so that training can account for every sample.

One paginated LIST finds the shards (``.tar`` directly under the prefix) or a
class tree (``<class>/<file>.jpg|jpeg|png|webp``, labelled as torchvision's
``ImageFolder`` labels it: class names sorted).  A class tree needs nothing
but the LIST.  Shards are each read once, by a bounded pool of readers, each
holding at most a chunk of its shard (``tarwalk``).  Every shard indexed is
appended to a state file at once, so an interrupted run resumes where it
stopped.  The first unreadable shard, or Ctrl-C, stops the run at once: no
queued shard is started, and readers under way stop at their next chunk.  A
shard of an earlier index at the same size and ETag is not read again.  The
result is a wids shard index, written beside the data or to ``--index-out``;
nothing else is ever written under the data's prefix.

A prefix that holds ``manifest.json`` was written by ``make``: indexing it keeps
today's meaning (``tarindex.index_dataset`` adds the tar index to that manifest).
"""

from __future__ import annotations

import collections
import hashlib
import json
import os
import queue
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, TextIO

from mountctl import S3Settings, private_dir, s3
from mountctl.pytorch.data.index.location import DataTarget, IndexLocation, parse_data_uri
from mountctl.pytorch.data.index.manifest import (
    FILES_FORMAT,
    IMAGE_KEYS,
    MANIFEST_NAME,
    FileInfo,
    Manifest,
    ShardInfo,
    from_json_text,
    written_by_mountctl,
)
from mountctl.pytorch.data.index.tarwalk import LabelRule, RangedReader, ShardReader, StreamReader, walk_shard
from mountctl.pytorch.errors import DatasetError, NoShards

__all__ = ["IndexConfig", "index_data", "READ_MODES", "choose_reader", "class_tree"]

READ_MODES = ("auto", "stream", "headers")


@dataclass(frozen=True)
class IndexConfig:
    uri: str
    index_out: str | None = None
    label_field: str | None = None
    read: str = "auto"  # stream the shards, read their tar headers by ranged GETs, or measure and choose
    jobs: int = 8  # shards read at once
    image_size: int = 224  # the side training decodes to: any stored size is resized and cropped to it


class _Progress:
    """One line on stderr, rewritten in place at most a few times a second."""

    def __init__(self, out: TextIO | None) -> None:
        self.out, self.last = out, 0.0

    def show(self, text: str, *, final: bool = False) -> None:
        if self.out is None or (not final and time.monotonic() - self.last < 0.25):
            return
        self.last = time.monotonic()
        self.out.write(f"\r{text}" + ("\n" if final else ""))
        self.out.flush()


def _list(client: Any, target: DataTarget, progress: _Progress) -> dict[str, s3.StoredObject]:
    """Every object under the prefix (recursively: a class tree is one level down), paginated."""
    def shown(count: int, final: bool = False) -> None:
        progress.show(f"listed {count:,} objects under {target.uri}", final=final)

    found = s3.list_objects(client, target.prefix.bucket, target.prefix.prefix, on_page=shown)
    shown(len(found), final=True)
    return found


def class_tree(listed: dict[str, s3.StoredObject], image_size: int) -> Manifest | None:
    """``<class>/<file>`` images as ``ImageFolder`` orders them (classes, then files, each sorted), or None."""
    by_class: dict[str, list[str]] = {}
    for key in listed:
        directory, _, name = key.partition("/")
        if name and "/" not in name and name.rpartition(".")[2].lower() in IMAGE_KEYS:
            by_class.setdefault(directory, []).append(key)
    if not by_class:
        return None
    classes = sorted(by_class)
    files = tuple(FileInfo(key, label, listed[key].size, listed[key].etag)
                  for label, name in enumerate(classes) for key in sorted(by_class[name]))
    return Manifest(num_images=len(files), image_size=image_size, num_classes=len(classes), seed=0, shards=(),
                    format=FILES_FORMAT, files=files, origin="index", label="dir", classes=tuple(classes))


class _State:
    """The shards indexed so far, one JSON line each, appended as each finishes: what a rerun skips."""

    def __init__(self, path: str, header: dict[str, Any]) -> None:
        self.path, self.header, self.lock = path, header, threading.Lock()
        self.closed = False  # set once the run stops: a reader abandoned at exit must not write half a line
        self.done: dict[str, dict[str, Any]] = {}
        self.kept = 0  # shards this run appended
        try:
            with open(path, encoding="utf-8") as f:
                lines = f.read().splitlines()
        except FileNotFoundError:
            lines = []
        if lines and self._parse(lines[0]) == header:
            for line in lines[1:]:
                entry = self._parse(line)  # a line cut by a kill does not parse: that shard is read again
                if entry is not None:
                    self.done[entry["name"]] = entry
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w", encoding="utf-8") as f:
            f.writelines(json.dumps(e) + "\n" for e in (header, *self.done.values()))

    @staticmethod
    def _parse(line: str) -> Any:
        try:
            return json.loads(line)
        except ValueError:
            return None

    def reusable(self, name: str, size: int, etag: str | None) -> tuple[ShardInfo, set[str], str] | None:
        entry = self.done.get(name)
        if entry is None or entry["bytes"] != size or entry["etag"] != etag:
            return None
        return ShardInfo(name, entry["samples"], 0, size, members=tuple(tuple(m) for m in entry["members"]),
                         etag=etag, labels=tuple(entry["labels"])), set(entry["keys"]), entry["label"]

    def adopt(self, previous: Manifest) -> None:
        """The shards of an earlier index of the same data: a re-index reads only what changed since."""
        for shard in previous.shards:
            if shard.name not in self.done and shard.members is not None and shard.labels is not None:
                self.done[shard.name] = {"name": shard.name, "bytes": shard.bytes, "etag": shard.etag,
                                         "samples": shard.samples, "members": shard.members,
                                         "labels": shard.labels, "keys": [], "label": previous.label}

    def add(self, info: ShardInfo, keys: set[str], label: str) -> None:
        entry = {"name": info.name, "bytes": info.bytes, "etag": info.etag, "samples": info.samples,
                 "members": info.members, "labels": info.labels, "keys": sorted(keys), "label": label}
        with self.lock:
            if self.closed:
                return
            with open(self.path, "a", encoding="utf-8") as f:
                f.write(json.dumps(entry) + "\n")
                self.kept += 1

    def close(self) -> None:
        """No more writes: what is in the file now is what a rerun skips."""
        if self.lock.acquire(timeout=_STOP_WAIT_S):  # held only for one line's write
            self.closed = True
            self.lock.release()

    def remove(self) -> None:
        os.unlink(self.path)


def _state_path(config: IndexConfig, target: DataTarget) -> str:
    """Keyed by the data and the label rule, not by the output: a run refused at the write (a read-only prefix)
    and run again with ``--index-out`` reads nothing twice."""
    digest = hashlib.sha256(f"{target.uri}\n{config.label_field}".encode()).hexdigest()[:16]
    return os.path.join(private_dir("index-state"), digest + ".jsonl")


def _read_shard(client: Any, target: DataTarget, name: str, size: int, etag: str | None, mode: str,
                rule: LabelRule, stop: threading.Event) -> tuple[tuple[ShardInfo, set[str], str], ShardReader]:
    from botocore.exceptions import ClientError

    key = target.prefix.prefix + name
    # If-Match on every GET: a shard replaced while it is read is an error, not an index of two versions.
    pin = {"IfMatch": f'"{etag}"'} if etag else {}
    try:
        if mode == "headers":
            reader: ShardReader = RangedReader(_Stoppable(client, stop), target.prefix.bucket, key, size, pin=pin)
            return walk_shard(name, reader, size, rule, etag), reader
        asked = time.monotonic()
        body = client.get_object(Bucket=target.prefix.bucket, Key=key, **pin)["Body"]
        stream = StreamReader(_Stoppable(body, stop), started=asked)
        try:
            return walk_shard(name, stream, size, rule, etag), stream
        finally:
            body.close()
    except ClientError as exc:
        code = exc.response.get("Error", {}).get("Code", "")
        if code in ("PreconditionFailed", "412"):
            raise DatasetError(f"shard {target.uri}{name} changed while it was being indexed; run the same index "
                               "command again once the data is settled (shards already read are kept)") from None
        raise DatasetError(f"reading shard {target.uri}{name} failed ({code or exc}); run the same index command "
                           "again (shards already read are kept)") from None


class _Stopped(Exception):
    """A reader saw the run stopping (another shard failed, or Ctrl-C): its shard is not kept."""


class _Stoppable:
    """A GET's body (``read``) or an S3 client (``get_object``) that first checks the run's stop flag, so a reader
    under way stops at its next chunk or request instead of reading its whole shard."""

    def __init__(self, inner: Any, stop: threading.Event) -> None:
        self.inner, self.stop = inner, stop

    def _check(self) -> None:
        if self.stop.is_set():
            raise _Stopped

    def read(self, size: int = -1) -> bytes:
        self._check()
        return self.inner.read(size)

    def get_object(self, **request: Any) -> Any:
        self._check()
        return self.inner.get_object(**request)


_STOP_WAIT_S = 5.0  # how long a stopping run waits for readers under way before leaving them behind


def _read_all(names: list[str], jobs: int, work: Callable[[str], tuple[Any, ShardReader]],
              done: Callable[[str, Any, ShardReader], None], stop: threading.Event) -> None:
    """``work(name)`` on ``jobs`` daemon threads, ``done`` in this thread; the first error stops the rest.

    Not ``ThreadPoolExecutor``: leaving its block waits for every queued shard, and the interpreter joins its
    threads at exit without a bound.  Here a reader takes the next name only while the run goes on, one under
    way stops at its next chunk or request, and one stuck in a request is left behind after ``_STOP_WAIT_S``.
    """
    queued = collections.deque(names)
    finished: queue.Queue[tuple[str, Any, BaseException | None]] = queue.Queue()

    def reader() -> None:
        while not stop.is_set():
            try:
                name = queued.popleft()
            except IndexError:
                return
            try:
                result, shard_reader = work(name)
            except _Stopped:
                return
            except Exception as exc:  # handed to the main thread, which raises it
                stop.set()
                finished.put((name, None, exc))
                return
            finished.put((name, (result, shard_reader), None))

    threads = [threading.Thread(target=reader, name=f"index-{n}", daemon=True)
               for n in range(min(max(1, jobs), len(names)))]
    for thread in threads:
        thread.start()
    try:
        left = len(names)
        while left:
            try:  # a bounded wait, so Ctrl-C is seen and a reader that died unseen cannot hang the run
                name, value, error = finished.get(timeout=1.0)
            except queue.Empty:
                if not any(t.is_alive() for t in threads) and finished.empty():
                    raise DatasetError(f"the index readers stopped with {left} shards unread; run the same "
                                       "index command again (shards already read are kept)") from None
                continue
            if error is not None:
                raise error
            done(name, *value)
            left -= 1
    finally:
        stop.set()
        deadline = time.monotonic() + _STOP_WAIT_S
        for thread in threads:
            thread.join(max(0.0, deadline - time.monotonic()))


def choose_reader(stream: StreamReader, headers: int, size: int) -> tuple[str, dict[str, float]]:
    """Ranged header reads pay one round trip per member; streaming pays the bytes between headers.

    Measured on the shard just streamed: its first-byte time stands for a round trip, and the rate after
    it for what one connection streams.  Headers win once a member takes longer to stream than a round trip.
    """
    elapsed = time.monotonic() - stream.started
    round_trip = stream.first_byte_s or 0.0
    rate = stream.bytes_read / max(1e-6, elapsed - round_trip)
    per_header_stream_s = size / max(1, headers) / rate
    mode = "headers" if round_trip < per_header_stream_s else "stream"
    return mode, {"round_trip_ms": round(round_trip * 1000, 2), "stream_mb_s": round(rate / 1e6, 1),
                  "stream_ms_per_member": round(per_header_stream_s * 1000, 3)}


def _index_shards(config: IndexConfig, settings: S3Settings, target: DataTarget,
                  shards: dict[str, s3.StoredObject], state: _State, progress: _Progress) -> dict[str, Any]:
    client = s3.client(settings, read_timeout=120)
    rule = LabelRule(config.label_field)
    results: dict[str, tuple[ShardInfo, set[str], str]] = {}
    for name, stored in shards.items():
        size, etag = stored.size, stored.etag
        reused = state.reusable(name, size, etag)
        if reused is not None:
            results[name] = reused
    todo = [name for name in shards if name not in results]
    facts: dict[str, Any] = {"reused_from_state": len(results), "bytes_read": 0, "requests": 0}
    mode = "stream" if config.read == "auto" else config.read
    started = time.monotonic()

    stop = threading.Event()

    def one(name: str, how: str) -> tuple[tuple[ShardInfo, set[str], str], ShardReader]:
        result, reader = _read_shard(client, target, name, shards[name].size, shards[name].etag, how, rule, stop)
        state.add(*result)  # kept at once: an error or Ctrl-C later loses nothing already read
        return result, reader

    def done(name: str, result: tuple[ShardInfo, set[str], str], reader: ShardReader) -> None:
        results[name] = result
        facts["bytes_read"] += reader.bytes_read
        facts["requests"] += reader.requests
        progress.show(f"indexed {len(results):,}/{len(shards):,} shards")

    try:
        if todo and config.read == "auto":  # the first shard streamed and timed; the rest read the cheaper way
            name = todo.pop(0)
            first = one(name, "stream")
            done(name, *first)
            info = results[name][0]
            mode, facts["measured"] = choose_reader(first[1], 2 * info.samples, info.bytes)  # type: ignore[arg-type]
        facts["read"] = mode
        _read_all(todo, config.jobs, lambda name: one(name, mode), done, stop)
    except KeyboardInterrupt:
        raise KeyboardInterrupt(f"{facts['reused_from_state'] + state.kept:,} of {len(shards):,} shards are indexed "
                                "and kept; run the same command again to read only the rest") from None
    finally:
        stop.set()
        state.close()
        progress.show(f"indexed {len(results):,}/{len(shards):,} shards", final=True)
    facts["seconds"] = round(time.monotonic() - started, 3)
    return {"results": results, **facts}


def _shards_manifest(results: dict[str, tuple[ShardInfo, set[str], str]], config: IndexConfig) -> Manifest:
    shards, first, labels, keys = [], 0, set(), set()
    for name in sorted(results):  # S3's listing order, which is also a brace pattern's
        info, shard_keys, label = results[name]
        shards.append(replace(info, first_index=first))
        first += info.samples
        labels.add(label)
        keys |= shard_keys
    if len(labels) > 1:
        raise DatasetError(f"the shards take their labels from different members ({', '.join(sorted(labels))}); "
                           "choose one with --label-field FIELD (json) or make them alike")
    top = max(max(s.labels or (0,)) for s in shards)
    return Manifest(num_images=first, image_size=config.image_size, num_classes=top + 1, seed=0,
                    shards=tuple(shards), origin="index", label=labels.pop())


def index_data(config: IndexConfig, settings: S3Settings, *, progress: TextIO | None = sys.stderr) -> dict[str, Any]:
    """Index ``config.uri``'s shards or class tree; write the index; return a summary."""
    from mountctl.pytorch.data.index.tarindex import index_dataset

    target = parse_data_uri(config.uri)
    client = s3.short_client(settings)
    shown = _Progress(progress)
    listed = _list(client, target, shown)
    if MANIFEST_NAME in listed and config.index_out is None and _made_here(settings, target):
        return index_dataset(settings, target.uri)  # written by make: its manifest gains the tar index
    output = IndexLocation.parse(config.index_out) if config.index_out else IndexLocation.beside(target.prefix)
    previous = _previous(settings, output, config)  # before any shard is read: it refuses a file of the user's
    wanted = set(target.names) if target.names is not None else None
    shards = {n: v for n, v in listed.items() if "/" not in n and n.endswith(".tar") and (wanted is None or n in wanted)}
    started = time.monotonic()
    facts: dict[str, Any] = {}
    if shards:
        state = _State(_state_path(config, target), {"data": target.uri, "label_field": config.label_field})
        if previous is not None:
            state.adopt(previous)
        facts = _index_shards(config, settings, target, shards, state, shown)
        manifest = _shards_manifest(facts.pop("results"), config)
    else:
        tree = class_tree(listed, config.image_size)
        if tree is None:
            raise NoShards(f"nothing to index at {config.uri}: no .tar shards directly under it and no "
                           f"<class>/<image>.{{{','.join(IMAGE_KEYS)}}} files one level down")
        manifest, state = tree, None
    beside = output.s3 == target.prefix and output.key_or_path.rpartition("/")[0] + "/" == target.prefix.prefix
    body = json.dumps(manifest.to_wids("" if beside else target.uri), separators=(",", ":")).encode()
    _write(settings, output, body, target)
    if state is not None:
        state.remove()
    seconds = time.monotonic() - started
    objects = len(shards) or len(manifest.files)
    return {"uri": target.uri, "index": str(output), "layout": manifest.layout, "shards": len(manifest.shards),
            "files": len(manifest.files), "samples": manifest.num_images, "classes": manifest.num_classes,
            "label": manifest.label, "seconds": round(seconds, 3), "objects_per_s": round(objects / max(seconds, 1e-6), 1),
            "index_bytes": len(body), "peak_rss_mb": _peak_rss_mb(), **facts,
            **({"bytes_read_per_shard": round(facts["bytes_read"] / len(shards))} if shards else {})}


def _made_here(settings: S3Settings, target: DataTarget) -> bool:
    """Whether the prefix's ``manifest.json`` is make's (it gains the tar index) or the user's own (left alone)."""
    body = IndexLocation(target.prefix, target.prefix.prefix + MANIFEST_NAME).read(settings)
    return body is not None and written_by_mountctl(body)


def _previous(settings: S3Settings, output: IndexLocation, config: IndexConfig) -> Manifest | None:
    """The index already at ``output``, if it was built with the same label rule; another of ours is rebuilt,
    and a file that mountctl did not write (another tool's wids index) is refused: it is the user's."""
    body = output.read(settings)
    if body is None:
        return None
    if not written_by_mountctl(body):
        raise DatasetError(f"{output} exists and was not written by mountctl (another tool's index, or a file of "
                           "yours): it is left alone; write the index elsewhere with --index-out PATH or "
                           "--index-out s3://BUCKET/PREFIX/, then train with --index")
    try:
        manifest, _ = from_json_text(body, str(output))
    except DatasetError:
        return None
    wanted = "json:" + config.label_field if config.label_field else None
    same_rule = manifest.label == wanted if wanted else not manifest.label.startswith("json:")
    return manifest if manifest.origin == "index" and same_rule else None


def _peak_rss_mb() -> float | None:
    """This process's peak resident memory (VmHWM: unlike ru_maxrss, it starts afresh at exec)."""
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return round(int(line.split()[1]) / 1024, 1)
    except OSError:
        return None
    return None


def _write(settings: S3Settings, output: IndexLocation, body: bytes, target: DataTarget) -> None:
    from botocore.exceptions import ClientError

    try:
        output.write(settings, body)
    except ClientError as exc:
        code = exc.response.get("Error", {}).get("Code", "")
        raise DatasetError(f"could not write the index to {output} ({code or exc}): if {target.uri} is read-only "
                           "to you, write it elsewhere with --index-out PATH or --index-out s3://BUCKET/PREFIX/ "
                           "(shards already read are kept and not read again), then train with --index") from None
    except OSError as exc:
        raise DatasetError(f"could not write the index to {output} ({exc.strerror or exc}); choose another "
                           "--index-out") from None
