"""Persistent DataLoader workers still read each epoch's own plan (``EpochFollower``, ``ShardBatchNode``).

Local shards (the bytes ``resnet.py make`` writes) stand in for a mount: what is checked is which samples
the forked workers read in which epoch, and that the same worker processes serve every epoch;
tests/test_persistent_training.py trains through real sources over several epochs and a resume.
"""

from __future__ import annotations

import pytest
from test_nodes_state import IMAGES, indices, local  # noqa: F401  # the module's shards fixture
from torch.utils.data import DataLoader
from torchdata.nodes import Loader

from mountctl.pytorch.data.datasets.dataset import EpochLoader, ShardDataset
from mountctl.pytorch.data.datasets.epoch_follower import EpochFollower, shut_down_workers
from mountctl.pytorch.data.datasets.torchdata_nodes import ShardBatchNode

pytestmark = pytest.mark.unit


def worker_pids(loader: DataLoader) -> list[int]:
    return sorted(worker.pid for worker in loader._iterator._workers)  # torch's own iterator: white-box on purpose


def plan(local, epoch: int, workers: int) -> list[list[int]]:  # noqa: F811
    """Each epoch's batches read by workers forked afresh: what persistent workers must match."""
    manifest, source = local
    dataset = ShardDataset(manifest, source, batch_size=4, seed=3, shuffle_buffer=4)
    return [list(b["index"]) for b in EpochLoader(dataset, epoch_fn=lambda: epoch, num_workers=workers)]


def test_persistent_workers_read_each_epochs_own_plan_and_stay_the_same_processes(local):  # noqa: F811
    manifest, source = local
    follower = EpochFollower(ShardDataset(manifest, source, batch_size=4, seed=3, shuffle_buffer=4))
    loader = EpochLoader(follower, epoch_fn=lambda: epoch, num_workers=2, persistent_workers=True)
    try:
        seen, pids = [], []
        for epoch in range(3):
            batches = list(loader)
            assert {b["epoch"] for b in batches} == {epoch}
            seen.append([list(b["index"]) for b in batches])
            pids.append(worker_pids(loader))
        assert pids[0] == pids[1] == pids[2]
        assert seen == [plan(local, epoch, 2) for epoch in range(3)]
        assert seen[0] != seen[1] != seen[2]
    finally:
        shut_down_workers(loader)
    assert loader._iterator is None


def test_a_resumed_dataset_cannot_share_persistent_workers(local):  # noqa: F811
    manifest, source = local
    dataset = ShardDataset(manifest, source, batch_size=4, seed=3, shuffle_buffer=4)
    dataset.resume_at(((0, 8),), 2)
    with pytest.raises(ValueError, match="workers of its own"):
        EpochFollower(dataset)


def test_node_keeps_its_workers_over_epochs_and_each_epoch_has_every_sample_once(local):  # noqa: F811
    manifest, source = local
    node = ShardBatchNode(manifest, source, batch_size=4, seed=3, shuffle_buffer=4, num_workers=2)
    loader = Loader(node)
    try:
        first = list(loader)
        pids = worker_pids(node._persistent)
        second = list(loader)
        assert worker_pids(node._persistent) == pids
        assert sorted(indices(first)) == sorted(indices(second)) == list(range(IMAGES))
        assert {b["epoch"] for b in first} == {0} and {b["epoch"] for b in second} == {1}
        assert [list(b["index"]) for b in second] == plan(local, 1, 2)
    finally:
        node.close()
