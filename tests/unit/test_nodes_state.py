"""``ShardBatchNode`` under ``torchdata.nodes.Loader`` and ``ShardDataset`` under ``StatefulDataLoader``.

Local shards (the same bytes ``resnet.py make`` writes) stand in for the mount: the node's state is
arithmetic over the plan, which is what these tests check; tests/test_torchdata_nodes.py runs the node over
a real mount with a real kill.
"""

from __future__ import annotations

import collections

import pytest
from torchdata.nodes import Loader, Prefetcher
from torchdata.stateful_dataloader import StatefulDataLoader

from benchmarks.harness.limits import LocalDiskSource
from mountctl.pytorch.data.datasets.dataset import ShardDataset
from mountctl.pytorch.data.datasets.torchdata_nodes import ShardBatchNode
from mountctl.pytorch.data.index.manifest import Manifest, ShardInfo
from mountctl.pytorch.data.synthetic import MakeConfig, build_shard
from mountctl.pytorch.errors import CheckpointError

IMAGES, PER_SHARD = 40, 8


@pytest.fixture(scope="module")
def local(tmp_path_factory):
    """Five shards of 8 JPEGs (16 px) on local disk and their manifest."""
    root = tmp_path_factory.mktemp("shards")
    config = MakeConfig(uri="s3://bucket/p/", num_images=IMAGES, image_size=16)
    shards = []
    for n, first in enumerate(range(0, IMAGES, PER_SHARD)):
        data = build_shard(config, first, PER_SHARD)
        (root / f"shard-{n:06d}.tar").write_bytes(data)
        shards.append(ShardInfo(f"shard-{n:06d}.tar", PER_SHARD, first, len(data), "0" * 64))
    manifest = Manifest(num_images=IMAGES, image_size=16, num_classes=1000, seed=0, shards=tuple(shards))
    return manifest, LocalDiskSource(str(root))


def node(local, **options) -> ShardBatchNode:
    manifest, source = local
    return ShardBatchNode(manifest, source, **{"batch_size": 4, "seed": 3, "shuffle_buffer": 4, **options})


def indices(batches) -> list[int]:
    return [i for batch in batches for i in batch["index"]]


def take(iterator, count: int) -> list[dict]:
    return [next(iterator) for _ in range(count)]


def test_each_iteration_of_the_loader_is_an_epoch_with_every_sample_once_and_its_own_order(local):
    loader = Loader(node(local))
    first, second = list(loader), list(loader)
    assert sorted(indices(first)) == sorted(indices(second)) == list(range(IMAGES))
    assert {b["epoch"] for b in first} == {0} and {b["epoch"] for b in second} == {1}
    assert indices(first) != indices(second)
    assert first[0]["images"].shape == (4, 3, 16, 16)


@pytest.mark.parametrize("workers_before,workers_after", [(0, 0), (2, 2), (2, 1), (0, 2)])
def test_a_loader_state_resumes_the_rest_of_the_epoch_exactly_once_on_any_worker_count(
        local, workers_before, workers_after):
    loader = Loader(Prefetcher(node(local, num_workers=workers_before), prefetch_factor=2))
    trained = take(iter(loader), 4)
    state = loader.state_dict()
    resumed = Loader(Prefetcher(node(local, num_workers=workers_after), prefetch_factor=2))
    resumed.load_state_dict(state)
    rest = list(resumed)
    assert sorted(indices(trained) + indices(rest)) == list(range(IMAGES))
    assert {b["epoch"] for b in rest} == {0}


def test_a_state_from_one_rank_resumes_on_two_ranks_exactly_once(local):
    loader = Loader(node(local))
    trained = take(iter(loader), 3)
    state = loader.state_dict()
    rest = []
    for rank in range(2):
        resumed = Loader(node(local, rank=rank, world_size=2))
        resumed.load_state_dict(state)
        rest += list(resumed)
    counts = collections.Counter(indices(trained) + indices(rest))
    assert sorted(counts) == list(range(IMAGES)) and set(counts.values()) == {1}


def test_the_state_at_the_end_of_an_epoch_resumes_at_the_next_epoch(local):
    loader = Loader(node(local))
    epoch0 = list(loader)
    resumed = Loader(node(local))
    resumed.load_state_dict(loader.state_dict())
    epoch1 = list(resumed)
    assert {b["epoch"] for b in epoch1} == {1} and sorted(indices(epoch1)) == list(range(IMAGES))
    assert indices(epoch1) == indices(Loader(node(local, initial_epoch=1)).__iter__())
    assert indices(epoch0) != indices(epoch1)


def test_a_state_saved_under_another_seed_is_refused(local):
    loader = Loader(node(local))
    take(iter(loader), 2)
    other = Loader(node(local, seed=4))
    other.load_state_dict(loader.state_dict())
    with pytest.raises(CheckpointError, match="--seed 3 .*resume with the same ones"):
        next(iter(other))


@pytest.mark.filterwarnings("ignore:'set_vital' is deprecated")  # torchdata 0.11 calls it itself
@pytest.mark.parametrize("workers", [0, 2])
def test_shard_dataset_resumes_under_stateful_dataloader_on_the_same_layout(local, workers):
    manifest, source = local

    def loader() -> StatefulDataLoader:
        dataset = ShardDataset(manifest, source, batch_size=4, seed=3, shuffle_buffer=4)
        dataset.set_epoch(2)
        return StatefulDataLoader(dataset, batch_size=None, num_workers=workers)

    first = loader()
    trained = take(iter(first), 5)
    state = first.state_dict()
    second = loader()
    second.load_state_dict(state)
    rest = list(second)
    assert sorted(indices(trained) + indices(rest)) == list(range(IMAGES))
    assert indices(trained) + indices(rest) == indices(loader())  # the same order, as if never stopped


@pytest.mark.filterwarnings("ignore:'set_vital' is deprecated")
@pytest.mark.parametrize("workers", [0, 2])
def test_the_map_style_dataset_resumes_under_stateful_dataloader_on_the_same_layout(tmp_path, workers):
    """MapSampleDataset with its ExactlyOnceBatchSampler: StatefulDataLoader replays the sampler (indices only)."""
    from mountctl.pytorch.data.datasets.mapstyle import MapSampleDataset, SampleRef, collate
    from mountctl.pytorch.data.sampling.mapsampler import ExactlyOnceBatchSampler
    from mountctl.pytorch.data.sources.mountpoint import FileReader
    from mountctl.pytorch.data.synthetic import sample_jpeg

    names, refs = [], []
    for i in range(20):
        image, label = sample_jpeg(3, i, 16, 5)
        (tmp_path / f"{i}.jpg").write_bytes(image)
        names.append(f"{i}.jpg")
        refs.append(SampleRef(i, i, label, jpg_size=len(image)))

    def loader() -> StatefulDataLoader:
        dataset = MapSampleDataset(FileReader(str(tmp_path), tuple(names)), names, refs, image_size=16)
        sampler = ExactlyOnceBatchSampler(len(dataset), batch_size=3, seed=5, epoch_fn=lambda: 1)
        return StatefulDataLoader(dataset, batch_sampler=sampler, collate_fn=collate, num_workers=workers)

    first = loader()
    trained = take(iter(first), 3)
    second = loader()
    second.load_state_dict(first.state_dict())
    rest = list(second)
    assert indices(trained) + indices(rest) == indices(loader())
    assert sorted(indices(trained) + indices(rest)) == list(range(20))
