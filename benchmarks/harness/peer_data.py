"""The bench dataset in each peer library's own format (LitData chunks, MosaicML Streaming MDS), converted and checked.

The peers read the very samples the WebDataset shards hold: every sample's
JPEG bytes, label and global index, written with ``litdata.optimize`` and
``streaming.MDSWriter``, chunked at the dataset's shard size, into a sibling
prefix of a dataset that ``make`` wrote (``s3://b/bench/img224-16MB-n2000.litdata/``),
or under ``--peer-data`` (``s3://w/peers/imagenet.litdata/``).  A user's own
(indexed) data gets no default place: its bucket may be read-only, and nothing
is written into or beside it unless the user names where (``peer_data_base``).
The conversion writes locally, reads the result back with the library's own
reader, compares sample count and checksum with the source, uploads, and
writes ``peer.json`` last: a prefix with a ``peer.json`` whose source
fingerprint matches the manifest is complete and is not converted again.

The checksum (``SampleChecksum``) does not depend on sample order, so a
loader that shuffles can check what it read against ``peer.json``.
"""

from __future__ import annotations

import functools
import hashlib
import json
import multiprocessing
import os
import shutil
import tempfile
import weakref
import zlib
from collections.abc import Callable, Iterator
from typing import Any

from benchmarks.harness.config import PEERS
from benchmarks.harness.limits import copy_shards
from mountctl import S3Settings, parse_s3_uri, s3
from mountctl.pytorch.data.datasets.shards import read_shard
from mountctl.pytorch.data.index.manifest import Manifest, ShardInfo
from mountctl.pytorch.errors import DatasetError

__all__ = ["PEERS", "PEER_FORMATS", "PeerMissing", "SampleChecksum", "sample_digest", "peer_uri", "peer_env", "litdata_storage_options",
           "check_peers_installed", "source_fingerprint", "ensure_peer_data", "load_peer_marker", "MARKER_NAME",
           "peer_data_base", "fresh_connections_after_fork"]

PEER_FORMATS = {"litdata": "litdata-optimized/1", "streaming": "mds/1"}
_DISTRIBUTIONS = {"litdata": "litdata", "streaming": "streaming-community"}
MARKER_NAME = "peer.json"
# One column set for both formats: what a sample of the WebDataset shards holds.
MDS_COLUMNS = {"index": "int", "cls": "int", "jpg": "bytes"}


class PeerMissing(DatasetError):
    """A peer library the benchmark compares with is not installed."""


def check_peers_installed(peers: tuple[str, ...] = PEERS) -> None:
    """Fail, naming the package, when a peer cannot be imported: the comparison must not vanish silently."""
    import importlib

    for peer in peers:
        try:
            importlib.import_module(peer)
        except ImportError as exc:
            raise PeerMissing(f"the peer library {peer!r} cannot be imported ({exc}); install the pinned "
                              f"{_DISTRIBUTIONS.get(peer, peer)} from requirements.txt (scripts/setup.sh does) or leave the "
                              "peer cells out with --peers ''") from None


def peer_uri(uri: str, peer: str, peer_data: str | None = None) -> str:
    """The prefix holding ``uri``'s dataset in ``peer``'s format: under ``peer_data``, else its sibling.

    Under ``peer_data`` the copy is named after the dataset's last path part
    (``s3://own/imagenet/`` -> ``PEER_DATA/imagenet.litdata/``); its ``peer.json``
    fingerprint tells two datasets of one name apart.
    """
    if peer not in PEERS:
        raise ValueError(f"unknown peer {peer!r}: one of {', '.join(PEERS)}")
    if peer_data is None:
        return uri.rstrip("/") + f".{peer}/"
    return str(parse_s3_uri(peer_data)).rstrip("/") + f"/{parse_s3_uri(uri).name}.{peer}/"


def peer_data_base(manifest: Manifest, uri: str, peer_data: str | None, peers: tuple[str, ...]) -> str | None:
    """Where the peers' copies of ``uri`` go (``peer_uri``'s ``peer_data``); None: beside the data.

    Beside the data only for data ``make`` wrote (the bench's own prefix).  A user's indexed data is
    read-only to us: without ``--peer-data`` the bench stops before it measures or writes anything,
    and a ``--peer-data`` inside the dataset's prefix is refused (it would add objects to the user's data).
    """
    if not peers:
        return peer_data
    if peer_data is not None:
        data, place = parse_s3_uri(uri), parse_s3_uri(peer_data)
        if data.bucket == place.bucket and place.prefix.startswith(data.prefix):
            raise DatasetError(f"--peer-data {place} lies inside the dataset {data}: the peers' copies would be "
                               "written into your data; name a prefix outside it, e.g. "
                               "--peer-data s3://your-writable-bucket/prefix/")
        return str(place)
    if manifest.origin == "make":
        return None
    raise DatasetError(f"{uri} is your own data (indexed, not written by `make`), so the peers' copies "
                       "(LitData, MosaicML Streaming) are not written beside it: name a writable place with "
                       "--peer-data s3://your-writable-bucket/prefix/, or leave the peer cells out with --peers ''")


# -- connection: the one place the peers learn the endpoint ---------------------------------


def peer_env(settings: S3Settings, base: dict[str, str] | None = None) -> dict[str, str]:
    """The environment for a child process that runs a peer library against ``settings``' endpoint.

    Both peers make boto3 clients from the standard chain (keys, region); MosaicML Streaming
    takes a custom endpoint only from ``S3_ENDPOINT_URL``.  LitData's endpoint travels as
    ``litdata_storage_options`` (built from the same settings in the child).
    """
    env = settings.child_env(base)
    if settings.endpoint_url:
        env["S3_ENDPOINT_URL"] = settings.endpoint_url
        if settings.endpoint_url.startswith("http://"):
            env["AWS_ALLOW_HTTP"] = "true"  # LitData's chunk prefetch (obstore) refuses plain HTTP without it
    else:
        env.pop("S3_ENDPOINT_URL", None)
    return env


def litdata_storage_options(settings: S3Settings) -> dict[str, Any]:
    """LitData's ``storage_options``: keyword arguments of its boto3 client (keys stay in the environment)."""
    from botocore.config import Config

    options: dict[str, Any] = {"region_name": settings.region}
    if settings.endpoint_url:
        options["endpoint_url"] = settings.endpoint_url
    # LitData replaces its own client config with this one: keep its retry policy, add the addressing.
    options["config"] = Config(retries={"max_attempts": 10, "mode": "adaptive"},
                               s3={"addressing_style": "path" if settings.path_style else "auto"})
    return options


# MosaicML Streaming's downloaders whose boto3 client a forked process must not inherit (see below).
_PER_PROCESS_DOWNLOADERS: weakref.WeakSet[Any] = weakref.WeakSet()
_AT_FORK_REGISTERED = [False]


def _forget_inherited_clients() -> None:
    for downloader in list(_PER_PROCESS_DOWNLOADERS):
        downloader.clean_up()  # the next download makes a client, and connections, of this process's own


def fresh_connections_after_fork(dataset: Any) -> Any:
    """Make every process forked from this one (DataLoader workers) open its own connections for ``dataset``.

    A MosaicML Streaming ``StreamingDataset`` (streaming-community 0.14) keeps one boto3 client per
    stream, made when it reads index.json in the opening process.  Pickling drops that client
    (spawned workers are safe), but fork copies it with its pool of keep-alive connections, so the
    first request of every worker goes into the one TCP connection the parent opened: the workers
    read parts of each other's responses.  On the far store that cost a worker 60 s (botocore's
    read timeout, then a retry) or cached a shard whose bytes did not match its index.  The
    library's own ``clean_up()`` drops the client; here it runs in each forked child.
    """
    downloaders = [getattr(stream, "_downloader", None) for stream in getattr(dataset, "streams", None) or []]
    if not downloaders or not all(callable(getattr(d, "clean_up", None)) for d in downloaders):
        raise DatasetError("MosaicML Streaming's dataset has no streams with a downloader that has clean_up(): this "
                           "is not the version pinned in requirements.txt, and its DataLoader workers could share "
                           "one S3 connection; install the pinned streaming-community")
    _PER_PROCESS_DOWNLOADERS.update(downloaders)
    if not _AT_FORK_REGISTERED[0]:
        os.register_at_fork(after_in_child=_forget_inherited_clients)
        _AT_FORK_REGISTERED[0] = True
    return dataset


# -- checksum -----------------------------------------------------------------------------


def sample_digest(index: int, label: int, data: bytes) -> int:
    """One sample's 64-bit share of ``SampleChecksum``: CRC-32 of (index, label), then of the bytes."""
    return (zlib.crc32(f"{index}:{label}".encode()) << 32) | zlib.crc32(data)


class SampleChecksum:
    """Count and order-independent checksum of (index, label, image bytes): equal sets, equal checksums.

    CRC-32 keeps it cheap enough to run inside a measured loader; the index and label
    seed a second CRC, so a sample read twice, dropped or relabelled changes the sum.
    """

    def __init__(self) -> None:
        self.count = 0
        self._sum = 0

    def add(self, index: int, label: int, data: bytes) -> None:
        self.add_digest(sample_digest(index, label, data))

    def add_digest(self, digest: int) -> None:
        """A sample's ``sample_digest``, computed where the sample was read (e.g. in a DataLoader worker)."""
        self._sum = (self._sum + digest) % (1 << 64)
        self.count += 1

    def merge(self, other: "SampleChecksum") -> None:
        self._sum = (self._sum + other._sum) % (1 << 64)
        self.count += other.count

    @property
    def value(self) -> str:
        return f"{self._sum:016x}"

    @classmethod
    def of(cls, count: int, value: str) -> "SampleChecksum":
        made = cls()
        made.count, made._sum = count, int(value, 16)
        return made


def source_fingerprint(manifest: Manifest) -> str:
    """What identifies the source dataset: its shards' SHA-256s in order (a user's shards: their ETags)."""
    digest = hashlib.sha256()
    for shard in manifest.shards:
        digest.update(f"{shard.name}:{shard.samples}:{shard.sha256 or shard.etag}\n".encode())
    return digest.hexdigest()[:32]


# -- conversion ---------------------------------------------------------------------------


def _shard_samples(directory: str, shard: ShardInfo) -> Iterator[dict[str, Any]]:
    """One local shard's samples as the peers store them (also ``litdata.optimize``'s fn: a generator)."""
    with open(os.path.join(directory, shard.name), "rb") as stream:
        # labels: what the index read (a user's cls, json field or txt); None for make's shards (their .cls)
        for sample in read_shard(shard.name, stream, first_index=shard.first_index, start=0, stop=shard.samples,
                                 expected=shard.samples, labels=shard.labels):
            yield {"index": sample.index, "cls": sample.label, "jpg": sample.image}


def _write_litdata(shards_dir: str, manifest: Manifest, out: str, chunk_bytes: int) -> None:
    import litdata

    # fn runs in a spawned worker (forking a process that holds threads and a torch runtime is unsafe);
    # one worker and no reordering keep the chunks in manifest order.
    previous = multiprocessing.get_start_method(allow_none=True)
    try:
        litdata.optimize(fn=functools.partial(_shard_samples, shards_dir), inputs=list(manifest.shards),
                         output_dir=out, chunk_bytes=chunk_bytes, num_workers=1, reorder_files=False,
                         start_method="spawn", verbose=False, mode="overwrite")
    finally:
        # optimize sets the start method of the whole process (force=True); left so, every DataLoader this
        # process starts later (a bench's cells, a user's training) would spawn its workers, each one
        # importing torch again, instead of forking them.
        multiprocessing.set_start_method(previous, force=True)


def _write_mds(shards_dir: str, manifest: Manifest, out: str, chunk_bytes: int) -> None:
    from streaming import MDSWriter

    with MDSWriter(out=out, columns=MDS_COLUMNS, size_limit=chunk_bytes, compression=None) as writer:
        for shard in manifest.shards:
            for sample in _shard_samples(shards_dir, shard):
                writer.write(sample)


def _read_litdata(directory: str) -> Iterator[dict[str, Any]]:
    from litdata import StreamingDataset

    yield from StreamingDataset(input_dir=directory, shuffle=False)


def _read_mds(directory: str) -> Iterator[dict[str, Any]]:
    from streaming.base.format import reader_from_json

    with open(os.path.join(directory, "index.json"), encoding="utf-8") as f:
        index = json.load(f)
    for shard_json in index["shards"]:
        reader = reader_from_json(directory, None, shard_json)
        for i in range(reader.samples):
            yield reader.get_item(i)


_WRITERS: dict[str, Callable[[str, Manifest, str, int], None]] = {"litdata": _write_litdata, "streaming": _write_mds}
_LOCAL_READERS: dict[str, Callable[[str], Iterator[dict[str, Any]]]] = {"litdata": _read_litdata,
                                                                        "streaming": _read_mds}


def checksum_of(samples: Iterator[dict[str, Any]]) -> SampleChecksum:
    checksum = SampleChecksum()
    for sample in samples:
        checksum.add(int(sample["index"]), int(sample["cls"]), bytes(sample["jpg"]))
    return checksum


def load_peer_marker(settings: S3Settings, uri: str, peer: str, peer_data: str | None = None
                     ) -> dict[str, Any] | None:
    """``peer.json`` of ``uri``'s ``peer`` copy, or None when there is none (not converted, or cut off)."""
    from botocore.exceptions import ClientError

    location = parse_s3_uri(peer_uri(uri, peer, peer_data))
    try:
        body = s3.short_client(settings).get_object(Bucket=location.bucket, Key=location.prefix + MARKER_NAME)["Body"]
        return dict(json.loads(body.read()))
    except ClientError as exc:
        if s3.is_not_found(exc):
            return None
        raise


def _complete(settings: S3Settings, where: str, peer: str, manifest: Manifest, marker: dict[str, Any] | None
              ) -> bool:
    """The marker matches this dataset and every file it lists is there at its size (one LIST of ``where``)."""
    if not marker or marker.get("source") != source_fingerprint(manifest) or marker.get("format") != PEER_FORMATS[peer]:
        return False
    location = parse_s3_uri(where)
    sizes = s3.list_object_sizes(s3.short_client(settings), location.bucket, location.prefix)
    return all(sizes.get(name) == size for name, size in marker["files"].items())


def ensure_peer_data(settings: S3Settings, uri: str, manifest: Manifest, peer: str, *, chunk_bytes: int,
                     progress: Callable[[str], None] | None = None, peer_data: str | None = None) -> dict[str, Any]:
    """``peer.json`` of ``uri``'s copy in ``peer``'s format, converting (and checking) it first when needed.

    The copy goes where ``peer_uri(uri, peer, peer_data)`` says (decide ``peer_data`` with
    ``peer_data_base``); the answer's ``"uri"`` is that place, for the cells that read it.
    """
    where = peer_uri(uri, peer, peer_data)
    marker = load_peer_marker(settings, uri, peer, peer_data)
    if _complete(settings, where, peer, manifest, marker):
        return {**(marker or {}), "converted": False, "uri": where}
    if progress:
        progress(f"converting {uri} to {peer} at {where}")
    work = tempfile.mkdtemp(prefix=f"mountctl-peer-{peer}-")
    try:
        local = copy_shards(settings, uri, manifest, os.path.join(work, "shards"))
        source = SampleChecksum()
        for shard in manifest.shards:
            for sample in _shard_samples(local.root, shard):
                source.add(sample["index"], sample["cls"], sample["jpg"])
        out = os.path.join(work, peer)
        _WRITERS[peer](local.root, manifest, out, chunk_bytes)
        written = checksum_of(_LOCAL_READERS[peer](out))
        if (written.count, written.value) != (manifest.num_images, source.value):
            raise DatasetError(f"the {peer} copy of {uri} read back {written.count} samples with checksum "
                               f"{written.value}; the shards hold {manifest.num_images} with {source.value}: "
                               f"the conversion is wrong, nothing was uploaded")
        marker = {"peer": peer, "format": PEER_FORMATS[peer], "source": source_fingerprint(manifest),
                  "num_images": manifest.num_images, "checksum": source.value, "chunk_bytes": chunk_bytes,
                  "files": _upload(settings, out, where)}
    finally:
        shutil.rmtree(work, ignore_errors=True)
    location = parse_s3_uri(where)
    # Written last: its presence says the upload finished.
    s3.client(settings).put_object(Bucket=location.bucket, Key=location.prefix + MARKER_NAME,
                                   Body=json.dumps(marker, indent=1).encode(), ContentType="application/json")
    return {**marker, "converted": True, "uri": where}


def _upload(settings: S3Settings, directory: str, uri: str) -> dict[str, int]:
    """Every file under ``directory`` to ``uri``; {relative name: size}."""
    location = parse_s3_uri(uri)
    client = s3.client(settings)
    files = {}
    for root, _, names in os.walk(directory):
        for name in sorted(names):
            path = os.path.join(root, name)
            relative = os.path.relpath(path, directory)
            client.upload_file(path, location.bucket, location.prefix + relative)
            files[relative] = os.path.getsize(path)
    return files
