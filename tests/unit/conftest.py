"""The unit layer: pure parts only (no S3 server, no FUSE), so ``pytest -m unit`` answers in seconds."""

from __future__ import annotations

import pathlib

import pytest

_HERE = pathlib.Path(__file__).parent


def pytest_collection_modifyitems(config, items):
    for item in items:
        if _HERE in pathlib.Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.unit)
