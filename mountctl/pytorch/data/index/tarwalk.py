"""One walk over a shard's tar headers, reading only what indexing needs, by stream or by ranged reads.

The walk asks a reader for bytes at offsets that only grow: each member's
512-byte header, and the content of the small label members (``cls``,
``txt``, ``json``).  ``StreamReader`` serves that from one GET of the whole
shard, reading through what it skips (and CRC-ing the images it passes);
``RangedReader`` jumps with one ranged GET per header and never fetches an
image.  Which costs less depends on the store: a round trip against the bytes
an image takes to stream (``indexer.choose_reader`` measures both).

Members are placed into samples by ``tarsamples.SampleGroups`` (webdataset's rule), the same as
the shard reader at training time places them.
"""

from __future__ import annotations

import json
import time
import zlib
from dataclasses import dataclass, field
from typing import Any, Protocol

from mountctl.pytorch.data.index.manifest import IMAGE_KEYS, LABEL_KEYS, Member, ShardInfo
from mountctl.pytorch.data.index.tarsamples import SampleGroups, image_key
from mountctl.pytorch.errors import DatasetError, TruncatedShard

__all__ = ["ShardReader", "StreamReader", "RangedReader", "LabelRule", "walk_shard"]

_BLOCK = 512
_MAX_LABEL_BYTES = 1 << 20


class ShardReader(Protocol):
    bytes_read: int
    requests: int

    def read(self, offset: int, length: int) -> bytes: ...

    def crc(self, offset: int, length: int) -> int | None: ...


@dataclass
class StreamReader:
    """One GET of the whole shard, read forward in bounded chunks: never the whole shard in memory."""

    body: Any  # a file-like object positioned at byte 0
    chunk: int = 1 << 20
    position: int = 0
    bytes_read: int = 0
    requests: int = 1
    started: float = field(default_factory=time.monotonic)
    first_byte_s: float | None = None  # seconds from the GET to its first bytes: the store's round trip

    def _take(self, length: int) -> bytes:
        data = self.body.read(length)
        if self.first_byte_s is None:
            self.first_byte_s = time.monotonic() - self.started
        self.position += len(data)
        self.bytes_read += len(data)
        return data

    def _skip_to(self, offset: int) -> None:
        if offset < self.position:
            raise ValueError(f"a stream cannot go back from {self.position} to {offset}")
        while self.position < offset:
            if not self._take(min(self.chunk, offset - self.position)):
                raise EOFError(f"the stream ended at byte {self.position}")

    def read(self, offset: int, length: int) -> bytes:
        self._skip_to(offset)
        data = self._take(length)
        while len(data) < length:
            more = self._take(length - len(data))
            if not more:
                break
            data += more
        return data

    def crc(self, offset: int, length: int) -> int | None:
        self._skip_to(offset)
        crc, left = 0, length
        while left:
            data = self._take(min(self.chunk, left))
            if not data:
                raise EOFError(f"the stream ended at byte {self.position}")
            crc, left = zlib.crc32(data, crc), left - len(data)
        return crc


@dataclass
class RangedReader:
    """Ranged GETs at each header; ``window`` bytes per GET take a small label member along."""

    client: Any
    bucket: str
    key: str
    size: int
    pin: dict[str, str] = field(default_factory=dict)  # IfMatch: the ETag the listing gave
    window: int = 2 * _BLOCK
    bytes_read: int = 0
    requests: int = 0
    _start: int = 0
    _data: bytes = b""

    def read(self, offset: int, length: int) -> bytes:
        if not (self._start <= offset and offset + length <= self._start + len(self._data)):
            stop = min(self.size, offset + max(length, self.window)) - 1
            if stop < offset:
                return b""
            self._data = self.client.get_object(Bucket=self.bucket, Key=self.key, Range=f"bytes={offset}-{stop}",
                                                **self.pin)["Body"].read()
            self._start = offset
            self.requests += 1
            self.bytes_read += len(self._data)
        return self._data[offset - self._start:offset - self._start + length]

    def crc(self, offset: int, length: int) -> int | None:
        return None  # the image is never fetched: the ETag guards the shard instead


@dataclass(frozen=True)
class LabelRule:
    """Where a sample's integer label is: ``cls`` or ``txt`` text, or a field of its ``json``."""

    json_field: str | None = None

    def label(self, values: dict[str, bytes], where: str) -> tuple[str, int]:
        """(the key used, the label) from the sample's label members."""
        if self.json_field is not None and "json" in values:
            try:
                value = json.loads(values["json"])[self.json_field]
            except (ValueError, KeyError, TypeError):
                raise DatasetError(f"{where}: its .json has no field {self.json_field!r}; pass the field that "
                                   "holds the class with --label-field") from None
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise DatasetError(f"{where}: .json field {self.json_field!r} is {value!r}, not a class number")
            return "json:" + self.json_field, value
        for key in ("cls", "txt"):
            if key in values:
                try:
                    value = int(values[key].strip())
                except ValueError:
                    raise DatasetError(f"{where}: its .{key} is {values[key][:20]!r}, not an integer class; "
                                       "for labels in a .json, pass --label-field FIELD") from None
                if value < 0:
                    raise DatasetError(f"{where}: its .{key} is a negative class ({value})")
                return key, value
        if "json" in values:
            raise DatasetError(f"{where}: the label is in a .json: name its field with --label-field FIELD")
        raise DatasetError(f"{where} has no label member (.cls, .txt, or .json with --label-field)")


def _octal(field_bytes: bytes) -> int:
    if field_bytes[:1] and field_bytes[0] & 0x80:  # GNU base-256 for sizes of 8 GiB and more
        return int.from_bytes(field_bytes[1:], "big")
    text = field_bytes.split(b"\0", 1)[0].strip()
    return int(text, 8) if text else 0


def _pax_path(data: bytes) -> str | None:
    """The ``path`` record of a pax extended header (``LEN path=VALUE\\n`` records)."""
    position = 0
    while position < len(data):
        length_text, _, _ = data[position:position + 20].partition(b" ")
        if not length_text.isdigit():
            break
        record = data[position:position + int(length_text)]
        keyword, _, value = record.partition(b" ")[2].partition(b"=")
        if keyword == b"path":
            return value.rstrip(b"\n").decode("utf-8")
        position += int(length_text)
    return None


def _header_name(header: bytes) -> str:
    name = header[:100].split(b"\0", 1)[0].decode("utf-8")
    prefix = header[345:500].split(b"\0", 1)[0].decode("utf-8") if header[257:262] == b"ustar" else ""
    return f"{prefix}/{name}" if prefix else name


@dataclass
class _Sample:
    key: str
    images: dict[str, tuple[int, int, int | None]] = field(default_factory=dict)  # image key -> (offset, size, crc)
    label_at: dict[str, tuple[int, int]] = field(default_factory=dict)  # label key -> (offset, size)
    values: dict[str, bytes] = field(default_factory=dict)
    keys: list[str] = field(default_factory=list)


def walk_shard(name: str, reader: ShardReader, size: int, rule: LabelRule,
               etag: str | None) -> tuple[ShardInfo, set[str], str]:
    """The shard's index entry (``first_index`` 0), the member keys seen, and the label key used."""
    samples: list[tuple[Member, int]] = []
    keys_seen: set[str] = set()
    label_keys: set[str] = set()
    current: _Sample | None = None
    groups = SampleGroups(name)

    def finish(sample: _Sample) -> None:
        where = f"sample {sample.key!r} of shard {name}"
        image = image_key(sample.images)
        if image is None:
            raise DatasetError(f"{where} has members {sample.keys} but no image ({'/'.join(IMAGE_KEYS)})")
        used, label = rule.label(sample.values, where)
        label_keys.add(used)
        at, size, crc = sample.images[image]
        samples.append(((at, size, *sample.label_at[used.partition(":")[0]], crc), label))

    offset, long_name = 0, None
    try:
        while offset + _BLOCK <= size:
            header = reader.read(offset, _BLOCK)
            if len(header) < _BLOCK:
                raise EOFError(f"a header at byte {offset} is cut off")
            if header == bytes(_BLOCK):
                break
            length, kind = _octal(header[124:136]), header[156:157]
            data_at = offset + _BLOCK
            offset = data_at + -(-length // _BLOCK) * _BLOCK
            if data_at + length > size:
                raise EOFError(f"member {_header_name(header)!r} runs past the end of the object")
            if kind in (b"L", b"x"):
                extra = reader.read(data_at, length)
                long_name = extra.rstrip(b"\0").decode("utf-8") if kind == b"L" else _pax_path(extra)
                continue
            if kind not in (b"0", b"\0", b"7"):
                long_name = None
                continue
            member, long_name = long_name or _header_name(header), None
            placed = groups.place(member)
            if placed is None:
                continue
            key, ext, starts = placed
            if starts:
                if current is not None:
                    finish(current)
                current = _Sample(key)
            assert current is not None  # the first member placed always starts a sample
            current.keys.append(ext)
            keys_seen.add(ext)
            if ext in IMAGE_KEYS:
                current.images[ext] = (data_at, length, reader.crc(data_at, length))
            elif ext in LABEL_KEYS:
                if length > _MAX_LABEL_BYTES:
                    raise DatasetError(f"{member} in shard {name} is {length} bytes: too large for a label")
                current.values[ext] = reader.read(data_at, length)
                current.label_at[ext] = (data_at, length)
        else:
            raise EOFError(f"no end-of-archive block in {size} bytes")
        if current is not None:
            finish(current)
    except (EOFError, UnicodeDecodeError, ValueError) as exc:
        raise TruncatedShard(f"shard {name} is truncated or not a tar after {len(samples)} samples ({exc})",
                             shard=name) from None
    if not samples:
        raise DatasetError(f"shard {name} holds no samples")
    info = ShardInfo(name, len(samples), 0, size, members=tuple(m for m, _ in samples), etag=etag,
                     labels=tuple(label for _, label in samples))
    return info, keys_seen, ",".join(sorted(label_keys))
