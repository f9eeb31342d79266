"""The share of training time spent waiting for data, and the line printed when it is high.

Pure arithmetic and text, kept apart from ``DataWaitMonitor`` (in ``data_wait``) so that they load
without torch or Lightning.
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["DEFAULT_THRESHOLD", "advice", "data_wait_fraction"]

DEFAULT_THRESHOLD = 0.2

# What usually helps, per source kind, when the model waits for data.
_ADVICE = {
    "mountpoint": "more DataLoader workers (--num-workers), the mount's cache (on unless --no-cache: epoch 2 reads "
                  "from disk), --read-ahead, or another mount program (--backend)",
    "s3io": "more DataLoader workers (--num-workers: each keeps its own S3 requests in flight) or larger shards",
    "fsspec": "more DataLoader workers (--num-workers) or the s3io kind (many ranged GETs in flight)",
}


def data_wait_fraction(waits: Sequence[float], steps: Sequence[float]) -> float | None:
    """Sum of the waits over sum of the whole steps (each wait is part of its step); None for no time."""
    total = sum(steps)
    if total <= 0:
        return None
    return min(1.0, max(0.0, sum(waits) / total))


def advice(source_kind: str, fraction: float, threshold: float) -> str:
    """The one line printed when training waits for data more than ``threshold`` of the time."""
    return (f"training waited for data {fraction:.0%} of the time (above {threshold:.0%}) reading with the "
            f"{source_kind} source; try {_ADVICE.get(source_kind, 'more DataLoader workers (--num-workers)')}")
