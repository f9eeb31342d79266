#!/usr/bin/env python3
"""ResNet-50 on WebDataset shards in S3: ``python resnet.py make|index|train|bench|demo --help``.

The library's commands (make, index, train) live in ``mountctl/pytorch/cli.py``; the benchmark harness's
(bench, demo) in ``benchmarks/harness/command.py``, outside the wheel. This file joins them, and keeps the
commands users know from the Mountpoint PyTorch example working as written.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from mountctl.venv_guard import TRAINING_MODULES, require_modules


def _harness_commands(commands: Any) -> None:
    from benchmarks.harness.command import add_commands

    add_commands(commands)


def build_parser() -> argparse.ArgumentParser:
    from mountctl.pytorch.cli import build_parser as library_parser

    return library_parser(_harness_commands)


def configure(argv: list[str]) -> tuple[argparse.Namespace, Any]:
    """Arguments parsed and the command's config built and checked, nothing started (the dry run)."""
    from mountctl.pytorch.cli import configure as library_configure

    return library_configure(argv, _harness_commands)


def main(argv: list[str] | None = None) -> int:
    from mountctl.pytorch.cli import main as library_main

    return library_main(argv, _harness_commands)


if __name__ == "__main__":
    require_modules("resnet.py", TRAINING_MODULES)  # a Python without torch stops here, in one line
    sys.exit(main())
