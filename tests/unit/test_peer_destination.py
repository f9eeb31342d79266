"""Where the bench's peers write their copies: beside data `make` wrote, never into or beside a user's data."""

from __future__ import annotations

import argparse
from dataclasses import replace

import pytest

from benchmarks.harness.command import add_bench_arguments
from benchmarks.harness.config import preset
from benchmarks.harness.peer_data import PEERS, peer_data_base, peer_uri, source_fingerprint
from mountctl import InvalidSpec
from mountctl.pytorch.data.index.manifest import Manifest, ShardInfo
from mountctl.pytorch.errors import DatasetError

USER = "s3://own/imagenet/"
SHARDS = (ShardInfo("train-000000.tar", 3, 0, 3000, etag="e0"), ShardInfo("train-000001.tar", 2, 3, 2000, etag="e1"))
INDEXED = Manifest(num_images=5, image_size=224, num_classes=4, seed=0, shards=SHARDS, origin="index")
MADE = replace(INDEXED, origin="make")


def test_data_make_wrote_gets_its_copies_beside_it():
    assert peer_data_base(MADE, "s3://b/bench/img32-64KB-n96/", None, PEERS) is None
    assert peer_uri("s3://b/bench/img32-64KB-n96/", "litdata") == "s3://b/bench/img32-64KB-n96.litdata/"


def test_a_users_data_without_peer_data_is_refused_in_one_line_that_names_the_flag():
    with pytest.raises(DatasetError) as refused:
        peer_data_base(INDEXED, USER, None, PEERS)
    message = str(refused.value)
    assert "\n" not in message
    assert "--peer-data s3://your-writable-bucket/prefix/" in message and "--peers ''" in message
    # Never advice to write into or beside the user's data: no place in their bucket is suggested.
    assert "s3://own/imagenet." not in message and "--peer-data s3://own" not in message


def test_a_users_data_with_peer_data_puts_each_copy_under_it_named_after_the_dataset():
    base = peer_data_base(INDEXED, USER, "s3://scratch/peers", PEERS)
    assert base == "s3://scratch/peers/"
    assert peer_uri(USER, "litdata", base) == "s3://scratch/peers/imagenet.litdata/"
    assert peer_uri(USER, "streaming", base) == "s3://scratch/peers/imagenet.streaming/"
    assert peer_uri("s3://own/", "litdata", base) == "s3://scratch/peers/own.litdata/"  # a whole bucket


@pytest.mark.parametrize("inside", ["s3://own/imagenet/", "s3://own/imagenet/peers/"])
def test_peer_data_inside_the_datasets_prefix_is_refused(inside):
    with pytest.raises(DatasetError, match="lies inside the dataset s3://own/imagenet/"):
        peer_data_base(INDEXED, USER, inside, PEERS)


def test_peer_data_beside_the_dataset_is_what_the_user_asked_for():
    assert peer_data_base(INDEXED, USER, "s3://own/", PEERS) == "s3://own/"
    assert peer_data_base(INDEXED, USER, "s3://own/imagenet-peers/", PEERS) == "s3://own/imagenet-peers/"


def test_no_peers_needs_no_place():
    assert peer_data_base(INDEXED, USER, None, ()) is None


def test_a_users_shards_are_fingerprinted_by_their_etags():
    changed = replace(INDEXED, shards=(SHARDS[0], replace(SHARDS[1], etag="other")))
    assert source_fingerprint(changed) != source_fingerprint(INDEXED)


def test_bench_takes_peer_data_and_index_and_checks_the_uri():
    parser = argparse.ArgumentParser()
    add_bench_arguments(parser)
    args = parser.parse_args([USER, "--peer-data", "s3://scratch/peers", "--index", "/tmp/own.json"])
    assert (args.peer_data, args.index) == ("s3://scratch/peers", "/tmp/own.json")
    config = preset("tiny", uri=USER, peer_data=args.peer_data, index=args.index)
    assert (config.peer_data, config.index) == ("s3://scratch/peers/", "/tmp/own.json")
    with pytest.raises(InvalidSpec):
        preset("tiny", uri=USER, peer_data="scratch/peers")
