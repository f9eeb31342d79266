"""Images per second, one rule for training and for loader benchmarks: whole epoch first, then after warm-up.

The whole epoch (time to the first batch, then every image over the epoch's
time) is what a user waits for: worker start-up, first opens and the shuffle
window are paid in every epoch.  The rate after warm-up leaves the first
batches out and says what the pipeline streams at once started.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["Rate", "WholeEpoch", "rate_after_warmup", "whole_epoch", "epoch_figures"]


@dataclass(frozen=True)
class Rate:
    images: int  # counted after the warm-up
    seconds: float
    warmup_batches: int

    @property
    def images_per_s(self) -> float | None:
        return round(self.images / self.seconds, 2) if self.seconds > 0 else None


@dataclass(frozen=True)
class WholeEpoch:
    first_batch_s: float  # from asking for the epoch's first batch to having it
    seconds: float
    images: int

    @property
    def images_per_s(self) -> float | None:
        return round(self.images / self.seconds, 2) if self.seconds > 0 else None


def _check(marks: Sequence[float], sizes: Sequence[int]) -> None:
    if len(marks) != len(sizes) + 1:
        raise ValueError("need one time mark per batch plus the start")


def whole_epoch(marks: Sequence[float], sizes: Sequence[int]) -> WholeEpoch:
    """``marks[0]`` is the start, ``marks[i]`` the end of batch ``i`` (of ``sizes[i - 1]`` images)."""
    _check(marks, sizes)
    first = marks[1] - marks[0] if len(marks) > 1 else 0.0
    return WholeEpoch(first_batch_s=round(first, 3), seconds=marks[-1] - marks[0], images=sum(sizes))


def rate_after_warmup(marks: Sequence[float], sizes: Sequence[int], warmup_batches: int) -> Rate:
    """Marks as for ``whole_epoch``; the first ``warmup_batches`` batches (worker start-up, first
    connections) are left out, but at least one batch is always measured.
    """
    _check(marks, sizes)
    warm = min(warmup_batches, max(len(sizes) - 1, 0))
    return Rate(images=sum(sizes[warm:]), seconds=marks[-1] - marks[warm], warmup_batches=warm)


def epoch_figures(marks: Sequence[float], sizes: Sequence[int], warmup_batches: int, *,
                  mb_per_sample: float | None = None) -> dict[str, float | int]:
    """A loader epoch's figures as every table reads them, whole epoch first.

    ``first_batch_s``, ``epoch_samples_per_s`` (the whole epoch), then ``samples_per_s`` after
    warm-up; with ``mb_per_sample`` also ``epoch_mb_per_s`` and ``mb_per_s`` (after warm-up).
    """
    whole, rate = whole_epoch(marks, sizes), rate_after_warmup(marks, sizes, warmup_batches)
    figures: dict[str, float | int] = {
        "first_batch_s": whole.first_batch_s, "epoch_samples_per_s": whole.images_per_s or 0.0,
        "samples_per_s": rate.images_per_s or 0.0, "images": whole.images, "batches": len(sizes),
        "warmup_batches": rate.warmup_batches, "seconds": round(whole.seconds, 3)}
    if mb_per_sample is not None:
        figures["epoch_mb_per_s"] = round(float(figures["epoch_samples_per_s"]) * mb_per_sample, 2)
        figures["mb_per_s"] = round(float(figures["samples_per_s"]) * mb_per_sample, 2)
    return figures
