"""Where a reader stands in the plan: its epoch, and the part of it a checkpoint had already trained.

``ShardDataset`` (iterable) and ``ExactlyOnceBatchSampler`` (map-style) both follow the same plan (``plan.py``)
and are both told the epoch by the loop (``set_epoch``) and the resumed position by ``resume_at``: one piece for
both, so the two resume the same way.
"""

from __future__ import annotations

from mountctl.pytorch.data.sampling.plan import Span, remaining_spans, steps_per_epoch

__all__ = ["EpochPosition"]


class EpochPosition:
    """A mixin: ``epoch``, ``consumed`` and ``steps_before``, set by ``set_epoch`` and ``resume_at``.

    The starting values are class attributes (immutable: an int and a tuple), so a subclass need not call an
    ``__init__`` of ours beside its own base's (``IterableDataset``'s).
    """

    epoch: int = 0
    consumed: tuple[Span, ...] = ()  # positions of this epoch trained before a resume
    steps_before: int = 0  # the steps that trained them

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def resume_at(self, consumed: tuple[Span, ...], steps_before: int) -> None:
        self.consumed, self.steps_before = consumed, steps_before

    def steps_this_epoch(self, samples: int, world_size: int, batch_size: int) -> int:
        """Steps of this epoch over ``samples``, those before a resume included (what Lightning counts); the same
        on every rank."""
        left = sum(hi - lo for lo, hi in remaining_spans(samples, self.consumed))
        return self.steps_before + steps_per_epoch(left, world_size, batch_size)
