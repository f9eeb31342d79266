"""Images per second with the warm-up left out: one rule for training and for loader benchmarks."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["Rate", "rate_after_warmup"]


@dataclass(frozen=True)
class Rate:
    images: int  # counted after the warm-up
    seconds: float
    warmup_batches: int

    @property
    def images_per_s(self) -> float | None:
        return round(self.images / self.seconds, 2) if self.seconds > 0 else None


def rate_after_warmup(marks: Sequence[float], sizes: Sequence[int], warmup_batches: int) -> Rate:
    """``marks[0]`` is the start, ``marks[i]`` the end of batch ``i`` (of ``sizes[i - 1]`` images).

    The first ``warmup_batches`` batches (worker start-up, first connections) are
    left out, but at least one batch is always measured.
    """
    if len(marks) != len(sizes) + 1:
        raise ValueError("need one time mark per batch plus the start")
    warm = min(warmup_batches, max(len(sizes) - 1, 0))
    return Rate(images=sum(sizes[warm:]), seconds=marks[-1] - marks[warm], warmup_batches=warm)
