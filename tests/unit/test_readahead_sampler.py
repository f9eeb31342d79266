"""``ReadAheadSampler`` on plain files: the wrapped sampler's order exactly, its bounds, and nothing left behind.

Files in a temporary directory stand in for the mount (the sampler only opens and reads paths); the
end-to-end tests over a real mount-s3 mount are in tests/test_readahead_sampler_mount.py.  A sample whose pages the
kernel holds is not read (``resident``), so the tests of order, bounds and counts write their files and then drop
them from the page cache (``cold=True``: fsync and ``POSIX_FADV_DONTNEED``), as a mount's files are before a read.
"""

from __future__ import annotations

import os
import threading
import time

import pytest
import torch
from torch.utils.data import DataLoader, RandomSampler, SequentialSampler

from mountctl.pytorch import ReadAheadSampler
from mountctl.pytorch.data.datasets.mapstyle import image_folder
from mountctl.pytorch.data.read_ahead.sampler import (
    BACK_OFF_AFTER,
    PROBE_EVERY,
    SampleFile,
    default_bounds,
    resident,
    sample_files,
)
from mountctl.pytorch.data.sampling.mapsampler import ExactlyOnceBatchSampler
from mountctl.pytorch.errors import DatasetError


class _Files:
    """A dataset that knows each index's file as ImageFolder does (``samples``) and returns its bytes."""

    def __init__(self, root, count: int, size: int = 1000, cold: bool = False) -> None:
        self.samples = []
        for i in range(count):
            path = root / f"{i:04d}.bin"
            path.write_bytes(bytes([i % 251]) * size)
            self.samples.append((str(path), i % 3))
            if cold:
                _drop_pages(str(path))

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, i: int) -> int:
        return i


def _drop_pages(path: str) -> None:
    """Out of the page cache: written back, then dropped (clean pages go at once)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def _wait(condition, timeout_s: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.02)
    return condition()


def _read_ahead_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("mountctl-read-ahead-")]


class _Recorded:
    """``files=`` that records the order in which the threads asked for each index's file."""

    def __init__(self, dataset: _Files) -> None:
        self.dataset = dataset
        self.asked: list[int] = []
        self.lock = threading.Lock()

    def __call__(self, i: int) -> str:
        with self.lock:
            self.asked.append(i)
        return self.dataset.samples[i][0]


def test_it_yields_exactly_the_wrapped_samplers_indices_in_its_order(tmp_path):
    dataset = _Files(tmp_path, 300)
    expected = list(RandomSampler(dataset, generator=torch.Generator().manual_seed(7)))
    sampler = ReadAheadSampler(dataset, RandomSampler(dataset, generator=torch.Generator().manual_seed(7)),
                               ahead=16, threads=4)
    got = list(sampler)
    assert got == expected
    assert sorted(got) == list(range(300))
    assert len(sampler) == 300


def test_a_dataloader_with_shuffle_delivers_every_sample_once(tmp_path):
    dataset = _Files(tmp_path, 130)
    loader = DataLoader(dataset, batch_size=16, sampler=ReadAheadSampler(dataset, RandomSampler(dataset)))
    for _ in range(2):  # two epochs: each its own threads and its own report
        seen = [int(i) for batch in loader for i in batch]
        assert sorted(seen) == list(range(130))


def test_reads_follow_the_samplers_order_and_stay_within_the_count_ahead(tmp_path):
    dataset = _Files(tmp_path, 200, cold=True)
    files = _Recorded(dataset)
    order = list(RandomSampler(dataset, generator=torch.Generator().manual_seed(3)))
    sampler = ReadAheadSampler(dataset, order, files=files, ahead=10, threads=1)
    epoch = iter(sampler)
    assert next(epoch) == order[0]
    assert _wait(lambda: len(files.asked) >= 10)
    time.sleep(0.3)  # room to overrun the bound, had it none
    assert files.asked == order[:10]  # one thread: the sampler's order exactly, no further than 10 drawn
    rest = list(epoch)
    assert [order[0], *rest] == order
    assert files.asked == order[:len(files.asked)]


def test_reads_stop_at_the_byte_budget_until_the_loader_catches_up(tmp_path):
    dataset = _Files(tmp_path, 100, size=1000, cold=True)
    files = _Recorded(dataset)
    sampler = ReadAheadSampler(dataset, SequentialSampler(dataset), files=files, ahead=100, ahead_bytes=3000,
                               threads=1)
    epoch = iter(sampler)
    next(epoch)
    assert _wait(lambda: len(files.asked) >= 4)
    time.sleep(0.3)
    # Sample 0 was yielded before (or while) it was read; 1, 2 and 3 fill the 3,000 bytes.
    assert len(files.asked) <= 5, files.asked
    for _ in range(20):
        next(epoch)
    assert _wait(lambda: len(files.asked) >= 24)
    epoch.close()


def test_a_failing_read_never_fails_the_epoch_and_is_counted(tmp_path):
    dataset = _Files(tmp_path, 40, cold=True)
    for path, _ in dataset.samples[::4]:
        os.remove(path)  # the store lost them: the worker's own read meets that, not the sampler
    sampler = ReadAheadSampler(dataset, SequentialSampler(dataset), ahead=8, threads=2)
    epoch = iter(sampler)
    got = []
    for index in epoch:
        got.append(index)
        time.sleep(0.005)  # a consumer slower than the reads, so that they all happen
    assert got == list(range(40))
    assert sampler.last is not None
    assert _wait(lambda: sampler.last.failed + sampler.last.files + sampler.last.skipped == 40)
    assert sampler.last.failed == 10 and "FileNotFoundError" in sampler.last.first_error


def test_a_hung_read_never_blocks_the_sampler(tmp_path):
    """A fake hang (``files=`` that blocks): no real mount can be made to hang one read on demand here."""
    dataset = _Files(tmp_path, 400)
    release = threading.Event()

    def files(i: int) -> str:
        if i % 50 == 0:
            release.wait(20)  # a read stuck in a wedged mount
        return dataset.samples[i][0]

    sampler = ReadAheadSampler(dataset, SequentialSampler(dataset), files=files, ahead=20, threads=2, timeout_s=0.2)
    started = time.monotonic()
    got = []
    for index in sampler:
        got.append(index)
        time.sleep(0.002)
    assert got == list(range(400))
    assert time.monotonic() - started < 10  # never waited 20 s on a stuck read
    assert sampler.last is not None and sampler.last.hung >= 1
    release.set()
    assert _wait(lambda: not _read_ahead_threads())


def test_a_loader_stopped_early_leaves_no_thread_and_no_open_file(tmp_path):
    dataset = _Files(tmp_path, 500)
    fds_before = len(os.listdir("/proc/self/fd"))
    loader = DataLoader(dataset, batch_size=8, sampler=ReadAheadSampler(dataset, RandomSampler(dataset)))
    for number, _ in enumerate(loader):
        if number == 3:
            break
    assert _wait(lambda: not _read_ahead_threads()), _read_ahead_threads()
    assert len(os.listdir("/proc/self/fd")) <= fds_before


def test_it_wraps_a_batch_sampler_and_reads_each_batchs_files(tmp_path):
    dataset = _Files(tmp_path, 64, cold=True)
    files = _Recorded(dataset)
    batches = ExactlyOnceBatchSampler(64, batch_size=8, seed=1)
    expected = list(batches)
    sampler = ReadAheadSampler(dataset, batches, files=files, ahead=64, threads=1)
    got = []
    for batch in sampler:
        got.append(batch)
        time.sleep(0.01)
    assert got == expected
    assert files.asked == [i for batch in expected for _, i in batch][:len(files.asked)]
    assert len(files.asked) >= 8


def test_it_finds_the_files_of_torchvision_imagefolder_and_of_mountctls_image_folder(tmp_path):
    from torchvision.datasets import ImageFolder

    for name in ("cat", "dog"):
        (tmp_path / name).mkdir()
        for i in range(3):
            (tmp_path / name / f"{i}.jpg").write_bytes(b"\xff\xd8\xff" + bytes(10))
    plain = ImageFolder(str(tmp_path), loader=lambda path: path)
    ours = image_folder(str(tmp_path), image_size=32)
    assert [sample_files(plain)(i).path for i in range(6)] == [path for path, _ in plain.samples]
    assert [sample_files(ours)(i) for i in range(6)] == [SampleFile(path) for path, _ in plain.samples]


def test_a_dataset_that_does_not_know_its_files_is_refused_naming_the_remedy():
    with pytest.raises(DatasetError, match="files="):
        ReadAheadSampler(list(range(5)), range(5))


def test_the_default_bounds_grow_with_the_nodes_memory_within_limits():
    small, large, huge = (default_bounds(gib << 30) for gib in (1, 16, 1024))
    assert small == (1024, 64 << 20)  # 1 GiB free: 64 MiB ahead
    assert large == (8192, 1 << 30)
    assert huge == (8192, 2 << 30)
    assert default_bounds(0) == (1024, 64 << 20)


def test_resident_says_whether_the_kernel_holds_every_page_of_the_range(tmp_path):
    path = tmp_path / "data.bin"
    path.write_bytes(os.urandom(256 << 10))
    _drop_pages(str(path))
    fd = os.open(path, os.O_RDONLY)
    try:
        assert not resident(fd, 0, 256 << 10)
        os.pread(fd, 64 << 10, 0)  # the first quarter only (the kernel may read a little beyond it)
        assert resident(fd, 0, 64 << 10)
        assert resident(fd, 100, 1000)  # an offset inside a page
        os.posix_fadvise(fd, 128 << 10, 128 << 10, os.POSIX_FADV_DONTNEED)
        assert not resident(fd, 0, 256 << 10)  # the second half is not held
        assert not resident(fd, 0, 0)
    finally:
        os.close(fd)


def test_samples_in_memory_are_not_read_and_a_run_of_them_backs_the_look_off(tmp_path):
    dataset = _Files(tmp_path, 400)  # just written: in the page cache
    files = _Recorded(dataset)
    sampler = ReadAheadSampler(dataset, SequentialSampler(dataset), files=files, ahead=64, threads=4)
    got = []
    for index in sampler:
        got.append(index)
        time.sleep(0.0005)
    assert got == list(range(400))
    report = sampler.last
    assert report is not None and report.files == 0 and report.bytes == 0, report
    assert report.cached + report.skipped == 400, report
    # Backed off after BACK_OFF_AFTER in a row: the rest is looked at one in PROBE_EVERY (threads may have taken
    # a task each before the last of the run came back).
    assert len(files.asked) <= BACK_OFF_AFTER + 4 + 400 // PROBE_EVERY + 1, len(files.asked)


def test_a_sample_not_in_memory_ends_the_back_off_and_every_one_after_is_read(tmp_path):
    dataset = _Files(tmp_path, 300)
    for path, _ in dataset.samples[100:]:
        _drop_pages(path)  # the first 100 in memory, the rest not
    sampler = ReadAheadSampler(dataset, SequentialSampler(dataset), ahead=32, threads=2)
    got = []
    for index in sampler:
        got.append(index)
        time.sleep(0.002)  # a consumer slower than the reads, so that none is passed by
    assert got == list(range(300))
    report = sampler.last
    assert report is not None and report.failed == report.skipped == 0, report
    # Only the samples drawn between the back-off and its first probe past sample 100 go unread.
    assert report.files >= 200 - PROBE_EVERY, report


def test_the_back_off_carries_into_the_next_epoch_and_back_off_false_looks_at_every_sample(tmp_path):
    dataset = _Files(tmp_path, 320)
    files = _Recorded(dataset)
    sampler = ReadAheadSampler(dataset, SequentialSampler(dataset), files=files, ahead=64, threads=2)
    assert list(sampler) == list(range(320))
    files.asked.clear()
    assert list(sampler) == list(range(320))
    assert len(files.asked) <= 320 // PROBE_EVERY + 2, len(files.asked)  # backed off from its first sample
    every = _Recorded(dataset)
    plain = ReadAheadSampler(dataset, SequentialSampler(dataset), files=every, ahead=400, threads=2, back_off=False)
    epoch = iter(plain)
    first = next(epoch)  # the epoch starts at the first draw
    assert _wait(lambda: len(every.asked) == 320)  # all drawn (ahead 400), every one looked at
    assert [first, *epoch] == list(range(320))
    assert plain.last is not None and plain.last.files == 0 and plain.last.cached == 320
