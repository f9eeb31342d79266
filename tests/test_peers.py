"""The bench's peers: the same samples in LitData's and MosaicML Streaming's formats, read back through each library.

A tiny dataset (``resnet.py make``'s recipe, 32 px) is converted on the real
local S3; each library's own ``StreamingDataset`` then reads it back from
the endpoint, and every sample must carry the bytes and label of the
WebDataset shard it came from.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import tempfile
import threading
import time
import uuid

import psutil
import pytest

from benchmarks.harness.peer_cleanup import SHM_DIR
from benchmarks.harness.peer_data import (
    PEERS,
    ensure_peer_data,
    load_peer_marker,
    peer_env,
    peer_uri,
)
from benchmarks.harness.peers import open_peer_dataset, peer_epochs
from mountctl.pytorch.data.datasets.shards import read_shard
from mountctl.pytorch.data.index.manifest import load_manifest
from mountctl.pytorch.data.synthetic import MakeConfig, make_dataset
from mountctl.pytorch.errors import DatasetError
from mountctl.s3 import client as s3_client

CHUNK = 64 << 10


@pytest.fixture(scope="module")
def converted(local_s3):
    """A 96-image dataset in 64 KB shards, converted once to both formats: (settings, uri, manifest, first markers)."""
    settings = local_s3.settings()
    client = s3_client(settings)
    client.create_bucket(Bucket="peers-test")
    client.get_waiter("bucket_exists").wait(Bucket="peers-test", WaiterConfig={"Delay": 0.1, "MaxAttempts": 100})
    uri = "s3://peers-test/tiny/"
    make_dataset(MakeConfig(uri=uri, num_images=96, image_size=32, num_classes=10, shard_size=CHUNK, seed=3),
                 settings=settings, progress=False)
    manifest = load_manifest(settings, uri)
    markers = {peer: ensure_peer_data(settings, uri, manifest, peer, chunk_bytes=CHUNK) for peer in PEERS}
    return settings, uri, manifest, markers


def source_samples(settings, uri, manifest) -> dict[int, tuple[int, bytes]]:
    client = s3_client(settings)
    found = {}
    for shard in manifest.shards:
        body = client.get_object(Bucket="peers-test", Key="tiny/" + shard.name)["Body"]
        for sample in read_shard(shard.name, body, first_index=shard.first_index, start=0, stop=shard.samples,
                                 expected=shard.samples):
            found[sample.index] = (sample.label, sample.image)
    return found


@pytest.mark.parametrize("peer", PEERS)
def test_every_sample_reads_back_from_s3_with_its_bytes_and_label(converted, peer, tmp_path, monkeypatch):
    settings, uri, manifest, markers = converted
    assert markers[peer]["converted"] and markers[peer]["num_images"] == manifest.num_images
    for name, value in peer_env(settings).items():  # as the bench's child process gets it
        monkeypatch.setenv(name, value)
    dataset = open_peer_dataset(peer, peer_uri(uri, peer), str(tmp_path / "cache"), settings, batch_size=8)
    read: dict[int, tuple[int, bytes]] = {}
    for sample in dataset:
        index = int(sample["index"])
        assert index not in read, f"{peer} delivered sample {index} twice"
        read[index] = (int(sample["cls"]), bytes(sample["jpg"]))
    assert read == source_samples(settings, uri, manifest)


def test_a_converted_dataset_is_not_converted_again(converted):
    settings, uri, manifest, markers = converted
    for peer in PEERS:
        again = ensure_peer_data(settings, uri, manifest, peer, chunk_bytes=CHUNK)
        assert not again["converted"] and again["checksum"] == markers[peer]["checksum"]


def test_a_conversion_leaves_the_start_method_of_this_process_as_it_found_it(converted):
    """litdata's optimize sets the process-wide start method to spawn: left so, every DataLoader started later
    in the process spawned its workers (each importing torch again, about 3 s of CPU) instead of forking them."""
    settings, uri, manifest, _ = converted
    before = multiprocessing.get_start_method(allow_none=True)
    multiprocessing.set_start_method("fork", force=True)
    try:
        marker = ensure_peer_data(settings, uri, manifest, "litdata", chunk_bytes=CHUNK,
                                  peer_data=f"s3://peers-test/again-{uuid.uuid4().hex[:8]}/")
        assert marker["converted"]
        assert multiprocessing.get_start_method(allow_none=True) == "fork"
    finally:
        multiprocessing.set_start_method(before, force=True)


def peer_caches() -> set[str]:
    temp = tempfile.gettempdir()
    return {n for n in os.listdir(temp) if n.startswith(tuple(f"mountctl-{p}-{w}-" for p in PEERS
                                                             for w in ("cache", "cell")))}


def test_peer_cells_read_both_epochs_with_workers_and_check_every_sample(converted):
    settings, uri, manifest, markers = converted
    before = peer_caches()
    for peer in PEERS:
        rows = peer_epochs(settings, uri, markers[peer], peer=peer, mode="loader", num_workers=2, batch_size=16,
                           image_size=32, warmup_batches=1, total_bytes=manifest.total_bytes)
        assert [r["epoch"] for r in rows] == [1, 2]
        for row in rows:
            assert row["samples_checked"] == manifest.num_images and row["samples_per_s"] > 0
            assert row["loader_cpu_pct"] > 0 and row["cache_mb"] > 0
    assert peer_caches() <= before, "a peer's cache directory outlived its cell"


def test_a_peer_cell_fails_when_what_it_read_does_not_match_the_conversion(converted):
    """The checksum is replaced in the marker handed to the cell: the data itself cannot be corrupted on demand
    without also breaking the library's own index, which would test the library instead of the check."""
    settings, uri, manifest, markers = converted
    wrong = {**markers["litdata"], "checksum": "0" * 16}
    with pytest.raises(DatasetError, match="checksum"):
        peer_epochs(settings, uri, wrong, peer="litdata", mode="bytes", num_workers=0, batch_size=16, image_size=32,
                    warmup_batches=1, total_bytes=manifest.total_bytes, epochs=1)
    assert load_peer_marker(settings, uri, "litdata")["checksum"] == markers["litdata"]["checksum"]


def test_each_peer_trains_resnet50_for_two_epochs_on_every_sample(converted):
    settings, uri, manifest, markers = converted
    for peer in PEERS:
        rows = peer_epochs(settings, uri, markers[peer], peer=peer, mode="train", num_workers=1, batch_size=16,
                           image_size=32, warmup_batches=1, total_bytes=manifest.total_bytes, accelerator="cpu",
                           precision="32-true", num_classes=manifest.num_classes)
        assert [(r["epoch"], r["images"], r["samples_checked"]) for r in rows] == [(1, 96, 96), (2, 96, 96)]
        assert all(r["samples_per_s"] > 0 and r["decode"] == "cpu" for r in rows)


def cell_segments() -> list[str]:
    """Streaming's /dev/shm segments whose owner record names a peer cell's cache."""
    found = []
    for name in os.listdir(SHM_DIR):
        if name.endswith("_locals"):
            with open(os.path.join(SHM_DIR, name), "rb") as segment:
                if b"mountctl-streaming-cell-" in segment.read():
                    found.append(name)
    return found


def test_a_killed_streaming_cell_leaves_no_cache_and_no_shared_memory(converted):
    """The child is killed as its timeout would kill it (SIGKILL to its group), while Streaming holds segments."""
    settings, uri, manifest, markers = converted
    before = peer_caches()
    outcome: list[BaseException] = []

    def cell() -> None:
        try:
            peer_epochs(settings, uri, markers["streaming"], peer="streaming", mode="train", num_workers=0,
                        batch_size=16, image_size=32, warmup_batches=1, total_bytes=manifest.total_bytes,
                        accelerator="cpu", precision="32-true", num_classes=manifest.num_classes, epochs=50)
        except BaseException as exc:  # noqa: BLE001  the test inspects it below
            outcome.append(exc)

    runner = threading.Thread(target=cell, daemon=True)
    runner.start()
    deadline = time.monotonic() + 180
    while not cell_segments() and runner.is_alive() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert cell_segments(), "the Streaming child never registered its shared memory"
    children = [p for p in psutil.Process().children() if "benchmarks.harness.peers" in " ".join(p.cmdline())]
    assert len(children) == 1
    os.killpg(children[0].pid, signal.SIGKILL)
    runner.join(60)
    assert not runner.is_alive()
    assert outcome and isinstance(outcome[0], DatasetError)
    assert cell_segments() == [], "Streaming's shared memory outlived the killed cell"
    assert peer_caches() <= before, "the killed cell's cache directory was left behind"
