"""The PyTorch side of mountctl: data (shards, plan, sources) and training (ResNet-50 on Lightning).

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
    "ReadAheadSampler",
]

_HOMES = {
    "SOURCE_KINDS": "data.sources", "open_source": "data.sources", "ShardDataset": "data.datasets.dataset",
    "Manifest": "data.index.manifest", "load_manifest": "data.index.manifest", "MakeConfig": "data.synthetic",
    "make_dataset": "data.synthetic", "TrainConfig": "training.trainer", "train": "training.trainer",
    "DatasetError": "errors", "NoShards": "errors", "TruncatedShard": "errors",
    "CheckpointError": "errors", "ReadAheadSampler": "data.read_ahead.sampler",
}


def __getattr__(name: str) -> Any:
    if name not in _HOMES:
        raise AttributeError(f"module 'mountctl.pytorch' has no attribute {name!r}")
    return getattr(importlib.import_module(f".{_HOMES[name]}", __name__), name)
