"""``FileReader`` (map-style reads through a mount): one descriptor per file per process, all given back."""

from __future__ import annotations

import concurrent.futures

from mountctl.pytorch.data.sources.mountpoint import FileReader

from open_files import open_fds_under


def test_threads_reading_ranges_open_each_file_once_and_close_gives_every_descriptor_back(tmp_path):
    names = tuple(f"shard-{i}.tar" for i in range(8))
    for i, name in enumerate(names):
        (tmp_path / name).write_bytes(bytes([i]) * 4096)
    reader = FileReader(str(tmp_path), names)
    with concurrent.futures.ThreadPoolExecutor(16) as pool:
        reads = list(pool.map(lambda k: reader.read(k % 8, offset=k % 100, length=10), range(800)))
    assert all(data == bytes([k % 8]) * 10 for k, data in enumerate(reads))
    held = open_fds_under(str(tmp_path))
    assert sorted(held) == sorted(str(tmp_path / n) for n in names), "one descriptor per file, none lost"
    reader.close()
    assert open_fds_under(str(tmp_path)) == []


def test_a_reader_copied_into_another_process_starts_without_descriptors(tmp_path):
    import pickle

    (tmp_path / "a").write_bytes(b"abc")
    reader = FileReader(str(tmp_path), ("a",))
    assert reader.read(0, offset=1, length=1) == b"b"
    copy = pickle.loads(pickle.dumps(reader))
    assert copy._fds == {} and copy.read(0, offset=2, length=1) == b"c"
    reader.close()
    copy.close()
    assert open_fds_under(str(tmp_path)) == []


def test_map_datamodule_gives_each_epochs_descriptors_back_and_none_at_teardown(tmp_path):
    """Random access without workers, two epochs, as Lightning calls the datamodule (a stand-in trainer that
    only says the rank, the world size and the epoch)."""
    import io
    from types import SimpleNamespace

    from benchmarks.harness.limits import LocalDiskSource
    from mountctl.pytorch.data.datasets.datamodule import MapDataModule
    from mountctl.pytorch.data.index.manifest import Manifest, ShardInfo
    from mountctl.pytorch.data.index.tarindex import index_tar
    from mountctl.pytorch.data.synthetic import MakeConfig, build_shard

    shards = []
    for number in range(3):
        data = build_shard(MakeConfig(uri="s3://bucket/p/", num_images=12, image_size=16), 4 * number, 4)
        name = f"shard-{number:06d}.tar"
        (tmp_path / name).write_bytes(data)
        shards.append(ShardInfo(name, 4, 4 * number, len(data), "0" * 64, tuple(index_tar(name, io.BytesIO(data)))))
    manifest = Manifest(num_images=12, image_size=16, num_classes=1000, seed=0, shards=tuple(shards))
    module = MapDataModule(manifest, LocalDiskSource(str(tmp_path)), "s3://bucket/p/", batch_size=4, num_workers=0,
                           seed=0, readahead_threads=2)
    module.trainer = SimpleNamespace(global_rank=0, world_size=1, current_epoch=0, global_step=0)
    for epoch in range(2):
        module.trainer.current_epoch = epoch
        seen = [i for batch in module.train_dataloader() for i in module.on_before_batch_transfer(batch, 0)["index"]]
        assert sorted(seen) == list(range(12))
        assert len(open_fds_under(str(tmp_path))) <= 3, "the previous epoch's descriptors were not given back"
    module.teardown("fit")
    assert open_fds_under(str(tmp_path)) == []


def test_mount_cache_is_sized_from_the_manifest_total_with_no_list(tmp_path, monkeypatch):
    """The files layout's objects sit under train/<class>/, which a delimited LIST of the prefix never sees;
    the manifest holds the total.  Stand-ins: the mount (only the options it is asked for matter here) and a
    LIST that fails if made."""
    import contextlib
    from types import SimpleNamespace

    import mountctl
    from mountctl.mounts.cache import cache_bound_mb, free_mb
    from mountctl.pytorch.data.sources import mountpoint

    asked = {}

    @contextlib.contextmanager
    def mount(uri, mount_dir, **options):
        asked.update(options)
        # A mount that runs with the cache it was asked for (handles report the cache in effect).
        cache = {"cache_dir": options.get("cache_dir"), "cache_size_mb": options.get("cache_size_mb")}
        yield SimpleNamespace(path=str(tmp_path), backend="rclone", pid=None, cache=cache)

    def no_list(*args, **kwargs):
        raise AssertionError("the dataset's size is in the manifest: no LIST")

    monkeypatch.setattr(mountctl, "mount", mount)
    monkeypatch.setattr(mountpoint.s3, "list_object_sizes", no_list)
    total = 3 << 30  # a 3 GiB files-layout dataset
    with mountpoint.mountpoint_source("s3://bkt/files/", mountctl.resolve(), dataset_bytes=total,
                                      mountpoint=mountpoint.MountpointOptions(cache_dir=str(tmp_path))) as source:
        assert source.cache_size_mb == asked["cache_size_mb"]
    assert asked["cache_size_mb"] == cache_bound_mb(total, free_mb(str(tmp_path)) << 20)
    assert asked["cache_size_mb"] > 257 or free_mb(str(tmp_path)) < 1024  # not the manifest.json-only size
