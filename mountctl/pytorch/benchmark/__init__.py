"""``resnet.py bench``: every source kind side by side with the limits, measured in one run.

``config`` (the sweep), ``stores`` (local, or far through a far-store proxy),
``limits`` (local disk, raw GET), ``monitor`` (CPU and RSS), ``cells`` (one
measurement each), ``bytes_path`` (bytes-path and random-read cells),
``sweep`` (runs them in each store), ``report`` (JSON, Markdown, PNG) with
``side_by_side`` (the stores' columns), ``command`` (the command line's part).
"""

from __future__ import annotations

from mountctl.pytorch.benchmark.config import DatasetSpec, SweepConfig, preset
from mountctl.pytorch.benchmark.report import markdown, write_report
from mountctl.pytorch.benchmark.sweep import run_sweep

__all__ = ["DatasetSpec", "SweepConfig", "preset", "run_sweep", "write_report", "markdown"]
