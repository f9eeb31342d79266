"""`resnet.py train` reports the share of step time spent waiting for data, and says so when the model starves."""

from __future__ import annotations

import contextlib
import csv
import socket
import threading
import time
import urllib.request
from dataclasses import dataclass
from typing import Any

import pytest

from mountctl.pytorch.cli import main
from mountctl.pytorch.data import sources

from torch_support import last_json_line, make_tiny_dataset


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _scrape_while(port: int, done: threading.Event, pages: list[str]) -> None:
    while not done.wait(0.1):
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=1) as page:
                pages.append(page.read().decode())
        except OSError:
            pass


def test_a_loader_faster_than_the_model_reports_a_low_fraction_everywhere(s3_env, bucket, tmp_path, capsys):
    uri = f"s3://{bucket}/data/"
    make_tiny_dataset(uri, num_images=96)  # 12 steps of 8
    port, done, pages = _free_port(), threading.Event(), []
    scraper = threading.Thread(target=_scrape_while, args=(port, done, pages), daemon=True)
    scraper.start()
    try:
        status = main(["train", uri, "--source-kind", "s3io", "--batch-size", "8", "--num-workers", "2",
                       "--precision", "32", "--warmup-batches", "2", "--no-progress", "--metrics-port", str(port),
                       "--log-dir", str(tmp_path / "runs")])
    finally:
        done.set()
        scraper.join(timeout=5)
    out, err = capsys.readouterr()
    assert status == 0, err[-3000:]
    summary = last_json_line(out)
    print(f"\n[data wait, fast loader] {summary['data_wait']}")
    assert summary["data_wait_threshold"] == 0.2
    assert summary["data_wait"][0]["steps"] == 10  # 12 steps less the 2 of warm-up
    assert 0 <= summary["data_wait_fraction"] < 0.2
    with open(summary["metrics_csv"], newline="") as f:
        logged = [float(row["data_wait_fraction"]) for row in csv.DictReader(f) if row.get("data_wait_fraction")]
    assert logged == pytest.approx([summary["data_wait_fraction"]], abs=1e-6)  # Lightning logs it as float32
    assert "training waited for data" not in err
    assert pages and 'mountctl_training_step_seconds_total{source_kind="s3io"}' in pages[-1]
    with socket.socket() as probe:  # the trainer's /metrics port is closed again when training ends
        assert probe.connect_ex(("127.0.0.1", port)) != 0


@dataclass(frozen=True)
class _SlowStore:
    """The real s3io source, with each shard's first byte 0.3 s late: a store far away (no real far store
    is part of this suite's fixtures, so the delay is added here)."""

    inner: Any
    kind: str = "s3io"

    def open_shards(self, names, etags=None):
        for name, stream in self.inner.open_shards(names, etags):
            time.sleep(0.3)
            yield name, stream

    def describe(self):
        return self.inner.describe()


def test_a_starved_model_reports_a_high_fraction_and_one_line_of_advice(s3_env, bucket, capsys, monkeypatch):
    uri = f"s3://{bucket}/data/"
    make_tiny_dataset(uri, num_images=48, shard_size="8KB")  # shards of a few images: a delay every step
    real = sources.SOURCE_KINDS["s3io"]

    @contextlib.contextmanager
    def slow(uri, settings, **options):
        with real(uri, settings, **options) as inner:
            yield _SlowStore(inner)

    monkeypatch.setitem(sources.SOURCE_KINDS, "s3io", slow)
    status = main(["train", uri, "--source-kind", "s3io", "--arch", "resnet18", "--batch-size", "8",
                   "--num-workers", "1", "--precision", "32", "--warmup-batches", "1", "--no-progress"])
    out, err = capsys.readouterr()
    assert status == 0, err[-3000:]
    summary = last_json_line(out)
    print(f"\n[data wait, starved] {summary['data_wait']}")
    assert summary["data_wait_fraction"] > 0.5
    advice = [line for line in err.splitlines() if "training waited for data" in line]
    assert len(advice) == 1 and "s3io" in advice[0] and "--num-workers" in advice[0]
