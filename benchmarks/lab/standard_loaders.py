#!/usr/bin/env python3
"""A standard loader over the mount against s3torchconnector: ImageFolder vs S3MapDataset, far store, whole epochs.

    PYTHONPATH=$PWD .venv/bin/python benchmarks/lab/standard_loaders.py --classes 8 --per-class 50 --workers 2

Starts its own SeaweedFS behind the far-store proxy (20 ms per request, 50 MB/s per connection) and
writes an ImageNet-shaped tree (``train/<class>/<n>.JPEG``, 224 px).  Each route then reads two
epochs with a torch DataLoader (shuffle, decode to a tensor, the same workers and batch): torchvision's
``ImageFolder`` over a fresh mount of each program with its cache (with and without a warm started
beside the loader, as ``mountctl mount --warm`` does), and ``S3MapDataset`` over the same objects.
Prints time to first batch and samples/s over each whole epoch, and the load average.
"""

from __future__ import annotations

import argparse
import dataclasses
import io
import os
import random
import time
from collections.abc import Callable
from typing import Any

from scratch_server import scratch_server

from mountctl import Mount, MountSpec
from mountctl.local_s3.far_proxy import FarProfile, FarProxy
from mountctl.mounts.warm import Warmer
from mountctl.s3 import S3Settings


def _jpeg(seed: int) -> bytes:
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(seed)
    base = rng.integers(0, 255, (64, 64, 3), dtype=np.uint8)  # upscaled noise: a photo-sized JPEG
    image = Image.fromarray(base).resize((224, 224), Image.BILINEAR)
    out = io.BytesIO()
    image.save(out, format="JPEG", quality=90)
    return out.getvalue()


def _decode(data: bytes) -> Any:
    import torch
    from torchvision.io import decode_jpeg

    return decode_jpeg(torch.frombuffer(bytearray(data), dtype=torch.uint8))


class _S3Images:
    """S3MapDataset's objects decoded the way ImageFolder's are, with the label from the key."""

    def __init__(self, settings: S3Settings, uri: str, classes: list[str]) -> None:
        self.settings, self.uri, self.classes = settings, uri, classes
        self._dataset: Any = None

    def __len__(self) -> int:
        return len(self._items())

    def _items(self) -> Any:
        if self._dataset is None:
            from s3torchconnector import S3MapDataset

            self._dataset = S3MapDataset.from_prefix(self.uri, **self.settings.s3torch_options())
            len(self._dataset)
        return self._dataset

    def __getitem__(self, index: int) -> tuple[Any, int]:
        reader = self._items()[index]
        label = self.classes.index(reader.key.split("/")[-2])
        return _decode(reader.read()), label


def _read_image(path: str) -> Any:
    with open(path, "rb") as f:
        return _decode(f.read())


def _epochs(make_loader: Callable[[], Any], epochs: int = 2) -> list[tuple[float, float]]:
    """(seconds to the first batch, samples/s over the whole epoch) per epoch."""
    loader = make_loader()
    results = []
    for _ in range(epochs):
        started = time.perf_counter()
        first = None
        samples = 0
        for images, _labels in loader:
            if first is None:
                first = time.perf_counter() - started
            samples += len(images)
        seconds = time.perf_counter() - started
        results.append((round(first or 0.0, 2), round(samples / seconds, 1)))
    return results


def _loader(dataset: Any, workers: int, batch: int) -> Any:
    from torch.utils.data import DataLoader

    def collate(items: list[tuple[Any, int]]) -> tuple[list[Any], list[int]]:
        return [image for image, _ in items], [label for _, label in items]

    return DataLoader(dataset, batch_size=batch, shuffle=True, num_workers=workers, collate_fn=collate,
                      persistent_workers=workers > 0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--classes", type=int, default=8)
    parser.add_argument("--per-class", type=int, default=50)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--backend", action="append", default=[])
    parser.add_argument("--rounds", type=int, default=1)
    args = parser.parse_args()
    import torchvision  # noqa: F401  (once in the parent, not in every worker: see DESIGN.md)
    from torchvision.datasets import ImageFolder

    random.seed(0)
    with scratch_server("std-loaders-") as (home, server, direct, s3):
        classes = [f"n{c:08d}" for c in range(args.classes)]
        local = os.path.join(home, "local", "train")  # the same tree on local disk, the epoch-2 yardstick
        for c, name in enumerate(classes):
            os.makedirs(os.path.join(local, name))
            for i in range(args.per_class):
                body = _jpeg(c * 100_000 + i)
                s3.put_object(Bucket="mountctl", Key=f"std/train/{name}/{i:05d}.JPEG", Body=body)
                with open(os.path.join(local, name, f"{i:05d}.JPEG"), "wb") as f:
                    f.write(body)
        with FarProxy(direct.endpoint_url or "", os.path.join(home, "far"), FarProfile()) as endpoint:
            settings = dataclasses.replace(direct, endpoint_url=endpoint)
            for name, value in server.env().items():
                os.environ[name] = value
            os.environ["AWS_ENDPOINT_URL"] = endpoint
            for round_ in range(args.rounds):
                routes: list[tuple[str, str | None, bool]] = [
                    (f"ImageFolder, mount {backend}{' + warm' if warm_first else ''}", backend, warm_first)
                    for backend in args.backend or ["rclone", "s3fs"] for warm_first in (False, True)]
                routes.append(("S3MapDataset (s3torchconnector)", None, False))
                routes.append(("ImageFolder, local disk", "local", False))
                if round_ % 2:
                    routes.reverse()
                for label, backend, warm_first in routes:
                    warm_s = ""
                    if backend == "local":
                        figures = _epochs(lambda: _loader(ImageFolder(local, loader=_read_image), args.workers,
                                                          args.batch))
                    elif backend is None:
                        dataset = _S3Images(settings, "s3://mountctl/std/train/", classes)
                        figures = _epochs(lambda d=dataset: _loader(d, args.workers, args.batch))
                    else:
                        spec = MountSpec(uri="s3://mountctl/std/", mount_dir=os.path.join(home, "mnt"),
                                         backend=backend, cache_dir=os.path.join(home, "cache"),
                                         cache_size_mb=1024, warm="off")  # the warm, if any, is the Warmer below
                        with Mount(spec, settings=settings) as mount:
                            root = os.path.join(mount.path, "train")
                            warmer = Warmer(mount.path).start() if warm_first else None  # beside the loader
                            folder = ImageFolder(root, loader=_read_image)
                            figures = _epochs(lambda d=folder: _loader(d, args.workers, args.batch))
                            if warmer is not None:
                                warm_s = f" (warm: {warmer.wait().summary()})"
                    print(f"{label}: " + ", ".join(f"epoch {e + 1}: first batch {f}s, {r} samples/s"
                                                   for e, (f, r) in enumerate(figures)) + warm_s, flush=True)
    print("load average:", open("/proc/loadavg").read().strip())


if __name__ == "__main__":
    main()
