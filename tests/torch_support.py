"""Helpers shared by the PyTorch-side tests: tiny datasets and runs of the real command line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterable

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESNET_PY = os.path.join(REPO, "resnet.py")


def make_tiny_dataset(uri: str, *, num_images: int = 48, image_size: int = 32, num_classes: int = 10,
                      shard_size: str = "100MB", seed: int = 0, layout: str = "shards"):
    """A real dataset written by the same code as `resnet.py make`; returns its MakeResult."""
    from mountctl.pytorch.data.synthetic import MakeConfig, make_dataset, parse_size

    config = MakeConfig(uri=uri, num_images=num_images, image_size=image_size, num_classes=num_classes,
                        shard_size=parse_size(shard_size), seed=seed, jobs=1, layout=layout)
    return make_dataset(config, progress=False)


def read_epoch_through_a_fault(loader: Iterable[dict], fault: Callable[[], None], *,
                               step_s: float) -> tuple[list[int], float]:
    """Every sample index one epoch of ``loader`` delivers, with ``fault()`` done after its first batch; and when.

    Each batch is followed by a pause of ``step_s`` (a training step), so the workers cannot have read the
    whole epoch before the fault: the reads after it meet it.  The fault tests then check that no sample
    was lost or repeated.
    """
    seen: list[int] = []
    faulted: float | None = None
    for number, batch in enumerate(loader):
        seen.extend(int(i) for i in batch["index"])
        time.sleep(step_s)
        if number == 0:
            fault()
            faulted = time.monotonic()
    if faulted is None:
        raise AssertionError("the loader delivered no batch, so the fault was never done")
    return seen, faulted


def last_json_line(text: str) -> dict:
    for line in reversed(text.splitlines()):
        if line.startswith("{"):
            return json.loads(line)
    raise AssertionError(f"no JSON summary line in output:\n{text[-2000:]}")


def run_cli(argv: list[str], *, timeout: float = 240) -> subprocess.CompletedProcess:
    """`python resnet.py ARGV` in a child process, with this process's environment (the local S3's)."""
    return subprocess.run([sys.executable, RESNET_PY, *argv], capture_output=True, text=True, timeout=timeout,
                          cwd=REPO, check=False)


def run_example(name: str, *args: str, timeout: float = 180) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, os.path.join(REPO, "examples", name), *args], capture_output=True,
                          text=True, timeout=timeout, cwd=REPO, check=False)
