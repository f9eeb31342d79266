"""The PyTorch side of mountctl: synthetic WebDataset shards, three source kinds, ResNet-50 training.

Its modules import torch (``mountctl`` itself never does).
Names are loaded on first use so that ``resnet.py make`` does not pay for
Lightning.
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = [
    "SOURCE_KINDS",
    "open_source",
    "ShardDataset",
    "Manifest",
    "load_manifest",
    "MakeConfig",
    "make_dataset",
    "TrainConfig",
    "train",
    "DatasetError",
    "NoShards",
    "TruncatedShard",
    "CheckpointError",
]

_HOMES = {
    "SOURCE_KINDS": "sources", "open_source": "sources", "ShardDataset": "dataset", "Manifest": "manifest",
    "load_manifest": "manifest", "MakeConfig": "synthetic", "make_dataset": "synthetic", "TrainConfig": "trainer",
    "train": "trainer", "DatasetError": "errors", "NoShards": "errors", "TruncatedShard": "errors",
    "CheckpointError": "errors",
}


def __getattr__(name: str) -> Any:
    if name not in _HOMES:
        raise AttributeError(f"module 'mountctl.torch' has no attribute {name!r}")
    return getattr(importlib.import_module(f".{_HOMES[name]}", __name__), name)
