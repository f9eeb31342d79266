"""``resnet.py bench``: every source kind side by side with the limits, measured in one run.

``config`` (the sweep), ``stores`` (local, or far through a far-store proxy),
``limits`` (local disk, raw GET), ``monitor`` (CPU and RSS), ``cells`` (one
measurement each), ``bytes_path`` (bytes-path and random-read cells),
``sweep`` (runs them in each store), ``report`` (JSON, Markdown, PNG) with
``side_by_side`` (the stores' columns), ``command`` (the command line's part).
"""

from __future__ import annotations

import importlib
import os
from typing import Any

# The checkout the harness runs from: its children (``python -m benchmarks.harness.X``) start there, since the
# harness is not installed anywhere a fresh interpreter would find it.
CHECKOUT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# Each name loads its module on first use: `resnet.py` builds the bench's options from ``command`` on every
# start, and `resnet.py index` or `make` should not pay for torch and the peers' libraries for that.
_HOME = {"DatasetSpec": "config", "SweepConfig": "config", "preset": "config", "run_sweep": "sweep",
         "write_report": "report", "markdown": "report"}
__all__ = list(_HOME)


def __getattr__(name: str) -> Any:
    if name not in _HOME:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_HOME[name]}"), name)
