"""Where an epoch's first seconds go: a breakdown of the loader's fixed cost per epoch, and training's.

    PYTHONPATH=$PWD .venv/bin/python benchmarks/lab/epoch_start.py [--images 2000] [--epochs 2] [--train]

Starts a private local S3 server, makes (or reuses) a synthetic dataset on it, copies the shards to
local disk, and reads ``--epochs`` epochs through ``EpochLoader`` over ``ShardDataset`` (what the bench's
loader cells and ``train`` read through) in a fresh Python process per source, so that what a process
has or has not imported is part of the measurement.  The workers stamp their first batch with when
they started, how long their lazy imports took, when the first shard opened, when the first sample of
the epoch's order came out of the shuffle window, and when the first decode and the first batch were
done.  ``--train`` also trains a small model for ``--epochs`` epochs and prints time to first batch,
whole epoch and after warm-up from ``ThroughputMonitor``.  Everything it starts it stops.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from typing import Any

LAZY_IMPORTS = ("numpy", "PIL.Image", "webdataset.tariterators", "torchcodec.decoders")


def _child(args: argparse.Namespace) -> None:
    """One source, ``--epochs`` epochs, in this (fresh) process; prints one JSON line per epoch."""
    began = time.monotonic()
    import torch  # noqa: F401

    torch_s = time.monotonic() - began
    from benchmarks.harness.limits import LocalDiskSource
    from mountctl import resolve
    from mountctl.pytorch.data.datasets import dataset as dataset_module
    from mountctl.pytorch.data.datasets.dataset import EpochLoader, ShardDataset
    from mountctl.pytorch.data.datasets.epoch_follower import EpochFollower, shut_down_workers
    from mountctl.pytorch.data.datasets.worker_imports import import_worker_modules
    from mountctl.pytorch.data.index.manifest import load_manifest
    from mountctl.pytorch.data.sources import MountpointOptions, open_source

    settings = resolve()
    manifest = load_manifest(settings, args.uri)
    began = time.monotonic()
    if args.no_parent_imports:  # as before the fix: each forked worker imports them for itself
        dataset_module.import_worker_modules = lambda: None  # type: ignore[attr-defined]  # this process only
    else:
        import_worker_modules()  # what EpochLoader does before its first fork, timed apart here
    parent_imports_s = time.monotonic() - began
    original_decode = dataset_module.decode
    marks: dict[str, float] = {}
    started: list[float] = []  # worker_init_fn's stamp, taken by the first __iter__ after it

    def timed_decode(sample: Any, size: int) -> Any:
        marks.setdefault("decode_start", time.monotonic())
        out = original_decode(sample, size)
        marks.setdefault("decode_end", time.monotonic())
        return out

    dataset_module.decode = timed_decode  # type: ignore[assignment]  # this measuring process only

    class Timed(ShardDataset):
        def raw_samples(self, assignment: Any) -> Any:
            for number, sample in enumerate(super().raw_samples(assignment)):
                if number == 0:
                    marks["first_sample"] = time.monotonic()
                yield sample

        def __iter__(self) -> Any:
            marks.clear()
            if started:
                marks["worker_start"] = started.pop()
            marks["iter"] = time.monotonic()
            imports = 0.0
            for name in LAZY_IMPORTS:
                if name not in sys.modules:
                    before = time.monotonic()
                    __import__(name)
                    imports += time.monotonic() - before
            marks["imports_s"] = imports
            for number, batch in enumerate(super().__iter__()):
                if number == 0:
                    batch["_marks"] = {**marks, "batch": time.monotonic(), "pid": os.getpid()}
                yield batch

    class TimedSource:
        """The source, stamping when its first shard opened."""

        def __init__(self, inner: Any) -> None:
            self.inner = inner

        def open_shards(self, names: Any) -> Any:
            for number, opened in enumerate(self.inner.open_shards(names)):
                if number == 0:
                    marks["opened"] = time.monotonic()
                yield opened

    def stamp_start(worker: int) -> None:
        started.append(time.monotonic())

    def epochs(source: Any) -> None:
        dataset = Timed(manifest, TimedSource(source), batch_size=args.batch_size, seed=0,
                        shuffle_buffer=args.shuffle_buffer)
        current = [0]
        persistent = EpochLoader(EpochFollower(dataset), epoch_fn=lambda: current[0], num_workers=args.workers,
                                 worker_init_fn=stamp_start, timeout=600, persistent_workers=True)
        for epoch in range(args.epochs):
            current[0] = epoch
            loader = persistent if args.persistent else EpochLoader(
                dataset, epoch_fn=lambda e=epoch: e, num_workers=args.workers, worker_init_fn=stamp_start, timeout=600)
            start = time.monotonic()
            times, sizes, stamps = [], [], []
            for batch in loader:
                times.append(time.monotonic())
                sizes.append(len(batch["index"]))
                if "_marks" in batch:
                    stamps.append(batch["_marks"])
            first = min(stamps, key=lambda m: m["batch"])
            worker_start = first.get("worker_start")
            warm = min(args.warmup_batches, len(times) - 1)
            row = {
                "source": args.source, "persistent": args.persistent,
                "parent_imports": not args.no_parent_imports, "epoch": epoch + 1, "torch_import_s": round(torch_s, 2) if epoch == 0 else 0,
                "parent_imports_s": round(parent_imports_s, 2) if epoch == 0 else 0,
                "worker_start_s": round(worker_start - start, 3) if worker_start else 0.0,
                "worker_imports_s": round(first["imports_s"], 3),
                "first_open_s": round(first["opened"] - first["iter"] - first["imports_s"], 3),
                "shuffle_window_s": round(first["first_sample"] - first["opened"], 3),
                "first_decode_s": round(first["decode_end"] - first["decode_start"], 3),
                "rest_of_first_batch_s": round(first["batch"] - first["decode_end"], 3),
                "to_main_s": round(times[0] - first["batch"], 3),
                "first_batch_s": round(times[0] - start, 3),
                "epoch_s": round(times[-1] - start, 3),
                "whole_epoch_samples_per_s": round(sum(sizes) / (times[-1] - start), 1),
                "after_warmup_samples_per_s": round(sum(sizes[warm + 1:]) / (times[-1] - times[warm]), 1),
            }
            print(json.dumps(row), flush=True)
        shut_down_workers(persistent)

    if args.source == "local-disk":
        epochs(LocalDiskSource(args.local_dir))
    else:
        with open_source("mountpoint", args.uri, settings, mountpoint=MountpointOptions(backend=args.source)) as source:
            epochs(source)


def _train_child(args: argparse.Namespace) -> None:
    import io

    from mountctl.pytorch.data.sources import MountpointOptions
    from mountctl.pytorch.training.trainer import TrainConfig, train

    started = time.monotonic()
    config = TrainConfig(uri=args.uri, source_kind="mountpoint", mountpoint=MountpointOptions(backend=args.source),
                         batch_size=args.batch_size,
                         max_epochs=args.epochs, num_workers=args.workers, arch="resnet18", devices="1",
                         accelerator="cpu", warmup_batches=args.warmup_batches, progress=False)
    summary = train(config, out=io.StringIO())
    for number, epoch in enumerate(summary["epochs"], start=1):
        print(json.dumps({"train": args.source, "epoch": number, **{k: epoch.get(k) for k in (
            "first_batch_s", "seconds", "epoch_images_per_s", "images_per_s")}}), flush=True)
    print(json.dumps({"train": args.source, "call_to_end_s": round(time.monotonic() - started, 2)}), flush=True)


def _run_children(args: argparse.Namespace, uri: str, local_dir: str, env: dict[str, str]) -> None:
    common = [sys.executable, __file__, "--uri", uri, "--local-dir", local_dir, "--epochs", str(args.epochs),
              "--workers", str(args.workers), "--batch-size", str(args.batch_size),
              "--shuffle-buffer", str(args.shuffle_buffer), "--warmup-batches", str(args.warmup_batches)]
    # As before the fix (workers forked afresh, importing for themselves), then each part of it.
    variants = [["--no-parent-imports"], [], ["--persistent"]]
    for source in args.sources.split(","):
        for variant in variants:
            subprocess.run([*common, "--child", "--source", source, *variant], env=env, check=True, timeout=900)
    if args.train:
        subprocess.run([*common, "--train-child", "--source", args.sources.split(",")[-1]], env=env, check=True,
                       timeout=1800)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--images", type=int, default=2000)
    parser.add_argument("--image-size", type=int, default=224)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--shuffle-buffer", type=int, default=256)
    parser.add_argument("--warmup-batches", type=int, default=3)
    parser.add_argument("--sources", default="local-disk,rclone", help="local-disk and/or mount programs")
    parser.add_argument("--persistent", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--no-parent-imports", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--train", action="store_true", help="also train (resnet18) through the last source")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--train-child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--source", help=argparse.SUPPRESS)
    parser.add_argument("--uri", help=argparse.SUPPRESS)
    parser.add_argument("--local-dir", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        return _child(args)
    if args.train_child:
        return _train_child(args)

    from benchmarks.harness.limits import copy_shards
    from mountctl.local_s3.server import LocalS3
    from mountctl.pytorch.data.index.manifest import load_manifest
    from mountctl.pytorch.data.synthetic import MakeConfig, make_dataset

    with tempfile.TemporaryDirectory(prefix="mountctl-epoch-start-") as home:
        server = LocalS3(os.path.join(home, "s3"))
        server.start()
        try:
            settings = server.settings()
            uri = f"s3://mountctl/epoch-start/n{args.images}-{args.image_size}/"
            make_dataset(MakeConfig(uri=uri, num_images=args.images, image_size=args.image_size,
                                    shard_size=16 * 10**6), settings=settings, progress=False)
            copy_shards(settings, uri, load_manifest(settings, uri), os.path.join(home, "disk"))
            env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
            env.update(server.env(), MOUNTCTL_HOME=os.path.join(home, "home"))
            print(f"# load average before: {os.getloadavg()}", flush=True)
            _run_children(args, uri, os.path.join(home, "disk"), env)
            print(f"# load average after: {os.getloadavg()}", flush=True)
        finally:
            server.stop()


if __name__ == "__main__":
    main()
