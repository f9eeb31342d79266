#!/usr/bin/env python3
"""A standard loader over the mount against s3torchconnector: ImageFolder vs S3MapDataset, far store, whole epochs.

    PYTHONPATH=$PWD .venv/bin/python benchmarks/lab/standard_loaders.py --classes 8 --per-class 50 --workers 2

Starts its own SeaweedFS behind the far-store proxy (20 ms per request, 50 MB/s per connection) and
writes an ImageNet-shaped tree (``train/<class>/<n>.JPEG``, 224 px).  Each route then reads two
epochs with a torch DataLoader (shuffle, decode to a tensor, the same workers and batch): torchvision's
``ImageFolder`` over a fresh mount of each program with its cache (with and without a warm started
beside the loader, as ``mountctl mount --warm`` does; ``--max-threads N``: mount-s3 with N FUSE threads;
``--sampler-threads N``: mount-s3 through ``ReadAheadSampler`` with N reads in flight), and
``S3MapDataset`` over the same objects.
Prints time to first batch and samples/s over each whole epoch, and the load average.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import random
from typing import Any

from scratch_server import scratch_server

from benchmarks.harness.standard_cells import epochs, read_image, shuffled_loader, write_tree
from mountctl import Mount, MountSpec
from mountctl.local_s3.far_proxy import FarProfile, FarProxy
from mountctl.mounts.warm import Warmer
from mountctl.s3 import S3Settings


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
        import torch
        from torchvision.io import decode_jpeg

        reader = self._items()[index]
        label = self.classes.index(reader.key.split("/")[-2])
        return decode_jpeg(torch.frombuffer(bytearray(reader.read()), dtype=torch.uint8)), label


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--classes", type=int, default=8)
    parser.add_argument("--per-class", type=int, default=50)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--backend", action="append", default=[])
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--sampler", action="store_true", help="mounts read through ReadAheadSampler")
    parser.add_argument("--no-warm-routes", action="store_true", help="only the mounts without a warm beside them")
    parser.add_argument("--no-cache-dir", action="store_true",
                        help="mounts without a data cache, as a plain `mountctl mount` (a warm then fills only the "
                             "kernel's page cache, which mountctl's mount-s3 keeps across opens)")
    parser.add_argument("--max-threads", type=int, action="append", default=[],
                        help="mount-s3's --max-threads (FUSE threads; 16 by default): one mount-s3 route per value")
    parser.add_argument("--sampler-threads", type=int, action="append", default=[],
                        help="ReadAheadSampler's threads (reads in flight): one mount-s3 route through it per value")
    args = parser.parse_args()
    import torchvision  # noqa: F401  (once in the parent, not in every worker: see DESIGN.md)
    from torchvision.datasets import ImageFolder

    random.seed(0)
    with scratch_server("std-loaders-") as (home, server, direct, s3):
        classes = [f"n{c:08d}" for c in range(args.classes)]
        # The same tree on local disk, the epoch-2 yardstick; 224 px as ImageNet's crops.
        local = write_tree(direct, "s3://mountctl/std/", os.path.join(home, "local"), classes=args.classes,
                           per_class=args.per_class, px=224)
        with FarProxy(direct.endpoint_url or "", os.path.join(home, "far"), FarProfile()) as endpoint:
            settings = dataclasses.replace(direct, endpoint_url=endpoint)
            for name, value in server.env().items():
                os.environ[name] = value
            os.environ["AWS_ENDPOINT_URL"] = endpoint
            for round_ in range(args.rounds):
                warms = (False,) if args.no_warm_routes else (False, True)
                # (label, program, warm beside, its flags, ReadAheadSampler threads: 0 for --sampler's default)
                routes: list[tuple[str, str | None, bool, tuple[str, ...], int]] = [
                    (f"ImageFolder, mount {backend}{' + warm' if warm_first else ''}", backend, warm_first, (), 0)
                    for backend in args.backend or ["rclone", "s3fs"] for warm_first in warms]
                routes += [(f"ImageFolder, mount mount-s3 --max-threads {n}", "mount-s3", False,
                            ("--max-threads", str(n)), 0) for n in args.max_threads]
                routes += [(f"ImageFolder + ReadAheadSampler(threads={n}), mount mount-s3", "mount-s3", False, (), n)
                           for n in args.sampler_threads]
                routes.append(("S3MapDataset (s3torchconnector)", None, False, (), 0))
                routes.append(("ImageFolder, local disk", "local", False, (), 0))
                if round_ % 2:
                    routes.reverse()
                for label, backend, warm_first, flags, sampler_threads in routes:
                    warm_s = ""
                    if backend == "local":
                        figures = epochs(lambda: shuffled_loader(ImageFolder(local, loader=read_image),
                                                                 args.workers, args.batch))
                    elif backend is None:
                        dataset = _S3Images(settings, "s3://mountctl/std/train/", classes)
                        figures = epochs(lambda d=dataset: shuffled_loader(d, args.workers, args.batch))
                    else:
                        spec = MountSpec(uri="s3://mountctl/std/", mount_dir=os.path.join(home, "mnt"),
                                         backend=backend,
                                         cache_dir=None if args.no_cache_dir else os.path.join(home, "cache"),
                                         cache_size_mb=None if args.no_cache_dir else 1024,
                                         warm="off",  # the warm, if any, is the Warmer below
                                         extra_args={backend: flags} if flags else {})
                        with Mount(spec, settings=settings) as mount:
                            root = os.path.join(mount.path, "train")
                            warmer = Warmer(mount.path).start() if warm_first else None  # beside the loader
                            folder = ImageFolder(root, loader=read_image)
                            figures = epochs(lambda d=folder, n=sampler_threads: shuffled_loader(
                                d, args.workers, args.batch, read_ahead=args.sampler or n > 0,
                                read_ahead_threads=n or None))
                            if warmer is not None:
                                warm_s = f" (warm: {warmer.wait().summary()})"
                    print(f"{label}: " + ", ".join(f"epoch {e + 1}: first batch {f['first_batch_s']}s, "
                                                   f"{f['epoch_samples_per_s']} samples/s"
                                                   for e, f in enumerate(figures)) + warm_s, flush=True)
    print("load average:", open("/proc/loadavg").read().strip())


if __name__ == "__main__":
    main()
