"""`resnet.py train --log-dir DIR` keeps loss and images/s over time in metrics.csv and TensorBoard event files."""

from __future__ import annotations

import csv
import glob
import math
import os

from resnet import main

from torch_support import last_json_line, make_tiny_dataset


def test_log_dir_gets_a_metrics_csv_and_tensorboard_events_with_loss_and_images_per_second(s3_env, bucket, tmp_path,
                                                                                           capsys):
    uri = f"s3://{bucket}/data/"
    make_tiny_dataset(uri, num_images=96)  # 12 steps of 8: rows at steps 10 and after
    status = main(["train", uri, "--source-kind", "s3io", "--batch-size", "8", "--num-workers", "0",
                   "--precision", "32", "--warmup-batches", "1", "--no-progress", "--log-dir", str(tmp_path / "runs")])
    out, err = capsys.readouterr()
    assert status == 0, err[-3000:]
    summary = last_json_line(out)
    assert summary["metrics_csv"] == str(tmp_path / "runs" / "version_0" / "metrics.csv")
    with open(summary["metrics_csv"], newline="") as f:
        rows = list(csv.DictReader(f))
    assert rows and {"step", "epoch", "loss", "img/s"} <= set(rows[0])
    last = [r for r in rows if r["loss"]][-1]  # epoch-end rows hold only data_wait_fraction
    assert float(last["loss"]) > 0 and float(last["img/s"]) > 0
    # TensorBoard reads the same scalars back, at the same steps, from the event file beside metrics.csv.
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    version_dir = os.path.dirname(summary["metrics_csv"])
    assert glob.glob(os.path.join(version_dir, "events.out.tfevents.*"))
    events = EventAccumulator(version_dir)
    events.Reload()
    tags = ("loss", "img/s", "data_wait_fraction")  # the last: DataWaitMonitor's, once per epoch
    assert set(tags) <= set(events.Tags()["scalars"])
    for tag in tags:
        logged = {int(r["step"]): float(r[tag]) for r in rows if r.get(tag)}
        read_back = {e.step: e.value for e in events.Scalars(tag)}  # float32 in the event file
        assert logged and read_back.keys() == logged.keys()
        assert all(math.isclose(read_back[step], value, rel_tol=1e-6) for step, value in logged.items())


def test_without_log_dir_nothing_is_written(s3_env, bucket, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    uri = f"s3://{bucket}/data/"
    make_tiny_dataset(uri, num_images=16)
    status = main(["train", uri, "--source-kind", "s3io", "--batch-size", "8", "--num-workers", "0",
                   "--precision", "32", "--no-progress"])
    out, err = capsys.readouterr()
    assert status == 0, err[-3000:]
    assert last_json_line(out)["metrics_csv"] is None
    assert list(tmp_path.iterdir()) == []
