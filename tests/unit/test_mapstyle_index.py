"""Map-style pure parts: the tar index, the exactly-once batch sampler, bounded read-ahead, the manifest fields.

No S3 and no FUSE: shards are built in memory by the same code as ``resnet.py make``, and the
read-ahead test reads them from a local directory through the same ``FileReader`` the mount kind uses.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
import sys
import textwrap
import threading
import time

import pytest

from mountctl.pytorch.data.datasets.mapstyle import MapSampleDataset, SampleRef
from mountctl.pytorch.data.index.manifest import Manifest
from mountctl.pytorch.data.index.tarindex import index_tar
from mountctl.pytorch.data.sampling.mapsampler import ExactlyOnceBatchSampler
from mountctl.pytorch.data.sources.mountpoint import FileReader
from mountctl.pytorch.data.synthetic import MakeConfig, build_shard, sample_jpeg
from mountctl.pytorch.errors import DatasetError, TruncatedShard

CONFIG = MakeConfig(uri="s3://bkt/p/", num_images=12, image_size=16, num_classes=5, seed=3)


def test_tar_index_points_at_each_samples_jpg_and_label():
    data = build_shard(CONFIG, 4, 6)
    members = index_tar("s.tar", io.BytesIO(data))
    assert len(members) == 6
    for k, (jpg_at, jpg_size, cls_at, cls_size, _) in enumerate(members):
        image, label = sample_jpeg(3, 4 + k, 16, 5)
        assert data[jpg_at:jpg_at + jpg_size] == image
        assert int(data[cls_at:cls_at + cls_size]) == label


def test_tar_index_of_a_cut_shard_names_it():
    data = build_shard(CONFIG, 0, 4)
    with pytest.raises(TruncatedShard, match="cut.tar"):
        index_tar("cut.tar", io.BytesIO(data[:4608]), 4)


def test_manifest_keeps_the_index_through_json():
    from mountctl.pytorch.data.index.manifest import ShardInfo

    members = tuple(index_tar("s.tar", io.BytesIO(build_shard(CONFIG, 0, 3))))
    manifest = Manifest(3, 16, 5, 3, (ShardInfo("shard-000000.tar", 3, 0, 10240, "ab", members),))
    again = Manifest.from_dict(json.loads(manifest.to_json()))
    assert again == manifest and again.indexed


def test_manifest_without_index_is_still_read_and_says_so():
    data = {"num_images": 3, "image_size": 16, "num_classes": 5, "seed": 3, "format": "mountctl-webdataset/1",
            "shards": [{"name": "a.tar", "samples": 3, "first_index": 0, "bytes": 100, "sha256": "x"}]}
    assert not Manifest.from_dict(data).indexed


@pytest.mark.parametrize("total,world_size,batch_size", [(40, 2, 8), (41, 2, 8), (37, 3, 5), (10, 1, 4)])
def test_batch_sampler_gives_every_sample_once_and_equal_steps(total, world_size, batch_size):
    seen = []
    steps = set()
    for rank in range(world_size):
        sampler = ExactlyOnceBatchSampler(total, batch_size=batch_size, world_size=world_size, rank=rank, seed=1)
        sampler.set_epoch(2)
        batches = list(sampler)
        steps.add(len(batches))
        assert all(epoch == 2 and len(b) <= batch_size for b in batches for epoch, _ in b)
        seen += [i for b in batches for _, i in b]
    assert sorted(seen) == list(range(total)) and len(steps) == 1


def test_batch_sampler_shuffles_differently_each_epoch():
    sampler = ExactlyOnceBatchSampler(50, batch_size=50, seed=0)
    first = [i for _, i in next(iter(sampler))]
    sampler.set_epoch(1)
    assert first != [i for _, i in next(iter(sampler))] and sorted(first) == list(range(50))


@pytest.mark.parametrize("before,after,steps", [((2, 8), (3, 5), 2), ((1, 4), (2, 6), 5), ((3, 3), (1, 10), 1)])
def test_batch_sampler_resumed_on_another_layout_gives_the_rest_of_the_epoch_once(before, after, steps):
    """Run ``steps`` steps on (ranks, batch size) ``before``, record the position as the checkpoint does, and
    resume on ``after``: the samples trained before plus those after are the epoch's, each exactly once."""
    from mountctl.pytorch.data.sampling.plan import consumed_after

    total = 47

    def samplers(world_size, batch_size, consumed=(), steps_before=0):
        for rank in range(world_size):
            sampler = ExactlyOnceBatchSampler(total, batch_size=batch_size, world_size=world_size, rank=rank,
                                              seed=4)
            sampler.set_epoch(1)
            sampler.resume_at(consumed, steps_before)
            yield sampler

    trained = [i for s in samplers(*before) for batch in list(s)[:steps] for _, i in batch]
    consumed = consumed_after(total, (), world_size=before[0], batch_size=before[1], num_workers=1, steps=steps)
    assert sum(hi - lo for lo, hi in consumed) == len(trained)
    resumed = list(samplers(*after, consumed=consumed, steps_before=steps))
    rest = [i for s in resumed for batch in s for _, i in batch]
    assert sorted(trained + rest) == list(range(total))
    assert len({len(s) for s in resumed}) == 1 and len(resumed[0]) == steps + len(list(resumed[0]))


class _SlowReader:
    """A test double (a real slow store cannot be had on demand here): FileReader plus a delay, counting overlap."""

    def __init__(self, inner: FileReader, delay: float) -> None:
        self.inner, self.delay, self.active, self.peak = inner, delay, 0, 0
        self.lock = threading.Lock()

    def read(self, j, offset=None, length=None):
        with self.lock:
            self.active += 1
            self.peak = max(self.peak, self.active)
        time.sleep(self.delay)
        with self.lock:
            self.active -= 1
        return self.inner.read(j, offset, length)


def _folder(tmp_path, count=12):
    names, refs = [], []
    for i in range(count):
        image, label = sample_jpeg(3, i, 16, 5)
        (tmp_path / f"{i}.jpg").write_bytes(image)
        names.append(f"{i}.jpg")
        refs.append(SampleRef(i, i, label, jpg_size=len(image)))
    return names, refs


@pytest.mark.parametrize("threads,budget,peak", [(4, 1 << 20, 4), (4, 1, 1), (0, 1 << 20, 1)])
def test_read_ahead_overlaps_reads_within_its_thread_and_byte_bounds(tmp_path, threads, budget, peak):
    names, refs = _folder(tmp_path)
    reader = _SlowReader(FileReader(str(tmp_path), tuple(names)), 0.05)
    dataset = MapSampleDataset(reader, names, refs, image_size=16, readahead_threads=threads,
                               readahead_bytes=budget)
    samples = dataset.__getitems__(list(range(12)))
    assert [s[2] for s in samples] == list(range(12))
    assert reader.peak == peak


def test_not_a_jpeg_names_the_object(tmp_path):
    names, refs = _folder(tmp_path, 2)
    (tmp_path / "1.jpg").write_bytes(b"GIF89a not really")
    dataset = MapSampleDataset(FileReader(str(tmp_path), tuple(names)), names, refs, image_size=16, uri="s3://bkt/p/")
    with pytest.raises(DatasetError, match=r"object s3://bkt/p/1\.jpg is not a JPEG"):
        dataset[1]


def test_a_read_that_never_returns_fails_within_the_bound_without_threads_or_workers(tmp_path, monkeypatch):
    """``readahead_threads=0`` and no DataLoader worker: the read still runs where it can be abandoned.

    A stand-in reader that blocks: a real read blocked in a mount for longer than the bound cannot be had on
    demand (a stopped mount program is soon aborted by the watchdog, which ends the read with ECONNABORTED).
    """

    from mountctl.pytorch.data.datasets import mapstyle

    release = threading.Event()

    class _Hung:
        def read(self, j, offset=None, length=None):
            release.wait(30)
            return b""

    monkeypatch.setattr(mapstyle, "FETCH_TIMEOUT_S", 0.5)
    dataset = MapSampleDataset(_Hung(), ["a.jpg"], [SampleRef(0, 0, 1)], image_size=16, uri="s3://bkt/p/",
                               readahead_threads=0)
    try:
        with pytest.raises(DatasetError, match=r"object s3://bkt/p/a.jpg gave no bytes in 0.5 s"):
            dataset.__getitems__([0])
    finally:
        release.set()


def _hung_pair(tmp_path):
    """Two objects: ``0.jpg`` a real JPEG, ``1.jpg`` a FIFO with no writer, whose open blocks in the kernel until
    one comes: a read that never returns, produced for real and on demand."""
    names, refs = _folder(tmp_path, 1)
    os.mkfifo(tmp_path / "1.jpg")
    names.append("1.jpg")
    refs.append(SampleRef(1, 1, 0, jpg_size=1000))
    return names, refs


def _release(fifo):
    """Give the blocked open its writer, so that the abandoned thread ends."""
    with contextlib.suppress(OSError):
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))


def test_a_read_that_never_returns_does_not_hold_up_the_next_read(tmp_path, monkeypatch):
    """The bounded read ran on a one-thread pool: after a read that gave nothing in the bound, every later read
    queued behind it and failed the same way. Each read now runs on a thread of its own."""
    from mountctl.pytorch.data.datasets import mapstyle

    names, refs = _hung_pair(tmp_path)
    monkeypatch.setattr(mapstyle, "FETCH_TIMEOUT_S", 0.5)
    dataset = MapSampleDataset(FileReader(str(tmp_path), tuple(names)), names, refs, image_size=16,
                               uri="s3://bkt/p/", readahead_threads=0)
    try:
        with pytest.raises(DatasetError, match=r"object s3://bkt/p/1.jpg gave no bytes in 0.5 s"):
            dataset[1]
        assert dataset[0][2] == 0  # queued behind the hung read, it failed "gave no bytes" too
    finally:
        _release(str(tmp_path / "1.jpg"))


@pytest.mark.parametrize("threads", [0, 4], ids=["bounded-read", "read-ahead"])
def test_a_process_with_a_read_that_never_returned_still_exits(tmp_path, threads):
    """The interpreter joined the read pool's workers at exit, so one hung read made the process hang as it
    ended; the reads now run on daemon threads, which exit abandons."""
    names, refs = _hung_pair(tmp_path)
    code = textwrap.dedent(f"""
        import sys
        from mountctl.pytorch.data.datasets import mapstyle
        from mountctl.pytorch.data.datasets.mapstyle import MapSampleDataset, SampleRef
        from mountctl.pytorch.data.sources.mountpoint import FileReader
        from mountctl.pytorch.errors import DatasetError
        mapstyle.FETCH_TIMEOUT_S = 0.5
        names = {names!r}
        refs = [SampleRef(0, 0, {refs[0].label}, jpg_size={refs[0].jpg_size}), SampleRef(1, 1, 0, jpg_size=1000)]
        dataset = MapSampleDataset(FileReader(sys.argv[1], tuple(names)), names, refs, image_size=16,
                                   readahead_threads={threads})
        try:
            dataset.__getitems__([1, 0]) if {threads} else dataset[1]
        except DatasetError:
            print("refused")
    """)
    try:
        done = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True,
                              timeout=60)
        assert done.stdout.strip() == "refused", done.stderr[-2000:]
    finally:
        _release(str(tmp_path / "1.jpg"))
