"""Big prefixes: training lists its prefix once per job, never once per rank or DataLoader worker (issue #25 item 5).

A prefix of tiny WebDataset shards and a class tree (benchmarks/lab/index_scale.py's datasets, a few hundred objects
here) sit behind a far store that logs every request (real nginx in front of the session's SeaweedFS,
tests/request_log.py).  ``resnet.py train`` runs two steps with two DataLoader workers through a route, in a child
process as a user runs it (benchmarks/lab/big_prefix.py), and the LISTs the store saw are counted.  The start-time check
(the index's ETags against one LIST) is one pass over the prefix; a LIST per worker would add a pass per worker.
No timing is asserted: benchmarks/lab/big_prefix.py measures those.
"""

from __future__ import annotations

import importlib
import os
import sys

import pytest

import mountctl
from mountctl.s3 import client as s3_client

from conftest import require_fuse
from request_log import logged_store

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks", "lab"))
big_prefix = importlib.import_module("big_prefix")  # the script's own measuring code, so the two cannot drift
index_scale = importlib.import_module("index_scale")

SHARDS = 300  # one LIST page: a second pass would show as a second page
TREE = 200  # 100 class folders of 2 objects each
WORKERS = 2


@pytest.fixture(scope="module")
def scale(local_s3, tmp_path_factory):
    """The shards and the tree in a bucket behind the logging proxy, each with its index on local disk."""
    work = tmp_path_factory.mktemp("big-prefix")
    with logged_store(local_s3, str(work), files=0, size=0) as store:
        index_scale.upload_scale_data(s3_client(local_s3.settings(direct=True)), store.bucket, shards=SHARDS, tree=TREE,
                                      image=index_scale.small_jpeg())
        env = store.settings.child_env({**os.environ, "PYTHONPATH": index_scale.REPO})
        indexes = {}
        for name, prefix in (("shards", index_scale.SHARDS_PREFIX), ("tree", index_scale.TREE_PREFIX)):
            uri = f"s3://{store.bucket}/{prefix}"
            indexes[name] = (uri, str(work / f"{name}.wids.json"))
            index_scale.run_indexed(env, uri=uri, read="stream", jobs=4, index_out=indexes[name][1], image_size=32)
        yield store, env, indexes


def _train(scale, dataset: str, route) -> dict:
    store, env, indexes = scale
    uri, index = indexes[dataset]
    return big_prefix.train_route(route, uri, index, env, store.proxy.requests_path, steps=2, workers=WORKERS,
                                  batch_size=8, timeout_s=300)


def _mount_routes() -> list:
    """The mountpoint kind through each installed program: the routes whose mount can list on its own.  (s3io and
    fsspec read the index's objects by name; benchmarks/lab/big_prefix.py counts their requests at full size.)"""
    return [pytest.param(route, id=route.name.replace(" ", "-"))
            for route in big_prefix.routes(mountctl.installed_backends()) if route.kind == "mountpoint"]


@pytest.mark.parametrize("route", _mount_routes())
def test_training_on_many_shards_lists_the_prefix_once_per_job(scale, route):
    """The start-time check is one page here (300 shards), rclone's own folder read another; no process lists
    the prefix again, so two workers add nothing."""
    if route.kind == "mountpoint":
        require_fuse()
    result = _train(scale, "shards", route)
    assert result["steps"] == 2 and result["workers"] == WORKERS
    allowed = big_prefix.allowed_passes(route, "shards") * big_prefix.one_pass_pages(SHARDS)
    whole = result["requests_whole_run"]
    assert whole["list_pages"] <= allowed, f"{route.name} listed the prefix more than {allowed} times: {whole}"
    # The start-time ETag check itself happened (one page); without it a replaced shard would go unseen.
    assert result["requests_to_first_batch"]["list_pages"] >= 1


def test_training_on_a_class_tree_lists_no_folder_twice(scale):
    """The files layout's index names every object, so the trainer lists nothing; through ``auto``'s program a
    folder-reading one (rclone) may list each folder it opens from, once."""
    require_fuse()
    route = big_prefix.Route("mount auto", "mountpoint", mountctl.installed_backends()[0])  # auto's choice
    result = _train(scale, "tree", route)
    assert result["steps"] == 2
    allowed = big_prefix.allowed_passes(route, "tree") * big_prefix.one_pass_pages(TREE, index_scale.TREE_CLASSES)
    whole = result["requests_whole_run"]
    assert whole["list_pages"] <= allowed, whole
    assert all(pages == 1 for pages in whole["list_pages_by_prefix"].values()), f"a folder was listed twice: {whole}"
