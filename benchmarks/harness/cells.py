"""One function per kind of cell: each measures one thing and returns one JSON-able dict.

Loader cells read and decode through ``ShardDataset`` (the training data path,
no model); training cells go through ``trainer.train`` itself; the ceiling
cell trains the same model on batches that already sit on the accelerator.
Each epoch's figures lead with the whole epoch (time to the first batch, then samples/s over the
epoch); the rate after warm-up follows (``rates.epoch_figures``).
"""

from __future__ import annotations

import io
import os
import time
from typing import Any

from benchmarks.harness.limits import LOCAL
from benchmarks.harness.monitor import ResourceMonitor
from mountctl import S3Settings, paths
from mountctl.pytorch.data.datasets.dataset import BATCH_TIMEOUT_S  # a wedged source fails the cell, never hangs it
from mountctl.pytorch.data.index.index_mount import object_list_for
from mountctl.pytorch.data.index.manifest import Manifest, load_manifest
from mountctl.pytorch.data.sources.mountpoint import MountpointOptions
from mountctl.pytorch.training.rates import epoch_figures

# A route that mounts exactly the objects of the dataset's index (mount-s3's manifest mount, ``--from-index``).
INDEX_ROUTE = "+index"
# The default mount with the plan-driven read-ahead turned on: the lever measured beside the default, same run.
READ_AHEAD_ROUTE = "-read-ahead"


def route_backend(backend: str) -> tuple[str, bool]:
    """(mount program, whether it mounts from the index) of a plan's backend (``mount-s3+index``)."""
    program = backend.removesuffix(READ_AHEAD_ROUTE)
    return program.removesuffix(INDEX_ROUTE), program.endswith(INDEX_ROUTE)


def route_read_ahead(backend: str) -> bool | None:
    """True for a ``-read-ahead`` route; None (the mountpoint kind's default) for every other."""
    return True if backend.endswith(READ_AHEAD_ROUTE) else None


def route_options(uri: str, settings: S3Settings, backend: str, *, whole_files: bool = False) -> dict[str, Any]:
    """``open_source``'s keywords for a plan's backend: the mountpoint kind's options (the program, for an index
    route the object list, the read-ahead where the route turns it on), and ``whole_files`` for cells that read
    shards front to back."""
    program, from_index = route_backend(backend)
    read_ahead = route_read_ahead(backend)
    objects = object_list_for(load_manifest(settings, uri), settings, uri) if from_index else None
    # The read-ahead is not part of what a mount serves, so its route would join the default route's shared
    # mount, and its epoch 1 would read the cache the default's two epochs had filled. A cache of its own is a
    # request of its own: a fresh mount, cold like every other route's.
    cache_dir = os.path.join(paths.cache_root(), "bench" + READ_AHEAD_ROUTE) if read_ahead else None
    return {"mountpoint": MountpointOptions(backend=program, read_ahead=read_ahead, objects=objects,
                                            cache_dir=cache_dir), "whole_files": whole_files}

__all__ = ["loader_cell", "first_sample_cell", "train_cell", "ceiling_cell", "BATCH_TIMEOUT_S", "INDEX_ROUTE",
           "READ_AHEAD_ROUTE", "route_backend", "route_read_ahead", "route_options", "LOCAL", "find_cell", "ratio"]


def _per_sample_mb(manifest: Manifest) -> float:
    return manifest.total_bytes / manifest.num_images / 1e6


def loader_cell(manifest: Manifest, source: Any, *, num_workers: int, batch_size: int, warmup_batches: int,
                shuffle_buffer: int = 256, program_pid: int | None = None, seed: int = 0, epoch: int = 0
                ) -> dict[str, Any]:
    """One epoch (``epoch``, from 0: its plan and shuffle) of decoded batches as fast as the DataLoader delivers them.

    The shuffle buffer is kept small: a buffer as large as a worker's share would
    read everything during the warm-up batches and leave only decoding measured.
    """
    import warnings

    from mountctl.pytorch.data.datasets.dataset import EpochLoader, ShardDataset

    # More workers than cores is a point of the sweep, not a mistake.
    warnings.filterwarnings("ignore", message=r".*suggested max number of worker.*")
    dataset = ShardDataset(manifest, source, batch_size=batch_size, seed=seed, shuffle_buffer=shuffle_buffer)
    extra = {"timeout": BATCH_TIMEOUT_S, "prefetch_factor": 2} if num_workers else {}
    loader = EpochLoader(dataset, epoch_fn=lambda: epoch, num_workers=num_workers, **extra)
    with ResourceMonitor(program_pid) as monitor:
        marks, sizes = [time.perf_counter()], []
        for batch in loader:
            marks.append(time.perf_counter())
            sizes.append(len(batch["index"]))
    if sum(sizes) != manifest.num_images:
        from mountctl.pytorch.errors import DatasetError

        raise DatasetError(f"the loader delivered {sum(sizes)} samples of {manifest.num_images}")
    # Whole epoch first (worker start-up and first reads included), then after warm-up.
    return {**epoch_figures(marks, sizes, warmup_batches, mb_per_sample=_per_sample_mb(manifest)),
            "shuffle_buffer": shuffle_buffer, **monitor.usage.to_dict()}


def first_sample_cell(manifest: Manifest, source: Any) -> dict[str, Any]:
    """Seconds from opening the first shard to its first decoded sample, in this process."""
    import PIL.Image  # noqa: F401  imported before the clock starts: the first source must not pay for it
    import webdataset.tariterators  # noqa: F401

    from mountctl.pytorch.data.datasets.shards import decode, read_shard

    shard = manifest.shards[0]
    started = time.perf_counter()
    opened = source.open_shards([shard.name])
    name, stream = next(opened)
    sample = next(read_shard(name, stream, first_index=shard.first_index, start=0, stop=1,
                             expected=shard.samples))
    decode(sample, manifest.image_size)
    seconds = time.perf_counter() - started
    opened.close()
    return {"first_sample_s": round(seconds, 4)}


def _quiet_lightning() -> None:
    import logging

    # One Trainer per cell: its banner and tips would bury the progress bar.
    logging.getLogger("lightning.pytorch").setLevel(logging.WARNING)


def train_cell(uri: str, settings: S3Settings, *, kind: str, backend: str, batch_size: int, num_workers: int,
               warmup_steps: int, accelerator: str, precision: str, program_pid: int | None = None,
               seed: int = 0, epochs: int = 2, decode: str = "auto") -> list[dict[str, Any]]:
    """ResNet-50 for ``epochs`` epochs through ``trainer.train``, as ``resnet.py train``: one row per epoch.

    Epoch 2 reads the same shards again, which is where a node-local cache shows.
    """
    from mountctl.pytorch.training.trainer import TrainConfig, train

    _quiet_lightning()
    program, from_index = route_backend(backend)
    config = TrainConfig(uri=uri, source_kind=kind, batch_size=batch_size, max_epochs=epochs,
                         mountpoint=MountpointOptions(backend=program, from_index=from_index,
                                                      read_ahead=route_read_ahead(backend)),
                         num_workers=num_workers, precision=precision, accelerator=accelerator, devices="1",
                         warmup_batches=warmup_steps, progress=False, seed=seed, decode=decode)
    with ResourceMonitor(program_pid) as monitor:
        summary = train(config, settings=settings, out=io.StringIO())
    # CPU is for the whole run: the monitor cannot tell Lightning's epochs apart.
    return [{"epoch": number, "first_batch_s": epoch["first_batch_s"],
             "epoch_samples_per_s": epoch["epoch_images_per_s"] or 0.0,
             "samples_per_s": epoch["images_per_s"] or 0.0, "images": epoch["images"],
             "batches": epoch["batches"], "warmup_batches": epoch["warmup_batches"],
             "data_wait_fraction": summary["data_wait"][number - 1]["data_wait_fraction"],
             "precision": summary["precision"], "decode": summary["decode"], "device": summary["accelerator"],
             **monitor.usage.to_dict()} for number, epoch in enumerate(summary["epochs"], start=1)]


def ceiling_cell(manifest: Manifest, *, batch_size: int, steps: int, warmup_steps: int, accelerator: str,
                 precision: str) -> dict[str, Any]:
    """The same model and Trainer on synthetic batches already on the device: the compute limit."""
    import lightning
    import torch

    from mountctl.pytorch.notices import quiet_known_notices
    from mountctl.pytorch.training.model import ResNetClassifier
    from mountctl.pytorch.training.throughput import ThroughputMonitor

    quiet_known_notices()
    _quiet_lightning()
    device = torch.device("cuda" if accelerator == "gpu" else "cpu")
    size, total = manifest.image_size, steps + warmup_steps
    generator = torch.Generator().manual_seed(0)
    images = torch.randint(0, 256, (batch_size, 3, size, size), dtype=torch.uint8, generator=generator).to(device)
    labels = torch.randint(0, manifest.num_classes, (batch_size,), generator=generator).to(device)
    batches = [{"images": images, "labels": labels, "index": tuple(range(i * batch_size, (i + 1) * batch_size)),
                "epoch": 0} for i in range(total)]
    throughput = ThroughputMonitor(total * batch_size, warmup_batches=warmup_steps)
    trainer = lightning.Trainer(accelerator=accelerator, devices=1, precision=precision,  # type: ignore[arg-type]
                                max_epochs=1,
                                callbacks=[throughput], logger=False, enable_checkpointing=False,
                                enable_progress_bar=False, enable_model_summary=False, num_sanity_val_steps=0)
    model = ResNetClassifier(manifest.num_classes, lr=0.1 * batch_size / 256)
    loader: torch.utils.data.DataLoader[Any] = torch.utils.data.DataLoader(batches, batch_size=None)  # type: ignore[arg-type]
    with ResourceMonitor() as monitor:
        trainer.fit(model, train_dataloaders=loader)
    epoch = throughput.epochs[0]
    return {"first_batch_s": epoch["first_batch_s"], "epoch_samples_per_s": epoch["epoch_images_per_s"] or 0.0,
            "samples_per_s": epoch["images_per_s"] or 0.0, "images": epoch["images"], "batches": epoch["batches"],
            "warmup_batches": epoch["warmup_batches"], "precision": precision, "device": device.type,
            **monitor.usage.to_dict()}


def find_cell(cells: list[dict[str, Any]], cell: str, **match: Any) -> dict[str, Any] | None:
    """The first measured cell of a kind whose fields equal ``match``: the limit a ratio is taken to."""
    return next((c for c in cells if c["cell"] == cell and c["status"] == "ok"
                 and all(c.get(k) == v for k, v in match.items())), None)


def ratio(row: dict[str, Any], limit: dict[str, Any] | None, field: str) -> float | None:
    """``row``'s figure over the same figure of its limit, to three places (None: no limit, or a zero one)."""
    return round(row[field] / limit[field], 3) if limit and limit.get(field) else None
