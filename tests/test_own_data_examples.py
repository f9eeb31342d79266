"""The two own-data examples run as a user would run them, against the local S3, and train every sample."""

from __future__ import annotations

import json

from torch_support import run_example


def _output(done) -> dict:
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_own_shards_example_indexes_shardwriter_shards_and_trains_them(s3_env, bucket):
    result = _output(run_example("own_shards.py", f"s3://{bucket}/own/", timeout=400))
    assert (result["shards"], result["samples"], result["classes"]) == (4, 64, 4)
    assert result["index"] == f"s3://{bucket}/own/index.wids.json" and result["trained_images"] == 64


def test_own_class_tree_example_indexes_a_class_tree_and_trains_it_map_style(s3_env, bucket):
    result = _output(run_example("own_class_tree.py", f"s3://{bucket}/tree/", timeout=400))
    assert (result["images"], result["classes"]) == (48, 3) and result["trained_images"] == 48
