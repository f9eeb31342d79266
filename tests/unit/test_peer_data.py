"""Pure parts of the peer cells: the checksum, where a peer's copy lives, how a peer learns the endpoint, the config."""

from __future__ import annotations

import pytest

from benchmarks.harness.config import preset
from benchmarks.harness.peer_data import (
    PEERS,
    PeerMissing,
    SampleChecksum,
    check_peers_installed,
    litdata_storage_options,
    peer_env,
    peer_uri,
    sample_digest,
)
from benchmarks.harness.peers import peer_cell_count, peer_comparison
from benchmarks.harness.sweep_run import Planned
from mountctl import InvalidSpec, S3Settings

LOCAL = S3Settings(endpoint_url="http://127.0.0.1:9000", region="us-east-1", access_key_id="AK",
                   secret_access_key="SK")
AWS = S3Settings(endpoint_url=None, region="eu-west-1")
SAMPLES = [(0, 3, b"\xff\xd8one"), (1, 7, b"\xff\xd8two"), (2, 3, b"\xff\xd8three")]


def checksum(samples) -> SampleChecksum:
    made = SampleChecksum()
    for index, label, data in samples:
        made.add(index, label, data)
    return made


def test_the_checksum_does_not_depend_on_the_order_samples_arrive_in():
    assert checksum(SAMPLES).value == checksum(reversed(SAMPLES)).value
    assert checksum(SAMPLES).count == 3


def test_the_checksum_changes_when_a_sample_is_repeated_dropped_relabelled_or_altered():
    good = checksum(SAMPLES).value
    assert checksum(SAMPLES + SAMPLES[:1]).value != good
    assert checksum(SAMPLES[1:]).value != good
    assert checksum([(0, 4, SAMPLES[0][2]), *SAMPLES[1:]]).value != good
    assert checksum([(0, 3, b"\xff\xd8onE"), *SAMPLES[1:]]).value != good


def test_digests_summed_in_workers_give_the_same_checksum_as_one_reader():
    merged = SampleChecksum()
    for part in (SAMPLES[:1], SAMPLES[1:]):
        merged.merge(checksum(part))
    one = SampleChecksum()
    for index, label, data in SAMPLES:
        one.add_digest(sample_digest(index, label, data))
    assert merged.value == one.value == checksum(SAMPLES).value
    assert SampleChecksum.of(3, one.value).value == one.value


def test_each_peer_copy_sits_beside_the_dataset_and_never_inside_it():
    assert peer_uri("s3://b/bench/img224-16MB-n2000/", "litdata") == "s3://b/bench/img224-16MB-n2000.litdata/"
    assert peer_uri("s3://b/bench/ds", "streaming") == "s3://b/bench/ds.streaming/"
    with pytest.raises(ValueError, match="unknown peer"):
        peer_uri("s3://b/ds/", "webdataset")


def test_the_peer_environment_carries_the_endpoint_for_streaming_and_plain_http_for_litdata():
    env = peer_env(LOCAL, base={"S3_ENDPOINT_URL": "http://stale:1", "PATH": "/bin"})
    assert env["S3_ENDPOINT_URL"] == env["AWS_ENDPOINT_URL"] == "http://127.0.0.1:9000"
    assert env["AWS_ALLOW_HTTP"] == "true" and env["AWS_ACCESS_KEY_ID"] == "AK" and env["PATH"] == "/bin"
    aws = peer_env(AWS, base={"S3_ENDPOINT_URL": "http://stale:1"})
    assert "S3_ENDPOINT_URL" not in aws and "AWS_ALLOW_HTTP" not in aws and aws["AWS_REGION"] == "eu-west-1"


def test_litdata_options_name_the_endpoint_and_path_style_but_no_secret():
    options = litdata_storage_options(LOCAL)
    assert options["endpoint_url"] == "http://127.0.0.1:9000" and options["region_name"] == "us-east-1"
    assert options["config"].s3 == {"addressing_style": "path"}
    assert "SK" not in repr(options) and "aws_secret_access_key" not in options
    assert "endpoint_url" not in litdata_storage_options(AWS)


def test_a_missing_peer_library_is_named_with_what_to_install():
    with pytest.raises(PeerMissing, match="no-such-peer-lib"):
        check_peers_installed(("no-such-peer-lib",))
    check_peers_installed(PEERS)  # both are pinned in requirements.txt


def test_the_sweep_takes_known_peers_only_and_counts_their_cells():
    quick = preset("quick", uri="s3://bench-bucket/bench/")
    assert quick.peers == PEERS
    assert peer_cell_count(quick, Planned(datasets=1, train=False, peer_train=False)) == len(PEERS) * (1 + 2) * 2
    assert preset("tiny", uri="s3://bench-bucket/bench/").peers == ()
    with pytest.raises(InvalidSpec, match="--peers"):
        preset("quick", uri="s3://bench-bucket/bench/", peers=("webdataset",))


def loader(source: str, kind: str, epoch: int, rate: float, **extra) -> dict:
    return {"cell": "loader", "status": "ok", "dataset": "d", "num_workers": 2, "epoch": epoch, "source": source,
            "kind": kind, "samples_per_s": rate, "loader_cpu_pct": 100.0, "program_cpu_pct": None, **extra}


def test_the_comparison_sets_the_fastest_mount_against_the_faster_peer_per_epoch_over_whole_epochs():
    # After warm-up LitData (1,000) is ahead of every mount; over the whole epoch s3fs (700) leads.
    cells = [loader("mountpoint/rclone", "mountpoint", 1, 800.0, program_cpu_pct=50.0, epoch_samples_per_s=650.0),
             loader("mountpoint/s3fs", "mountpoint", 1, 900.0, program_cpu_pct=40.0, epoch_samples_per_s=700.0,
                    first_batch_s=0.4),
             loader("s3io", "s3io", 1, 2000.0, epoch_samples_per_s=1500.0),
             loader("litdata", "peer", 1, 1000.0, peer="litdata", epoch_samples_per_s=500.0, first_batch_s=2.5),
             loader("streaming", "peer", 1, 600.0, peer="streaming", epoch_samples_per_s=560.0),
             loader("mountpoint/s3fs", "mountpoint", 2, 1200.0, epoch_samples_per_s=1000.0),
             loader("litdata", "peer", 2, 1100.0, peer="litdata", epoch_samples_per_s=1100.0),
             {"cell": "loader", "status": "failed: x", "source": "streaming", "kind": "peer", "epoch": 2}]
    first, second = peer_comparison(cells)
    assert (first["mount"], first["faster_peer"], first["ratio_to_faster_peer"], first["target_met"]) == \
        ("mountpoint/s3fs", "streaming", 1.25, True)
    assert (first["mount_first_batch_s"], first["litdata_first_batch_s"]) == (0.4, 2.5)
    assert first["mount_cpu_pct"] == 140.0 and first["streaming_samples_per_s"] == 600.0
    assert (first["mount_epoch_samples_per_s"], first["litdata_epoch_samples_per_s"]) == (700.0, 500.0)
    assert (second["epoch"], second["ratio_to_faster_peer"], second["target_met"]) == (2, 0.909, False)
    assert second["streaming_samples_per_s"] is None and second["store"] == "local"
