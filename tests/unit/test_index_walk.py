"""The tar walk that indexes a user's shard: shards written by webdataset's real ``ShardWriter`` to local files.

No S3 here: a local file is the stream, and ``_FileClient`` answers the ranged GETs that ``RangedReader`` makes
(a stand-in, since the unit layer has no server; the end-to-end tests run the same walk against SeaweedFS).
"""

from __future__ import annotations

import json
import os
import tarfile
import zlib

import pytest

from mountctl.pytorch.data.index.tarsamples import split_member_name
from mountctl.pytorch.data.index.tarwalk import LabelRule, RangedReader, StreamReader, walk_shard
from mountctl.pytorch.errors import DatasetError, TruncatedShard


def _write(directory, samples: list[dict]) -> str:
    import webdataset

    os.makedirs(directory, exist_ok=True)
    pattern = os.path.join(str(directory), "train-%06d.tar")
    with webdataset.ShardWriter(pattern, maxcount=len(samples), verbose=0) as writer:
        for sample in samples:
            writer.write(sample)
    return pattern % 0


class _FileClient:
    """Serves ``get_object(Range=...)`` from a local file, counting requests (a stand-in for S3: see above)."""

    def __init__(self, path: str) -> None:
        self.path = path

    def get_object(self, *, Bucket: str, Key: str, Range: str) -> dict:  # noqa: N803  (boto3's spelling)
        import io

        start, stop = (int(v) for v in Range.removeprefix("bytes=").split("-"))
        with open(self.path, "rb") as f:
            f.seek(start)
            return {"Body": io.BytesIO(f.read(stop - start + 1))}


def _walk(path: str, *, ranged: bool = False, rule: LabelRule | None = None):
    rule = rule or LabelRule()
    size = os.path.getsize(path)
    if ranged:
        reader = RangedReader(_FileClient(path), "b", "k", size)
        return (*walk_shard("train-000000.tar", reader, size, rule, "etag1"), reader)
    with open(path, "rb") as f:
        reader = StreamReader(f)
        return (*walk_shard("train-000000.tar", reader, size, rule, "etag1"), reader)


def _samples(n: int, **extra) -> list[dict]:
    return [{"__key__": f"img{i:07d}", "jpg": bytes([i]) * (700 + 300 * i), "cls": i % 3, **extra} for i in range(n)]


def test_members_and_labels_match_what_tarfile_reads(tmp_path):
    path = _write(tmp_path, _samples(5))
    info, keys, label = _walk(path)[:3]
    with tarfile.open(path) as tar:
        members = {m.name: m for m in tar.getmembers()}
        for k, (image_at, image_size, cls_at, cls_size, crc) in enumerate(info.members):
            jpg, cls = members[f"img{k:07d}.jpg"], members[f"img{k:07d}.cls"]
            assert (image_at, image_size, cls_at, cls_size) == (jpg.offset_data, jpg.size, cls.offset_data, cls.size)
            assert crc == zlib.crc32(tar.extractfile(jpg).read())
    assert info.labels == (0, 1, 2, 0, 1) and keys == {"jpg", "cls"} and label == "cls"
    assert (info.samples, info.etag, info.bytes) == (5, "etag1", os.path.getsize(path))


def test_ranged_header_reads_give_the_same_index_without_reading_images(tmp_path):
    samples = [{"__key__": f"big{i}", "png": bytes(200_000), "cls": i} for i in range(4)]
    path = _write(tmp_path, samples)
    streamed, ranged = _walk(path), _walk(path, ranged=True)
    assert [m[:4] for m in streamed[0].members] == [m[:4] for m in ranged[0].members]
    assert streamed[0].labels == ranged[0].labels == (0, 1, 2, 3)
    assert all(m[4] is None for m in ranged[0].members)  # no image read, so no CRC: the ETag guards the shard
    assert ranged[3].bytes_read < os.path.getsize(path) / 20 < streamed[3].bytes_read


def test_long_member_names_in_pax_headers_are_followed(tmp_path):
    key = "deep/" * 30 + "sample"
    path = _write(tmp_path, [{"__key__": key, "jpg": b"\xff\xd8\xff" + bytes(10), "cls": 4}])
    info = _walk(path)[0]
    assert info.samples == 1 and info.labels == (4,)


def test_labels_from_a_json_field_or_txt(tmp_path):
    json_path = _write(tmp_path / "j", [{"__key__": "a", "webp": b"x", "json": json.dumps({"y": 7}).encode()}])
    assert _walk(json_path, rule=LabelRule("y"))[0].labels == (7,)
    with pytest.raises(DatasetError, match="--label-field"):
        _walk(json_path)
    with pytest.raises(DatasetError, match="no field 'z'"):
        _walk(json_path, rule=LabelRule("z"))
    txt_path = _write(tmp_path / "t", [{"__key__": "a", "jpeg": b"x", "txt": "12"}])
    assert _walk(txt_path)[0].labels == (12,)


def test_a_sample_without_an_image_is_named(tmp_path):
    path = _write(tmp_path, [{"__key__": "only-label", "cls": 1}])
    with pytest.raises(DatasetError, match="sample 'only-label' of shard train-000000.tar .* no image"):
        _walk(path)


@pytest.mark.parametrize("cut", [700, 2560])
def test_a_cut_shard_is_truncated_not_shorter(cut, tmp_path):
    path = _write(tmp_path, _samples(3))
    with open(path, "r+b") as f:
        f.truncate(cut)
    with pytest.raises(TruncatedShard, match="shard train-000000.tar is truncated"):
        _walk(path)


def test_sample_names_split_at_the_basename_first_dot():
    assert split_member_name("a.b/img001.seg.png") == ("a.b/img001", "seg.png")
    assert split_member_name("noext") is None


def test_auto_reads_headers_only_where_a_member_streams_slower_than_a_round_trip():
    import io
    import time

    from mountctl.pytorch.data.index.indexer import choose_reader

    # What the first shard measured: 20 ms to the first byte, then 50 MB in 1 s.
    timed = StreamReader(io.BytesIO(), started=time.monotonic() - 1.02, bytes_read=50_000_000, first_byte_s=0.02)
    assert choose_reader(timed, headers=4, size=40_000_000)[0] == "headers"  # 10 MB members: 200 ms each
    assert choose_reader(timed, headers=2_000, size=40_000_000)[0] == "stream"  # 20 KB members: 0.4 ms each
