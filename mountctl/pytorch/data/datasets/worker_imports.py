"""What DataLoader workers import, imported once in the parent before they fork.

Workers import their readers and decoder lazily, on their first sample.  A worker
forked from a parent that has not imported them pays for the import itself, and
workers are forked afresh every epoch: TorchCodec's decoder alone took 2-4.5 s to
import on a loaded 2-core machine, in each worker, every epoch (benchmarks/lab/epoch_start.py,
docs/benchmarks-guide.md).  Imported here once, every forked worker inherits them.

Imported at the first epoch's first batch, they were still part of that batch (0.4-1.8 s on a
busy 2-core machine), so a trainer starts them on a thread (``start_worker_imports``) while it
mounts and builds its model; ``import_worker_modules`` waits for that thread before a fork.
"""

from __future__ import annotations

import importlib
import threading

__all__ = ["import_worker_modules", "start_worker_imports", "WORKER_MODULES"]

# The tar walk (webdataset), Pillow's fallback decode and TorchCodec's JPEG decode (shards.decode).
WORKER_MODULES = ("numpy", "PIL.Image", "webdataset.tariterators", "torchcodec.decoders")
# A bound on waiting for the thread; past it the imports go on here (each module imports once either way).
_WAIT_S = 120.0

_started: threading.Thread | None = None
_lock = threading.Lock()


def _import_all() -> None:
    for name in WORKER_MODULES:
        importlib.import_module(name)


def start_worker_imports() -> None:
    """Begin the workers' imports on a thread of this process, to overlap with other set-up.

    Nothing may fork this process before ``import_worker_modules`` has returned: a child forked
    mid-import would inherit a held import lock.  A failed import is raised there, not here.
    """
    global _started
    with _lock:
        if _started is None:
            _started = threading.Thread(target=_quiet_import_all, name="mountctl-worker-imports", daemon=True)
            _started.start()


def _quiet_import_all() -> None:
    try:
        _import_all()
    except Exception:  # noqa: BLE001  import_worker_modules imports again on its own thread and raises it there
        return


def import_worker_modules() -> None:
    """Import the workers' modules in this process (a no-op after the first call), waiting for a started thread."""
    with _lock:
        started = _started
    if started is not None:
        started.join(timeout=_WAIT_S)
    _import_all()
