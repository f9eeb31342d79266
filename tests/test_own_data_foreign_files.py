"""Files of the user's that share a name with ours: another tool's wids index, a ``manifest.json`` of their own.

The user's data is read-only to mountctl: such a file is never overwritten, no error advises a command that would
overwrite it, and an index another tool wrote is refused at load in one line rather than failing later.  Real
shards from webdataset's ``ShardWriter``, a real index from webdataset's own ``widsindex`` command, the real local S3.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from own_data_support import write_shards
from test_own_data import index, train
from test_resume import TINY

from torch_support import run_cli

pytestmark = pytest.mark.usefixtures("s3_env")

USERS_MANIFEST = json.dumps({"name": "my-dataset", "version": 3, "shards": ["train-000000.tar", "train-000001.tar"]})


def widsindex_beside(s3, bucket: str, directory: str) -> str:
    """``widsindex create`` run over the local copies of the shards, uploaded as ``own/index.wids.json``."""
    widsindex = os.path.join(os.path.dirname(sys.executable), "widsindex")  # the venv's bin, not its target
    names = sorted(n for n in os.listdir(directory) if n.endswith(".tar"))
    done = subprocess.run([sys.executable, widsindex, "create", *names, "--output", "index.wids.json"],
                          cwd=directory, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    s3.upload_file(os.path.join(directory, "index.wids.json"), bucket, "own/index.wids.json")
    return s3.head_object(Bucket=bucket, Key="own/index.wids.json")["ETag"]


def test_a_widsindex_index_is_refused_at_load_in_one_line_naming_the_index_command(s3, bucket, tmp_path):
    write_shards(s3, bucket, "own/", str(tmp_path / "w"), shards=2, per_shard=4)
    widsindex_beside(s3, bucket, str(tmp_path / "w"))
    done = run_cli(["train", f"s3://{bucket}/own/", *TINY, "--source-kind", "s3io"])
    assert done.returncode == 1
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert f"s3://{bucket}/own/index.wids.json" in lines[0] and "number of classes" in lines[0]
    assert f"resnet.py index s3://{bucket}/own/ --index-out PATH" in lines[0] and "--index PATH" in lines[0]


def test_index_never_overwrites_a_wids_index_another_tool_wrote_beside_the_data(s3, bucket, tmp_path):
    write_shards(s3, bucket, "own/", str(tmp_path / "w"), shards=2, per_shard=4)
    theirs = widsindex_beside(s3, bucket, str(tmp_path / "w"))
    refused = run_cli(["index", f"s3://{bucket}/own/", "--no-progress"])
    assert refused.returncode == 1 and len(refused.stderr.strip().splitlines()) == 1, refused.stderr
    assert "not written by mountctl" in refused.stderr and "--index-out" in refused.stderr
    assert s3.head_object(Bucket=bucket, Key="own/index.wids.json")["ETag"] == theirs
    out = str(tmp_path / "own.json")
    summary = index(f"s3://{bucket}/own/", "--index-out", out)
    assert summary["samples"] == 8
    assert s3.head_object(Bucket=bucket, Key="own/index.wids.json")["ETag"] == theirs


def test_a_users_own_manifest_json_is_left_alone_and_the_index_beside_it_is_used(s3, bucket, tmp_path):
    keys = write_shards(s3, bucket, "own/", str(tmp_path / "w"), shards=2, per_shard=4)
    s3.put_object(Bucket=bucket, Key="own/manifest.json", Body=USERS_MANIFEST.encode())
    theirs = s3.head_object(Bucket=bucket, Key="own/manifest.json")["ETag"]
    summary = index(f"s3://{bucket}/own/")
    assert (summary["shards"], summary["samples"]) == (2, 8)
    assert s3.head_object(Bucket=bucket, Key="own/manifest.json")["ETag"] == theirs
    trained, counts = train(f"s3://{bucket}/own/", tmp_path, "--source-kind", "s3io", "--num-workers", "1")
    assert sorted(counts) == keys
    assert s3.head_object(Bucket=bucket, Key="own/manifest.json")["ETag"] == theirs


def test_a_users_own_manifest_json_with_no_index_is_not_advised_to_be_rebuilt(s3, bucket, tmp_path):
    write_shards(s3, bucket, "own/", str(tmp_path / "w"), shards=2, per_shard=4)
    s3.put_object(Bucket=bucket, Key="own/manifest.json", Body=USERS_MANIFEST.encode())
    done = run_cli(["train", f"s3://{bucket}/own/", *TINY, "--source-kind", "s3io"])
    assert done.returncode == 1 and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert f"resnet.py index s3://{bucket}/own/" in done.stderr
    assert "rebuild" not in done.stderr and "make" not in done.stderr
