"""Training on data that `make` did not write: shards from webdataset's `ShardWriter` and class trees, indexed once.

Every test uploads real data with boto3 to the real local S3 (no manifest), runs the real command line
(`resnet.py index`, `resnet.py train`) and audits `--sample-log`: every sample trained exactly once.
Tiny on purpose: ResNet-18, 32 px, tens of samples, CPU.  Runs that succeed call the command line's
``main`` in this process (a child would spend about 5 s of CPU importing torch and Lightning first);
refusals, and the runs that are killed, run ``resnet.py`` as a child.
"""

from __future__ import annotations

import collections
import contextlib
import io
import json
import os
import signal
import subprocess
import sys
import time
import uuid

import pytest
from own_data_support import listing, write_class_tree, write_shards
from test_resume import TINY, SampleLogs, kill_resume_audit

from resnet import main

from conftest import require_fuse
from torch_support import REPO, RESNET_PY, last_json_line, run_cli

pytestmark = pytest.mark.usefixtures("s3_env")


def succeeds(argv: list[str]) -> dict:
    """`resnet.py ARGV` run in this process; its JSON summary line."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        status = main(argv)
    assert status == 0, err.getvalue()[-3000:]
    return last_json_line(out.getvalue())


def index(uri: str, *extra: str) -> dict:
    return succeeds(["index", uri, "--no-progress", "--jobs", "2", *extra])


def train(uri: str, tmp_path, *extra: str) -> tuple[dict, collections.Counter]:
    log = str(tmp_path / f"samples-{uuid.uuid4().hex[:6]}.log")
    summary = succeeds(["train", uri, *TINY, "--max-epochs", "1", "--sample-log", log, *extra])
    return summary, collections.Counter(row[0] for row in SampleLogs(log).read_new())


def kind_args(kind: str, mount_root) -> list[str]:
    if kind == "mountpoint":
        require_fuse()
        return ["--source-kind", kind, "--backend", "rclone", "--mount-dir", str(mount_root / "m")]
    return ["--source-kind", kind]


def test_shardwriter_shards_train_after_index_with_every_sample_once(s3, bucket, mount_root, tmp_path):
    """Through a mount; the kill-and-resume test below trains indexed shards through every source kind."""
    keys = write_shards(s3, bucket, "own/", str(tmp_path / "w"), shards=4, per_shard=6, classes=5)
    summary = index(f"s3://{bucket}/own/")
    assert (summary["shards"], summary["samples"], summary["classes"], summary["label"]) == (4, 24, 5, "cls")
    trained, counts = train(f"s3://{bucket}/own/", tmp_path, *kind_args("mountpoint", mount_root), "--num-workers", "2")
    assert set(counts) == set(keys) and set(counts.values()) == {1}
    assert trained["global_step"] == 6  # 24 samples in batches of 4


@pytest.mark.parametrize("kind", ["mountpoint", "s3io", "fsspec"])
def test_kill_and_resume_on_indexed_shards_trains_every_sample_once(kind, s3, bucket, mount_root, tmp_path):
    keys = write_shards(s3, bucket, "own/", str(tmp_path / "w"), shards=4, per_shard=12, classes=3)
    summary = index(f"s3://{bucket}/own/")
    assert (summary["shards"], summary["samples"], summary["classes"]) == (4, len(keys), 3)
    layout = [*kind_args(kind, mount_root), "--num-workers", "2"]
    counts, summary = kill_resume_audit(f"s3://{bucket}/own/", tmp_path, before=layout, after=layout, num_images=48)
    assert summary["global_step"] == 12


def test_map_style_random_access_into_indexed_shards_trains_every_sample_once(s3, bucket, tmp_path):
    keys = write_shards(s3, bucket, "own/", str(tmp_path / "w"), shards=3, per_shard=8, classes=4, image="png")
    index(f"s3://{bucket}/own/")
    trained, counts = train(f"s3://{bucket}/own/", tmp_path, "--source-kind", "s3io", "--random-access",
                            "--num-workers", "2")
    assert len(counts) == len(keys) == 24 and set(counts.values()) == {1}


def test_labels_from_a_json_field(s3, bucket, tmp_path):
    write_shards(s3, bucket, "own/", str(tmp_path / "w"), shards=2, per_shard=6, classes=7, label="json")
    refused = run_cli(["index", f"s3://{bucket}/own/", "--no-progress"])
    assert refused.returncode == 1 and "--label-field" in refused.stderr
    summary = index(f"s3://{bucket}/own/", "--label-field", "label")
    assert (summary["label"], summary["classes"]) == ("json:label", 7)
    trained, counts = train(f"s3://{bucket}/own/", tmp_path, "--source-kind", "fsspec", "--num-workers", "1")
    assert len(counts) == 12


def test_brace_pattern_trains_the_shards_it_names(s3, bucket, tmp_path):
    keys = write_shards(s3, bucket, "own/", str(tmp_path / "w"), shards=4, per_shard=4)
    index(f"s3://{bucket}/own/")
    trained, counts = train(f"s3://{bucket}/own/train-{{000001..000002}}.tar", tmp_path, "--source-kind", "s3io",
                            "--num-workers", "1")
    assert sorted(counts) == keys[4:12] and set(counts.values()) == {1}


def test_no_index_names_the_index_command_never_make(s3, bucket, tmp_path):
    write_shards(s3, bucket, "own/", str(tmp_path / "w"), shards=2, per_shard=3)
    done = run_cli(["train", f"s3://{bucket}/own/", *TINY, "--source-kind", "s3io"])
    assert done.returncode == 1
    assert "2 .tar shards but no index" in done.stderr and f"resnet.py index s3://{bucket}/own/" in done.stderr
    assert "make" not in done.stderr


def test_overwritten_shard_is_refused_at_start_in_one_line(s3, bucket, tmp_path):
    write_shards(s3, bucket, "own/", str(tmp_path / "w"), shards=2, per_shard=3)
    index(f"s3://{bucket}/own/")
    other = tmp_path / "other"
    write_shards(s3, bucket, "elsewhere/", str(other), shards=2, per_shard=3, classes=2)  # same shape, new bytes
    s3.upload_file(str(other / "train-000001.tar"), bucket, "own/train-000001.tar")
    done = run_cli(["train", f"s3://{bucket}/own/", *TINY, "--source-kind", "s3io"])
    assert done.returncode == 1
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert f"s3://{bucket}/own/train-000001.tar changed since it was indexed" in lines[0]
    assert f"resnet.py index s3://{bucket}/own/" in lines[0] and "make" not in lines[0]


def test_read_only_prefix_indexes_to_index_out_and_writes_nothing_under_it(local_s3, s3, bucket, tmp_path,
                                                                           monkeypatch):
    from mountctl.local_s3.identities import add_identity

    keys = write_shards(s3, bucket, "own/", str(tmp_path / "w"), shards=2, per_shard=4)
    before = listing(s3, bucket, "own/")
    user, access, secret = f"ro-{uuid.uuid4().hex[:6]}", f"RO{uuid.uuid4().hex[:16].upper()}", uuid.uuid4().hex
    add_identity(local_s3, user, access, secret, actions=("Read", "List"))
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", access)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", secret)
    refused = run_cli(["index", f"s3://{bucket}/own/", "--no-progress"])
    assert refused.returncode == 1 and "--index-out" in refused.stderr, refused.stderr
    out = str(tmp_path / "indexes" / "own.json")
    summary = index(f"s3://{bucket}/own/", "--index-out", out)
    assert summary["reused_from_state"] == 2  # the refused run had read both shards already
    assert listing(s3, bucket, "own/") == before
    trained, counts = train(f"s3://{bucket}/own/", tmp_path, "--source-kind", "s3io", "--num-workers", "1",
                            "--index", out)
    assert sorted(counts) == keys
    assert listing(s3, bucket, "own/") == before


def test_indexing_resumes_after_an_interruption_reading_only_the_shards_left(s3, bucket, tmp_path):
    write_shards(s3, bucket, "own/", str(tmp_path / "w"), shards=4, per_shard=3)
    good = s3.get_object(Bucket=bucket, Key="own/train-000002.tar")["Body"].read()
    s3.put_object(Bucket=bucket, Key="own/train-000002.tar", Body=good[:1500])  # cut mid-member
    out = str(tmp_path / "index.json")
    failed = run_cli(["index", f"s3://{bucket}/own/", "--no-progress", "--index-out", out, "--jobs", "1"])
    assert failed.returncode == 1 and "train-000002.tar is truncated" in failed.stderr, failed.stderr
    assert not os.path.exists(out)
    s3.put_object(Bucket=bucket, Key="own/train-000002.tar", Body=good)
    summary = index(f"s3://{bucket}/own/", "--index-out", out)
    assert summary["reused_from_state"] == 2 and summary["samples"] == 12  # the two read before the bad one
    s3.upload_file(str(tmp_path / "w" / "train-000000.tar"), bucket, "own/train-000003.tar")  # a new version
    again = index(f"s3://{bucket}/own/", "--index-out", out)  # the earlier index stands in for the state
    assert again["reused_from_state"] == 3 and again["samples"] == 12


def test_index_stops_at_the_first_unreadable_shard_without_reading_the_rest(s3, bucket, tmp_path):
    write_shards(s3, bucket, "own/", str(tmp_path / "w"), shards=30, per_shard=2)
    good = s3.get_object(Bucket=bucket, Key="own/train-000001.tar")["Body"].read()
    s3.put_object(Bucket=bucket, Key="own/train-000001.tar", Body=good[:1500])  # cut mid-member, early in the list
    out = str(tmp_path / "index.json")
    failed = run_cli(["index", f"s3://{bucket}/own/", "--no-progress", "--index-out", out, "--jobs", "2"])
    assert failed.returncode == 1 and len(failed.stderr.strip().splitlines()) == 1, failed.stderr
    assert "train-000001.tar is truncated" in failed.stderr
    s3.put_object(Bucket=bucket, Key="own/train-000001.tar", Body=good)
    summary = index(f"s3://{bucket}/own/", "--index-out", out)
    # Kept: the first shard and at most what the other reader had under way; never the 28 queued behind the error.
    assert summary["reused_from_state"] <= 3 and summary["shards"] == 30


def test_ctrl_c_stops_index_at_once_in_one_line_and_the_rerun_reads_only_the_shards_left(s3, bucket, tmp_path):
    from mountctl.pytorch.data.index.indexer import IndexConfig, _state_path
    from mountctl.pytorch.data.index.location import parse_data_uri

    uri = f"s3://{bucket}/own/"
    write_shards(s3, bucket, "own/", str(tmp_path / "w"), shards=40, per_shard=10)
    state = _state_path(IndexConfig(uri), parse_data_uri(uri))
    out = str(tmp_path / "index.json")
    # Ranged header reads: a few requests per sample, so the 40 shards take a while to read.
    child = subprocess.Popen([sys.executable, RESNET_PY, "index", uri, "--no-progress", "--index-out", out,
                              "--read", "headers", "--jobs", "2"], cwd=REPO, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while not (os.path.exists(state) and len(open(state, encoding="utf-8").readlines()) >= 2):
            assert child.poll() is None and time.monotonic() < deadline, "no shard was indexed"
            time.sleep(0.01)
        child.send_signal(signal.SIGINT)
        _, stderr = child.communicate(timeout=30)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait(timeout=10)
    assert child.returncode == 130
    assert len(stderr.strip().splitlines()) == 1 and "interrupted" in stderr and "run the same command" in stderr, \
        stderr
    with open(state, encoding="utf-8") as f:
        kept = len(f.read().splitlines()) - 1
    assert 1 <= kept < 40 and not os.path.exists(out)
    summary = index(uri, "--index-out", out)
    assert summary["reused_from_state"] == kept and summary["shards"] == 40 and summary["samples"] == 400


def test_class_tree_trains_map_style_with_imagefolder_labels(s3, bucket, tmp_path):
    keys = write_class_tree(s3, bucket, "tree/")
    summary = index(f"s3://{bucket}/tree/")
    assert (summary["layout"], summary["files"], summary["classes"]) == ("files", 15, 3)
    stored = json.loads(s3.get_object(Bucket=bucket, Key="tree/index.wids.json")["Body"].read())
    assert stored["mountctl"]["classes"] == ["n01", "n02", "n10"]  # as torchvision's ImageFolder sorts them
    assert {f["key"].split("/")[0]: f["label"] for f in stored["mountctl"]["files"]} == {"n01": 0, "n02": 1, "n10": 2}
    trained, counts = train(f"s3://{bucket}/tree/", tmp_path, "--source-kind", "s3io", "--num-workers", "2")
    assert sorted(counts) == sorted(k[len("tree/"):] for k in keys) and set(counts.values()) == {1}


def test_class_tree_kill_and_resume_trains_every_image_once(s3, bucket, tmp_path):
    write_class_tree(s3, bucket, "tree/", per_class=12)
    index(f"s3://{bucket}/tree/")
    layout = ["--source-kind", "fsspec", "--num-workers", "2"]
    counts, summary = kill_resume_audit(f"s3://{bucket}/tree/", tmp_path, before=layout, after=layout, num_images=36)
    assert summary["global_step"] == 9


def test_wids_reads_the_index_mountctl_wrote_and_finds_the_same_samples(s3, bucket, tmp_path):
    """The real ``wids.ShardListDataset`` opens ``index.wids.json`` (its shard URLs relative to the index, as
    wids resolves them) over a copy of the prefix: same samples, same labels, images at the index's offsets."""
    import wids

    keys = write_shards(s3, bucket, "own/", str(tmp_path / "w"), shards=3, per_shard=5, classes=4)
    index(f"s3://{bucket}/own/")
    copy = tmp_path / "copy"
    copy.mkdir()
    for key in listing(s3, bucket, "own/"):
        s3.download_file(bucket, key, str(copy / key[len("own/"):]))
    stored = json.loads((copy / "index.wids.json").read_text())
    dataset = wids.ShardListDataset(str(copy / "index.wids.json"), cache_dir=str(tmp_path / "cache"),
                                    transformations=[])
    assert len(dataset) == len(keys) == 15
    entries = [(entry["url"], more) for entry, more in zip(stored["shardlist"], stored["mountctl"]["shards"],
                                                             strict=True)]
    position = 0
    for url, more in entries:
        body = (copy / url).read_bytes()
        for (image_at, image_size, *_), label in zip(more["members"], more["labels"], strict=True):
            sample = dataset[position]
            assert sample["__key__"] == keys[position]
            assert int(sample[".cls"].read()) == label
            assert sample[".jpg"].read() == body[image_at:image_at + image_size]
            position += 1


def test_a_sample_keyed_with_two_underscores_is_indexed_and_trained_once(s3, bucket, tmp_path):
    """webdataset reads ``__a.jpg`` as sample ``__a``: the index counts it too, so no later sample is dropped."""
    import webdataset
    from own_data_support import image_bytes

    keys = ["img0", "__a", "img2", "img3", "img4", "img5"]
    pattern = str(tmp_path / "train-%06d.tar")
    with webdataset.ShardWriter(pattern, maxcount=len(keys), verbose=0) as writer:
        for n, key in enumerate(keys):
            writer.write({"__key__": key, "jpg": image_bytes(n), "cls": n % 3})
    s3.upload_file(pattern % 0, bucket, "own/train-000000.tar")
    summary = index(f"s3://{bucket}/own/")
    assert summary["samples"] == len(keys)
    trained, counts = train(f"s3://{bucket}/own/", tmp_path, "--source-kind", "s3io", "--num-workers", "1")
    assert sorted(counts) == sorted(keys) and set(counts.values()) == {1}
