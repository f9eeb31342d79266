"""What DataLoader workers import, imported once in the parent before they fork.

Workers import their readers and decoder lazily, on their first sample.  A worker
forked from a parent that has not imported them pays for the import itself, and
workers are forked afresh every epoch: TorchCodec's decoder alone took 2-4.5 s to
import on a loaded 2-core machine, in each worker, every epoch (benchmarks/lab/epoch_start.py,
docs/benchmarks-guide.md).  Imported here once, every forked worker inherits them.
"""

from __future__ import annotations

import importlib

__all__ = ["import_worker_modules", "WORKER_MODULES"]

# The tar walk (webdataset), Pillow's fallback decode and TorchCodec's JPEG decode (shards.decode).
WORKER_MODULES = ("numpy", "PIL.Image", "webdataset.tariterators", "torchcodec.decoders")


def import_worker_modules() -> None:
    """Import the workers' modules in this process (a no-op after the first call)."""
    for name in WORKER_MODULES:
        importlib.import_module(name)
