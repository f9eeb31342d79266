"""A torchdata.nodes pipeline over a real mount, SIGKILLed mid-epoch and resumed: every sample once.

The run is ``examples/torchdata_nodes_over_mount.py`` (ShardBatchNode -> Prefetcher -> PinMemory ->
Loader) reading a real SeaweedFS bucket through a real FUSE mount; after each batch it saves the
loader's state and the samples seen.  The kill comes from outside, to the whole process group, in
the middle of the epoch; the resume runs on another worker count.
"""

from __future__ import annotations

import collections
import json
import os
import signal
import subprocess
import sys
import time

from conftest import require_fuse
from torch_support import REPO, last_json_line, make_tiny_dataset

EXAMPLE = os.path.join(REPO, "examples", "torchdata_nodes_over_mount.py")


def run(uri: str, state: str, workers: int) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, EXAMPLE, uri, "--state", state, "--num-workers", str(workers),
                             "--batch-size", "4"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            cwd=REPO, start_new_session=True)


def test_a_nodes_loader_killed_mid_epoch_resumes_on_other_workers_with_every_sample_once(s3_env, bucket,
                                                                                         mount_root, tmp_path):
    require_fuse()
    uri = f"s3://{bucket}/nodes/"
    made = make_tiny_dataset(uri, num_images=64, shard_size="24KB", num_classes=5)
    assert len(made.manifest.shards) > 2
    state = str(tmp_path / "state.json")

    first = run(uri, state, workers=2)
    deadline = time.monotonic() + 120
    steps = 0
    while steps < 3:  # three batches trained: kill it
        assert time.monotonic() < deadline, "the first run never reached its third batch"
        line = first.stdout.readline()  # type: ignore[union-attr]
        assert line, f"the first run ended early:\n{first.stderr.read()[-3000:]}"  # type: ignore[union-attr]
        steps += line.startswith('{"step"')
    os.killpg(first.pid, signal.SIGKILL)
    first.communicate(timeout=60)
    with open(state) as f:
        saved = json.load(f)
    assert 3 * 4 <= len(saved["seen"]) < 64 and not saved["done"], "the kill did not land mid-epoch"

    second = run(uri, state, workers=1)
    out, err = second.communicate(timeout=180)
    assert second.returncode == 0, err[-3000:]
    summary = last_json_line(out)
    assert summary["resumed_at"] == len(saved["seen"]) and summary["kind"] == "mountpoint"
    counts = collections.Counter(summary["seen"])
    assert sorted(counts) == list(range(64)), f"{64 - len(counts)} samples never trained"
    assert set(counts.values()) == {1}, {k: n for k, n in counts.items() if n > 1}
