"""The ``"cell": "standard"`` cells of a sweep: torchvision ``ImageFolder`` with a shuffling DataLoader, as users write it.

A class tree of JPEGs (``train/<class>/<n>.JPEG``) is read whole, twice (epochs 1 and 2), from local disk and
through a fresh default mount of each mount program (``MountSpec`` with nothing but the program: no flag a
user would not pass), each with and without ``ReadAheadSampler`` (``sampler`` = ``none`` or ``read-ahead``).
Per epoch: time to the first batch and images/s over the whole epoch; for epoch 1 also the seconds from the
mount command to its end (``from_mount_s``: mount start-up, listing, any warm, the epoch). Ratios are to
local disk without the sampler, same store and epoch: what the issue's targets compare with.

The tree writer and the loop are also what ``benchmarks/lab/standard_loaders.py`` measures with.
"""

from __future__ import annotations

import concurrent.futures
import io
import os
import time
from collections.abc import Callable
from typing import Any

from benchmarks.harness.limits import LOCAL
from benchmarks.harness.monitor import ResourceMonitor
from mountctl import Mount, MountctlError, MountSpec, S3Settings, installed_backends, parse_s3_uri, s3
from mountctl.s3 import list_objects

__all__ = ["standard_cells", "standard_cell_count", "add_standard_ratios", "standard_markdown", "write_tree",
           "jpeg_bytes", "read_image", "epochs", "shuffled_loader", "tree_label", "SAMPLERS", "CLASSES"]

SAMPLERS = ("none", "read-ahead")
CLASSES = 10
IMAGE_PX = 160  # the tree: 10 folders of 160 px JPEGs
BATCH = 32
WORKERS = 2  # DataLoader(shuffle=True, num_workers=2), as the user wrote it
CELL_ERRORS = (MountctlError, OSError, RuntimeError, ValueError)  # as the sweep's: a failed route is recorded


def _images(config: Any) -> int:
    """Images in the tree: a few thousand as the issue's, 400 under --quick so that it costs a minute or two."""
    if config.standard_images is not None:
        return int(config.standard_images)
    return 400 if config.quick else 3000


def tree_label(images: int, px: int = IMAGE_PX, classes: int = CLASSES) -> str:
    return f"standard-img{px}-n{images}-c{classes}"


def jpeg_bytes(seed: int, px: int = 224) -> bytes:
    """A photo-sized JPEG: upscaled noise, deterministic in ``seed``."""
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(seed)
    base = rng.integers(0, 255, (64, 64, 3), dtype=np.uint8)
    out = io.BytesIO()
    Image.fromarray(base).resize((px, px), Image.Resampling.BILINEAR).save(out, format="JPEG", quality=90)
    return out.getvalue()


def _tree_keys(classes: int, per_class: int) -> list[tuple[str, int]]:
    """(relative key, seed) of every image: ``train/n00000003/00012.JPEG``, as ImageNet names them."""
    return [(f"train/n{c:08d}/{i:05d}.JPEG", c * 100_000 + i) for c in range(classes) for i in range(per_class)]


def write_tree(settings: S3Settings, uri: str, local: str | None, *, classes: int, per_class: int, px: int
               ) -> str:
    """The class tree under ``uri`` (only the objects missing there are written) and, given ``local``, the same
    bytes under that directory; returns the local tree's ``train`` folder (or "")."""
    location = parse_s3_uri(uri)
    client = s3.client(settings, read_timeout=120)
    present = list_objects(client, location.bucket, location.prefix)
    keys = _tree_keys(classes, per_class)

    def one(key: str, seed: int) -> None:
        body = None
        if key not in present:
            body = jpeg_bytes(seed, px)
            client.put_object(Bucket=location.bucket, Key=location.prefix + key, Body=body)
        if local is not None:
            path = os.path.join(local, key)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "wb") as f:
                f.write(body if body is not None else jpeg_bytes(seed, px))  # the same seed: the same bytes

    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda pair: one(*pair), keys))
    return os.path.join(local, "train") if local is not None else ""


def _decode(data: bytes) -> Any:
    import torch
    from torchvision.io import decode_jpeg

    return decode_jpeg(torch.frombuffer(bytearray(data), dtype=torch.uint8))


def read_image(path: str) -> Any:
    """ImageFolder's ``loader``: the file read whole, decoded to a uint8 tensor."""
    with open(path, "rb") as f:
        return _decode(f.read())


def _collate(items: list[tuple[Any, int]]) -> tuple[list[Any], list[int]]:
    return [image for image, _ in items], [label for _, label in items]


def shuffled_loader(dataset: Any, workers: int, batch: int, *, read_ahead: bool = False,
                    read_ahead_threads: int | None = None) -> Any:
    """``DataLoader(shuffle=True)`` as users write it, or with ``ReadAheadSampler`` over the same shuffle
    (``read_ahead_threads``: its reads in flight, else its default)."""
    from torch.utils.data import DataLoader, RandomSampler

    from mountctl.pytorch import ReadAheadSampler

    threads: dict[str, Any] = {"threads": read_ahead_threads} if read_ahead_threads else {}
    order: dict[str, Any] = {"sampler": ReadAheadSampler(dataset, RandomSampler(dataset), **threads)} \
        if read_ahead else {"shuffle": True}
    return DataLoader(dataset, batch_size=batch, num_workers=workers, collate_fn=_collate,
                      persistent_workers=workers > 0, timeout=300 if workers else 0, **order)


def epochs(make_loader: Callable[[], Any], count: int = 2) -> list[dict[str, Any]]:
    """Per epoch: seconds to the first batch, images/s over the whole epoch, images, seconds."""
    loader = make_loader()
    results = []
    for _ in range(count):
        started = time.perf_counter()
        first = None
        images = 0
        for batch, _labels in loader:
            if first is None:
                first = time.perf_counter() - started
            images += len(batch)
        seconds = time.perf_counter() - started
        results.append({"first_batch_s": round(first or 0.0, 3), "epoch_samples_per_s": round(images / seconds, 1),
                        "samples": images, "epoch_s": round(seconds, 3)})
    return results


def standard_cell_count(config: Any) -> int:
    programs = len(config.backends or installed_backends())
    return (1 + programs) * len(SAMPLERS) * 2  # routes x samplers x epochs


def _measure(root: str, read_ahead: bool, pid: int | None, started: float) -> list[dict[str, Any]]:
    """Both epochs of one route whose tree is at ``root``; ``started``: when its mount command began."""
    from torchvision.datasets import ImageFolder

    folder = ImageFolder(root, loader=read_image)  # lists every class folder, as it does at init
    with ResourceMonitor(pid) as monitor:
        loader = shuffled_loader(folder, WORKERS, BATCH, read_ahead=read_ahead)
        rows = epochs(lambda: loader)
    if any(row["samples"] != len(folder) for row in rows):
        raise RuntimeError(f"the loader delivered {[row['samples'] for row in rows]} images of {len(folder)}")
    rows[0]["from_mount_s"] = round(time.perf_counter() - started - rows[1]["epoch_s"], 3)
    usage = monitor.usage.to_dict()
    return [{"epoch": epoch, **row, **usage} for epoch, row in enumerate(rows, 1)]


def standard_cells(run: Any, scratch: str) -> None:
    """Every route (local disk, then each mount program), each with and without the sampler, on a fresh mount."""
    import torchvision  # noqa: F401  (once here, not in every worker)

    config, settings = run.config, run.settings
    images = _images(config)
    per_class = images // CLASSES
    label = tree_label(images)
    uri = f"{config.uri}{label}/"
    # Written (and copied to disk) through the endpoint itself (run.origin); read through the store measured.
    local = write_tree(run.origin, uri, f"{scratch}/{label}", classes=CLASSES, per_class=per_class, px=IMAGE_PX)
    programs = list(config.backends or installed_backends())
    for number, (source, program) in enumerate([(LOCAL, "-")] + [(f"mountpoint/{p}", p) for p in programs]):
        for sampler in SAMPLERS:
            head = {"cell": "standard", "source": source, "backend": program, "sampler": sampler,
                    "dataset": label, "images": per_class * CLASSES, "num_workers": WORKERS}

            def measure(program: str = program, sampler: str = sampler, number: int = number
                        ) -> list[dict[str, Any]]:
                started = time.perf_counter()  # the mount command is inside the clock: from_mount_s counts it
                if program == "-":
                    return _measure(local, sampler != "none", None, started)
                directory = f"{scratch}/standard-mnt-{number}-{sampler}"
                os.makedirs(directory, exist_ok=True)
                with Mount(MountSpec(uri=uri, mount_dir=directory, backend=program), settings=settings) as mount:
                    return _measure(os.path.join(mount.path, "train"), sampler != "none", mount.pid, started)

            run.epochs(head, measure)


def add_standard_ratios(cells: list[dict[str, Any]]) -> None:
    """Each route's images/s over the whole epoch x local disk without the sampler (same store, epoch, tree)."""
    plain = {(c.get("store"), c.get("dataset"), c.get("epoch")): c.get("epoch_samples_per_s") for c in cells
             if c["cell"] == "standard" and c["status"] == "ok" and c["source"] == LOCAL and c["sampler"] == "none"}
    for row in cells:
        if row["cell"] != "standard" or row["status"] != "ok":
            continue
        local = plain.get((row.get("store"), row.get("dataset"), row.get("epoch")))
        row["ratio_to_local_disk"] = round(row["epoch_samples_per_s"] / local, 3) if local else None


def standard_markdown(cells: list[dict[str, Any]], table: Callable[[list[str], list[list[Any]]], str]) -> str:
    """Epochs 1 and 2 side by side per route and sampler ("" where the run has no standard cell)."""
    grouped: dict[tuple[Any, ...], dict[int, dict[str, Any]]] = {}
    for c in cells:
        if c["cell"] == "standard":
            key = (c.get("store"), c.get("dataset"), c["source"], c["sampler"])
            grouped.setdefault(key, {})[c.get("epoch", 1)] = c

    def at(epochs: dict[int, dict[str, Any]], epoch: int, name: str) -> Any:
        row = epochs.get(epoch)
        return None if row is None else row.get(name) if row["status"] == "ok" else row["status"]

    rows = [[*key, *(at(e, n, name) for name in ("first_batch_s", "epoch_samples_per_s", "ratio_to_local_disk")
                     for n in (1, 2)), at(e, 1, "from_mount_s"), at(e, 1, "program_peak_rss_mb"),
             at(e, 1, "page_cache_growth_mb")]
            for key, e in grouped.items()]
    if not rows:
        return ""
    return ("## Standard loader: torchvision ImageFolder, DataLoader(shuffle=True), 2 workers (whole epochs)\n\n"
            + table(["store", "tree", "source", "sampler", "first batch e1 s", "first batch e2 s", "images/s e1",
                     "images/s e2", "x local disk e1", "x local disk e2", "from mount to end of e1 s",
                     "program peak RSS MB", "page cache MB, both epochs"], rows))
