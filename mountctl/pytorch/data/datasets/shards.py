"""WebDataset shard parsing, decoding and batching: one code path for every source kind.

Whatever delivered the bytes (a mounted file, s3torchconnector, s3fs), the
tar stream is read member by member and grouped into samples by webdataset's
rule (``tarsamples``, which the index uses too), then the same decode, so all
three kinds produce identical samples, and a shard that does not match its
index fails where they part instead of giving samples their neighbours' labels.  Images stay
uint8 here; normalisation happens on the accelerator (``model.py``), which
moves a quarter of the bytes to the device.
"""

from __future__ import annotations

import io
import itertools
import tarfile
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, BinaryIO

import torch

from mountctl.pytorch.data.decode.jpeg import DECODE_ERRORS, decode_jpeg, jpeg_frame
from mountctl.pytorch.data.index.manifest import IMAGE_KEYS, Member
from mountctl.pytorch.data.index.tarsamples import SampleGroups, image_key
from mountctl.pytorch.errors import DatasetError, TruncatedShard, remake_hint

__all__ = ["RawSample", "read_shard", "decode", "reordered", "batched", "IMAGE_EXTENSIONS"]

IMAGE_EXTENSIONS = IMAGE_KEYS
# A mount program that S3 stops authorizing (a revoked or expired key) serves files as empty; say so first.
_NO_BYTES = ("a mount whose program lost access to S3 (a revoked, rotated or expired key: look for 403 or "
             "AccessDenied in the mount's log) reads like this; if the credentials are good, the shard was "
             "emptied: re-run `resnet.py make` with the original arguments to rewrite it")


@dataclass(frozen=True)
class RawSample:
    """One sample as stored: encoded image bytes and its label, before any decoding."""

    key: str
    index: int  # global index in manifest order; what exactly-once accounting counts
    image: bytes
    label: int
    shard: str = ""


@dataclass
class _Sample:
    key: str
    values: dict[str, bytes]
    offsets: dict[str, int]  # member key -> where its data starts in the shard


def _samples_of(name: str, stream: BinaryIO) -> Iterator[_Sample]:
    """The shard's samples in tar order, members placed by ``SampleGroups`` (the index's rule)."""
    groups = SampleGroups(name)
    current: _Sample | None = None
    with tarfile.open(fileobj=stream, mode="r|*") as tar:
        for info in tar:
            if not info.isreg():
                continue
            placed = groups.place(info.name)
            if placed is None:
                continue
            key, member, starts = placed
            if starts:
                if current is not None:
                    yield current
                current = _Sample(key, {}, {})
            assert current is not None  # the first member placed always starts a sample
            data = tar.extractfile(info).read()  # type: ignore[union-attr]
            if len(data) != info.size:
                raise EOFError(f"{info.name} is cut off")
            current.values[member] = data
            current.offsets[member] = info.offset_data
            tar.members = []  # type: ignore[attr-defined]  # a stream keeps no list of what it passed
    if current is not None:
        yield current


def _check_against_index(name: str, sample: _Sample, position: int, member: Member | None, hint: str) -> None:
    """The sample at ``position`` is the one the index describes there: its image starts where the index says."""
    image = image_key(sample.values)
    if member is None or image is None or sample.offsets[image] == member[0]:
        return
    raise DatasetError(f"shard {name} does not match its index: sample {position} is {sample.key!r} with its "
                       f"image at byte {sample.offsets[image]}, the index says byte {member[0]} (the shard was "
                       f"rewritten, or indexed by an older mountctl that grouped its members differently); "
                       f"reading on would give samples other samples' labels: {hint}")


def _to_raw(name: str, sample: _Sample, index: int, label: int | None, hint: str) -> RawSample:
    values = sample.values
    image_at = image_key(values)
    image = None if image_at is None else values[image_at]
    if image is not None and label is not None:  # the index read the label (cls, txt or a json field) already
        return RawSample(sample.key, index, image, label, name)
    if image is None or "cls" not in values:
        # What a shard cut off between a sample's two members looks like.
        raise TruncatedShard(f"shard {name} is truncated or malformed: sample {sample.key!r} has "
                             f"only {sorted(values)}, not an image ({'/'.join(IMAGE_EXTENSIONS)}) and a .cls "
                             f"label; {hint}", shard=name)
    try:
        label = int(values["cls"])
    except ValueError:
        raise DatasetError(f"sample {sample.key!r} in shard {name} has a .cls that is not an integer "
                           f"label: {bytes(values['cls'][:20])!r}") from None
    return RawSample(sample.key, index, image, label, name)


def _reason(exc: BaseException) -> str:
    """A tar error's own words: webdataset appends the stream and URL to ``args`` (so ``str()`` is a tuple)."""
    first = exc.args[0] if exc.args else exc
    return str(first).split(" @ ")[0].strip("() ") or type(exc).__name__


def read_shard(name: str, stream: BinaryIO, *, first_index: int, start: int, stop: int,
               expected: int, labels: Sequence[int] | None = None, members: Sequence[Member] | None = None,
               hint: str = "") -> Iterator[RawSample]:
    """Samples ``start`` to ``stop`` of one shard, stopping once past ``stop``.

    A tar stream that ends early or breaks off mid-member raises
    ``TruncatedShard`` naming the shard: silently training on fewer samples
    would break the exactly-once promise.  ``labels``: each sample's label
    from the index (a user's data); else each sample's ``.cls`` is read.
    ``members``: the index's tar index; each sample read must start where it says, and a reader that
    reaches the shard's last sample checks that no other follows.
    ``hint``: what to run when the shard does not match its description.
    """
    hint = hint or remake_hint()
    position = 0
    try:
        for sample in _samples_of(name, stream):
            if position >= stop:
                if members is None or stop < expected:
                    return
                raise DatasetError(f"shard {name} does not match its index: it holds more than the {expected} "
                                   f"samples the index lists (sample {sample.key!r} follows); {hint}")
            if members is not None:
                _check_against_index(name, sample, position, members[position] if position < len(members)
                                     else None, hint)
            if position >= start:
                yield _to_raw(name, sample, first_index + position,
                              None if labels is None else labels[position], hint)
            position += 1
    except (tarfile.TarError, EOFError) as exc:
        if position == 0 and "empty file" in str(exc):
            raise TruncatedShard(f"shard {name} gave no bytes at all: {_NO_BYTES}", shard=name) from None
        raise TruncatedShard(f"shard {name} is truncated or corrupt after {position} of {expected} samples "
                             f"({_reason(exc)}); {hint}", shard=name) from None
    if position == 0 < stop:
        raise TruncatedShard(f"shard {name} held no sample where the manifest says {expected}: {_NO_BYTES}",
                             shard=name)
    if position < stop:
        raise TruncatedShard(f"shard {name} ended after {position} samples but the manifest says {expected}; "
                             f"it was truncated or overwritten: {hint}", shard=name)


def decode(sample: RawSample, image_size: int) -> tuple[torch.Tensor, int, int]:
    """(uint8 CHW image, ``image_size`` square, label, index).

    A JPEG already ``image_size`` square (what ``resnet.py make`` writes) is
    decoded by TorchCodec: the same libjpeg-turbo pixels as Pillow, 1.3-2x its
    rate (BENCHMARKS.md, "JPEG decoding").  Anything else goes through Pillow,
    whose ``draft`` lets a large JPEG decode straight to a smaller scale, then a
    resize (shorter side) and a centre crop; Pillow also reads PNG and WebP.
    The choice reads only the JPEG's frame header (``jpeg_frame``).
    """
    import numpy as np
    from PIL import Image

    try:
        if jpeg_frame(sample.image) == (image_size, image_size, 3):
            return decode_jpeg(sample.image), sample.label, sample.index
        opened = Image.open(io.BytesIO(sample.image))
        opened.draft("RGB", (image_size, image_size))
        image = opened.convert("RGB")
    except (OSError, SyntaxError, ValueError, *DECODE_ERRORS) as exc:  # what Pillow and TorchCodec raise
        raise DatasetError(f"sample {sample.key!r} in shard {sample.shard} is not a decodable image "
                           f"({exc}): its stored bytes are damaged; rewrite or remove that sample") from None
    if image.size != (image_size, image_size):
        scale = image_size / min(image.size)
        width, height = max(image_size, round(image.width * scale)), max(image_size, round(image.height * scale))
        left, top = (width - image_size) // 2, (height - image_size) // 2
        image = image.resize((width, height), Image.Resampling.BILINEAR).crop(
            (left, top, left + image_size, top + image_size))
    pixels = torch.from_numpy(np.asarray(image).copy())
    return pixels.permute(2, 0, 1).contiguous(), sample.label, sample.index


def reordered(samples: Iterable[RawSample], wanted: Sequence[int]) -> Iterator[RawSample]:
    """The samples whose ``index`` is in ``wanted``, in that order; holds only those read ahead of their turn."""
    iterator = iter(samples)
    keep = set(wanted)
    ahead: dict[int, RawSample] = {}
    for index in wanted:
        while index not in ahead:
            sample = next(iterator, None)
            if sample is None:
                raise DatasetError(f"a reader planned sample {index} but its shard ended first; the shards do not "
                                   "match the manifest")
            if sample.index in keep:
                ahead[sample.index] = sample
        yield ahead.pop(index)


def batched(samples: Iterable[tuple[torch.Tensor, int, int]], sizes: Sequence[int], *,
            encoded: bool = False) -> Iterator[dict[str, Any]]:
    """Stack decoded samples into batches of exactly the planned ``sizes``.

    ``encoded``: the samples hold JPEG bytes of differing lengths (``--decode gpu``),
    kept as a list under ``"jpegs"`` for the device to decode.
    """
    iterator = iter(samples)
    for size in sizes:
        chunk = list(itertools.islice(iterator, size))
        if len(chunk) != size:
            raise DatasetError(f"a reader planned a batch of {size} but only {len(chunk)} samples were left; "
                               "the shards do not match the manifest")
        images, labels, indices = zip(*chunk, strict=True)
        # "index" stays a tuple of ints: Lightning moves tensors to the device, and the
        # accounting of which samples were seen belongs on the host.
        pixels = {"jpegs": list(images)} if encoded else {"images": torch.stack(images)}
        yield {**pixels, "labels": torch.tensor(labels, dtype=torch.long),
               "index": tuple(indices)}
