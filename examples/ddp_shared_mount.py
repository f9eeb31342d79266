#!/usr/bin/env python3
"""Two DDP ranks on CPU (gloo) training from files on one shared mount.

    python examples/ddp_shared_mount.py [s3://BUCKET/images/ [WORLD_SIZE]]

Without a URI it runs on the embedded local S3 (started if it is not running,
stopped again if it was started for this), with a small example dataset
written there on first use, as ``resnet.py bench`` and ``demo`` do.

Every rank calls ``mountctl.mount(uri)``: the first starts the mount, the
others join it (same mount program, one cache), and the last one out
unmounts.  A DistributedSampler gives each rank its own files.
The endpoint and credentials come from the environment.
"""

import json
import os
import socket
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torchvision import datasets, transforms

import mountctl
from mountctl.pytorch.fallback import example_uri


def run_rank(rank: int, world_size: int, uri: str, port: int) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    try:
        with mountctl.mount(uri) as mounted:
            images = datasets.ImageFolder(mounted.path, transform=transforms.Compose(
                [transforms.Resize(16), transforms.CenterCrop(16), transforms.ToTensor()]))
            sampler = torch.utils.data.DistributedSampler(images, shuffle=True, seed=0)
            loader = torch.utils.data.DataLoader(images, batch_size=8, sampler=sampler)
            model = torch.nn.parallel.DistributedDataParallel(
                torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(3 * 16 * 16, len(images.classes))))
            optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
            seen = 0
            for batch, labels in loader:
                optimizer.zero_grad()
                torch.nn.functional.cross_entropy(model(batch), labels).backward()
                optimizer.step()
                seen += len(labels)
            report = {"rank": rank, "images": seen, "mount_pid": mounted.pid, "path": mounted.path}
            reports = [None] * world_size
            dist.all_gather_object(reports, report)  # every rank is still holding the mount here
        if rank == 0:
            print(json.dumps({"world_size": world_size, "dataset_images": len(images), "ranks": reports}))
    finally:
        dist.destroy_process_group()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


if __name__ == "__main__":
    if len(sys.argv) > 3:
        sys.exit(__doc__)
    world = int(sys.argv[2]) if len(sys.argv) == 3 else 2
    # Without a URI: a small example on the embedded local S3 (the ranks inherit its AWS variables).
    with example_uri(sys.argv[1] if len(sys.argv) >= 2 else None, "files") as chosen:
        mp.spawn(run_rank, args=(world, chosen, free_port()), nprocs=world, join=True)
