"""``resnet.py bench``: the data path alone, no model: how fast a source kind delivers decoded batches.

On a CPU-only machine training is bound by ResNet-50's arithmetic, which
hides the differences between source kinds; this reads and decodes the same
batches a training run would (same plan, same decode) as fast as the
DataLoader workers can, and counts every sample as training does.
"""

from __future__ import annotations

import functools
import time
from dataclasses import dataclass, field
from typing import Any

from mountctl import InvalidSpec, S3Settings, parse_s3_uri, resolve
from mountctl.pytorch.data.index.manifest import check_shards_present, load_manifest
from mountctl.pytorch.data.sources import MountpointOptions, check_source_choice, open_source

__all__ = ["BenchConfig", "bench_loader"]


@dataclass(frozen=True)
class BenchConfig:
    uri: str
    source_kind: str = "mountpoint"
    batch_size: int = 256
    num_workers: int = 2
    epochs: int = 1
    warmup_batches: int = 5
    seed: int = 0
    mountpoint: MountpointOptions = field(default_factory=MountpointOptions)  # the mountpoint kind's own, as train's

    def __post_init__(self) -> None:
        object.__setattr__(self, "uri", str(parse_s3_uri(self.uri)))
        check_source_choice(self.source_kind, self.mountpoint)
        if self.batch_size < 1 or self.epochs < 1 or self.num_workers < 0 or self.warmup_batches < 0:
            raise InvalidSpec("batch size and epochs must be positive; workers and warm-up batches not negative")


def bench_loader(config: BenchConfig, *, settings: S3Settings | None = None) -> dict[str, Any]:
    from mountctl.pytorch.data.datasets.dataset import BATCH_TIMEOUT_S, EpochLoader, ShardDataset
    from mountctl.pytorch.training.rates import rate_after_warmup, whole_epoch

    settings = settings or resolve()
    manifest = load_manifest(settings, config.uri)
    check_shards_present(settings, config.uri, manifest)
    epochs = []
    with open_source(config.source_kind, config.uri, settings, mountpoint=config.mountpoint,
                     readers=max(1, config.num_workers), manifest=manifest, whole_files=True) as source:
        dataset = ShardDataset(manifest, source, batch_size=config.batch_size, seed=config.seed)
        for epoch in range(config.epochs if manifest.layout == "shards" else 0):
            extra = {"timeout": BATCH_TIMEOUT_S} if config.num_workers else {}
            loader = EpochLoader(dataset, epoch_fn=functools.partial(int, epoch), num_workers=config.num_workers,
                                 **extra)
            marks, sizes, seen = [time.perf_counter()], [], set()
            for batch in loader:
                marks.append(time.perf_counter())
                sizes.append(len(batch["index"]))
                seen.update(batch["index"])
            whole, rate = whole_epoch(marks, sizes), rate_after_warmup(marks, sizes, config.warmup_batches)
            epochs.append({"epoch": epoch, "batches": len(sizes), "images": sum(sizes), "distinct_images": len(seen),
                           "first_batch_s": whole.first_batch_s, "seconds": round(whole.seconds, 3),
                           "epoch_images_per_s": whole.images_per_s,
                           "warmup_batches": rate.warmup_batches, "images_per_s": rate.images_per_s})
        if manifest.layout == "files":  # one object per sample: the map-style loader, read-ahead on
            from benchmarks.harness.map_cells import READAHEAD_THREADS, map_loader_cell

            for epoch in range(config.epochs):
                cell = map_loader_cell(manifest, source, config.uri, num_workers=config.num_workers,
                                       batch_size=config.batch_size, warmup_batches=config.warmup_batches,
                                       images=manifest.num_images, readahead_threads=READAHEAD_THREADS,
                                       seed=config.seed + epoch)
                epochs.append({"epoch": epoch, "batches": cell["batches"], "images": cell["images"],
                               "first_batch_s": cell["first_batch_s"], "seconds": cell["seconds"],
                               "epoch_images_per_s": cell["epoch_samples_per_s"],
                               "warmup_batches": cell["warmup_batches"], "images_per_s": cell["samples_per_s"]})
        described = source.describe()
    return {"uri": config.uri, "source_kind": config.source_kind, "source": described,
            "dataset_images": manifest.num_images, "shards": len(manifest.shards), "bytes": manifest.total_bytes,
            "batch_size": config.batch_size, "num_workers": config.num_workers, "epochs": epochs}
