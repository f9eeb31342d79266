"""The index and the read group tar members into samples by one rule, webdataset's, and fail when they disagree.

Shards written by webdataset's real ``ShardWriter`` to local files (no S3 here: a file is the stream); the
end-to-end test in tests/test_own_data.py indexes and trains the same kind of shard through the real store.
"""

from __future__ import annotations

import io
import os
import tarfile
from dataclasses import replace

import pytest

from mountctl.pytorch.data.datasets.shards import read_shard
from mountctl.pytorch.data.index.tarsamples import sample_members
from mountctl.pytorch.data.index.tarwalk import LabelRule, StreamReader, walk_shard
from mountctl.pytorch.errors import DatasetError

KEYS = ["img0", "__a", "img2", "img3"]


def _write(directory, keys: list[str]) -> str:
    import webdataset

    os.makedirs(directory, exist_ok=True)
    pattern = os.path.join(str(directory), "train-%06d.tar")
    with webdataset.ShardWriter(pattern, maxcount=len(keys), verbose=0) as writer:
        for n, key in enumerate(keys):
            writer.write({"__key__": key, "jpg": bytes([n]) * (600 + 100 * n), "cls": 10 + n})
    return pattern % 0


def _index(path: str):
    with open(path, "rb") as f:
        return walk_shard("train-000000.tar", StreamReader(f), os.path.getsize(path), LabelRule(), None)[0]


def _read(path: str, info) -> list[tuple[str, int, bytes]]:
    with open(path, "rb") as f:
        return [(s.key, s.label, s.image) for s in read_shard(
            "train-000000.tar", f, first_index=0, start=0, stop=info.samples, expected=info.samples,
            labels=info.labels, members=info.members)]


def test_a_sample_keyed_with_two_underscores_is_indexed_and_read_with_its_own_label(tmp_path):
    path = _write(tmp_path, KEYS)
    info = _index(path)
    assert info.samples == 4 and info.labels == (10, 11, 12, 13)
    read = _read(path, info)
    assert [(key, label) for key, label, _ in read] == [(k, 10 + n) for n, k in enumerate(KEYS)]
    assert [image[:1] for _, _, image in read] == [bytes([n]) for n in range(4)]


def test_grouping_is_webdatasets_own(tmp_path):
    """Metadata members (``__name__``) are skipped, ``__a`` is a sample, suffixes are lowercased: as webdataset reads."""
    from webdataset.tariterators import group_by_keys, tar_file_expander

    path = _write(tmp_path, KEYS)
    with tarfile.open(path, "a") as tar:
        for name, data in (("__index__", b"meta"), ("__meta__/x.json", b"{}"), ("img4.JPG", b"\xff"),
                           ("img4.cls", b"1"), ("noext", b"?")):
            entry = tarfile.TarInfo(name)
            entry.size = len(data)
            tar.addfile(entry, io.BytesIO(data))
    with open(path, "rb") as f:
        theirs = [(s["__key__"], sorted(k for k in s if not k.startswith("__"))) for s in group_by_keys(
            tar_file_expander([{"url": path, "stream": f}], eof_value=None))]
    with tarfile.open(path) as tar:
        ours = [(key, sorted(exts)) for key, exts in sample_members(m.name for m in tar.getmembers() if m.isreg())]
    assert ours == theirs
    assert ("__a", ["cls", "jpg"]) in ours and ("img4", ["cls", "jpg"]) in ours


def test_an_index_that_disagrees_with_its_shard_fails_loudly_and_shifts_no_label(tmp_path):
    """An index that left out ``__a`` (what the indexer wrote before both used one rule) against the shard."""
    path = _write(tmp_path, KEYS)
    info = _index(path)
    keep = (0, 2, 3)
    stale = replace(info, samples=3, members=tuple(info.members[k] for k in keep),
                    labels=tuple(info.labels[k] for k in keep))
    with pytest.raises(DatasetError, match=r"train-000000.tar does not match its index: sample 1 .*'__a'"):
        _read(path, stale)


def test_a_shard_with_more_samples_than_its_index_fails_at_its_end(tmp_path):
    path = _write(tmp_path, KEYS)
    info = _index(path)
    short = replace(info, samples=3, members=info.members[:3], labels=info.labels[:3])
    with pytest.raises(DatasetError, match="train-000000.tar does not match its index: .*more than the 3"):
        _read(path, short)
