"""Training keeps its DataLoader workers over epochs and still trains each epoch's plan, each sample once.

Real local S3, real sources, `resnet.py train` in this process; `--sample-log` shows which samples each
epoch trained.  A resumed epoch gets workers of its own (its position cannot reach persistent ones) and the
epochs after it share persistent workers again.
"""

from __future__ import annotations

import collections

import pytest

from resnet import main

from torch_support import last_json_line, make_tiny_dataset

ARGS = ["--batch-size", "8", "--no-progress", "--precision", "32", "--arch", "resnet18", "--accelerator", "cpu",
        "--num-workers", "2", "--shuffle-buffer", "8"]


def train(capsys, uri: str, *args: str) -> dict:
    status = main(["train", uri, *ARGS, *args])
    out, err = capsys.readouterr()
    assert status == 0, err[-3000:]
    return last_json_line(out)


def epochs_in_log(path) -> dict[int, list[str]]:
    """Keys per epoch, in the order they trained."""
    order: dict[int, list[str]] = collections.defaultdict(list)
    for line in path.read_text().splitlines():
        key, epoch, _step, _rank = line.split()
        order[int(epoch)].append(key)
    return order


def assert_each_epoch_once(summary: dict, epochs: list[dict]) -> None:
    for epoch in epochs:
        assert epoch["images"] == epoch["distinct_images"] == summary["dataset_images"], epoch
        assert epoch["data_epochs"] == [epoch["epoch"]], "persistent workers must read the epoch being trained"


@pytest.mark.parametrize("kind", ["s3io", "fsspec"])
def test_three_epochs_with_persistent_workers_each_train_every_sample_once_in_their_own_order(
        kind, s3_env, bucket, tmp_path, capsys):
    uri = f"s3://{bucket}/data/"
    make_tiny_dataset(uri, num_images=32, shard_size="8KB")
    log = tmp_path / "samples.log"
    summary = train(capsys, uri, "--source-kind", kind, "--max-epochs", "3", "--sample-log", str(log))
    assert [e["epoch"] for e in summary["epochs"]] == [0, 1, 2]
    assert_each_epoch_once(summary, summary["epochs"])
    order = epochs_in_log(log)
    assert all(sorted(order[e]) == sorted(order[0]) and len(set(order[e])) == 32 for e in (1, 2))
    assert order[0] != order[1] != order[2], "each epoch has its own shuffle"


def test_a_resumed_epoch_then_two_more_train_every_sample_once(s3_env, bucket, tmp_path, capsys):
    uri = f"s3://{bucket}/data/"
    make_tiny_dataset(uri, num_images=32, shard_size="8KB")  # 4 steps per epoch
    location = str(tmp_path / "ckpt")
    stopped = train(capsys, uri, "--source-kind", "s3io", "--checkpoint-dir", location, "--max-steps", "2")
    assert stopped["global_step"] == 2
    resumed = train(capsys, uri, "--source-kind", "s3io", "--checkpoint-dir", location, "--resume",
                    "--max-epochs", "3")
    assert [(e["epoch"], e["images"]) for e in resumed["epochs"]] == [(0, 16), (1, 32), (2, 32)]
    assert resumed["global_step"] == 2 + 2 + 4 + 4
    assert_each_epoch_once(resumed, resumed["epochs"][1:])
