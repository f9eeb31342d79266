#!/usr/bin/env python3
"""Distributed checkpoint to S3 on 2 ranks, then resume training from it.

    python examples/dcp_s3.py [s3://BUCKET/dcp/]

Without a URI it runs on the embedded local S3 (started if it is not running,
stopped again if it was started for this), with a small example dataset
written there on first use, as ``resnet.py bench`` and ``demo`` do.

Spawns 2 CPU ranks (gloo).  They train a small DDP model a few steps, save the
model and optimizer with ``torch.distributed.checkpoint`` through
s3torchconnector's ``S3StorageWriter`` (each rank writes its share, straight to
S3), train on; then a fresh model and optimizer load the checkpoint with
``S3StorageReader`` and train the same steps.  It prints whether the loaded
tensors equal the saved ones and whether the resumed run ends where the
uninterrupted one did.  The endpoint and credentials come from the environment.
"""

import copy
import json
import os
import socket
import sys

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
import torch.multiprocessing as mp
from s3torchconnector.dcp import S3StorageReader, S3StorageWriter
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
from torch.nn.parallel import DistributedDataParallel

import mountctl
from mountctl.pytorch.fallback import example_uri

WORLD_SIZE = 2
STEPS_BEFORE, STEPS_AFTER = 3, 2


def make_model(seed: int) -> tuple[DistributedDataParallel, torch.optim.Optimizer]:
    torch.manual_seed(seed)
    model = DistributedDataParallel(torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(),
                                                        torch.nn.Linear(64, 4)))
    return model, torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)


def train(model: torch.nn.Module, optimizer: torch.optim.Optimizer, steps: range, rank: int) -> None:
    for step in steps:
        data = torch.Generator().manual_seed(1000 * step + rank)  # each rank its own batch, the same on a rerun
        x, y = torch.randn(16, 32, generator=data), torch.randint(0, 4, (16,), generator=data)
        optimizer.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        optimizer.step()


def equal(a: object, b: object) -> bool:
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and torch.equal(a, b)
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(equal(a[k], b[k]) for k in a)
    if isinstance(a, list | tuple):
        return isinstance(b, list | tuple) and len(a) == len(b) and all(map(equal, a, b))
    return a == b


def rank_main(rank: int, uri: str, port: int, results: "mp.Queue[dict]") -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=WORLD_SIZE)
    try:
        settings = mountctl.resolve()
        options = settings.s3torch_options()  # endpoint, region and path-style addressing for the connector
        region, config = options["region"], options["s3client_config"]

        model, optimizer = make_model(seed=0)
        train(model, optimizer, range(STEPS_BEFORE), rank)
        model_state, optimizer_state = get_state_dict(model, optimizer)
        saved = {"model": model_state, "optimizer": optimizer_state, "step": STEPS_BEFORE}
        dcp.save(saved, storage_writer=S3StorageWriter(region=region, path=uri, s3client_config=config,
                                                             overwrite=True))
        saved = copy.deepcopy(saved)  # training on changes the live tensors
        train(model, optimizer, range(STEPS_BEFORE, STEPS_BEFORE + STEPS_AFTER), rank)  # the uninterrupted run

        resumed, resumed_optimizer = make_model(seed=1)  # different weights: everything must come from S3
        model_state, optimizer_state = get_state_dict(resumed, resumed_optimizer)
        loaded = {"model": model_state, "optimizer": optimizer_state, "step": -1}
        dcp.load(loaded, storage_reader=S3StorageReader(region=region, path=uri, s3client_config=config))
        # Compared before set_state_dict, which renames the keys of the dicts it is given.
        identical = equal(saved["model"], loaded["model"]) and equal(saved["optimizer"], loaded["optimizer"])
        set_state_dict(resumed, resumed_optimizer, model_state_dict=loaded["model"],
                       optim_state_dict=loaded["optimizer"])
        train(resumed, resumed_optimizer, range(loaded["step"], loaded["step"] + STEPS_AFTER), rank)
        same_end = equal(model.state_dict(), resumed.state_dict())
        results.put({"rank": rank, "identical": identical, "step": loaded["step"], "resumed_equals_uninterrupted":
                     same_end, "tensors": len(loaded["model"])})
    finally:
        dist.destroy_process_group()


def main(uri: str) -> None:
    uri = uri if uri.endswith("/") else uri + "/"
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    context = mp.get_context("spawn")
    results = context.Queue()
    mp.start_processes(rank_main, args=(uri, port, results), nprocs=WORLD_SIZE, start_method="spawn")
    ranks = sorted((results.get(timeout=10) for _ in range(WORLD_SIZE)), key=lambda r: r["rank"])
    print(json.dumps({"checkpoint": uri, "world_size": WORLD_SIZE, "ranks": ranks,
                      "identical": all(r["identical"] for r in ranks),
                      "resumed_equals_uninterrupted": all(r["resumed_equals_uninterrupted"] for r in ranks)}))


if __name__ == "__main__":
    if len(sys.argv) > 2:
        sys.exit(__doc__)
    # Without a URI: a small example on the embedded local S3, as `resnet.py bench` and `demo` do.
    with example_uri(sys.argv[1] if len(sys.argv) == 2 else None, "none") as chosen:
        main(chosen)
