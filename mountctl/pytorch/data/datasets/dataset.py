"""``ShardDataset``: an IterableDataset that shards itself over ranks and DataLoader workers.

It yields whole batches (use it with ``DataLoader(batch_size=None)``), because
only the dataset knows the plan that gives every rank the same number of
steps (see ``plan.py``).  It needs no Lightning: plain PyTorch loops can use it.

Two ways to resume mid-epoch.  ``position`` / ``resume_from`` carry the
layout-free position (the spans of the global order trained): the datamodule's
checkpoints and the torchdata node use it, and it resumes on any ranks and
workers.  ``state_dict`` / ``load_state_dict`` (torchdata's ``Stateful``, what
``StatefulDataLoader`` calls in each worker) hold one worker's count of batches
and skip them without reading their samples: the same layout only.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from torch.utils.data import DataLoader, IterableDataset, get_worker_info

from mountctl.pytorch.data.datasets.shards import RawSample, batched, decode, read_shard, reordered
from mountctl.pytorch.data.datasets.worker_imports import import_worker_modules
from mountctl.pytorch.data.decode.device_decode import encoded
from mountctl.pytorch.data.index.manifest import Manifest
from mountctl.pytorch.data.read_ahead.next_shards import bytes_for_samples
from mountctl.pytorch.data.sampling.epoch_position import EpochPosition
from mountctl.pytorch.data.sampling.plan import (
    Assignment,
    ShardSlice,
    Span,
    consumed_after,
    plan_epoch,
    sample_order,
    steps_per_epoch,
)
from mountctl.pytorch.errors import CheckpointError

__all__ = ["ShardDataset", "EpochLoader", "check_same_order", "position", "BATCH_TIMEOUT_S"]

# A bound on waiting for any one batch from a worker.  A wedged mount is the watchdog's to
# replace (open_resilient then reads on); this only stops a run from hanging for ever.
BATCH_TIMEOUT_S = 600.0


def check_same_order(state: dict[str, Any], seed: int, window: int | None, manifest: Manifest) -> None:
    """A saved position is a set of positions of one global order: refuse it under another seed or window,
    or on another dataset (other shards, or other counts), where its positions name other samples."""
    if state and (state.get("seed"), state.get("window")) != (seed, window):
        raise CheckpointError(f"the checkpoint was trained with --seed {state.get('seed')} and "
                              f"--shuffle-buffer {state.get('window')}; resume with the same ones, or "
                              "drop --resume to start afresh")
    saved = state.get("dataset") if state else None  # absent in checkpoints saved before it was recorded
    if saved and saved.get("digest") != manifest.identity["digest"]:
        raise CheckpointError(f"the checkpoint was saved on another dataset ({saved.get('summary')}) than this "
                              f"run's ({manifest.identity['summary']}): its position would name other samples; "
                              "resume on the same data (the same index and shard pattern), or drop --resume to "
                              "start afresh")


def position(epoch: int, consumed: tuple[Span, ...], steps: int, seed: int, window: int | None,
             manifest: Manifest) -> dict[str, Any]:
    """The data position a checkpoint saves, with what it depends on (order and dataset)."""
    return {"epoch": epoch, "consumed": [list(span) for span in consumed],
            "samples": sum(hi - lo for lo, hi in consumed), "steps": steps, "seed": seed, "window": window,
            "dataset": manifest.identity}


def _skip(assignment: Assignment, batches: int) -> Assignment:
    """The assignment without its first ``batches`` batches (their samples are never read)."""
    drop = sum(assignment.batch_sizes[:batches])
    slices = []
    for piece in assignment.slices:
        cut = min(drop, piece.stop - piece.start)
        drop -= cut
        if piece.start + cut < piece.stop:
            slices.append(ShardSlice(piece.shard, piece.start + cut, piece.stop))
    return Assignment(tuple(slices), assignment.batch_sizes[batches:])


class ShardDataset(EpochPosition, IterableDataset):
    """Batches of ``{"images": uint8 NCHW, "labels": int64 N, "index": tuple, "keys": tuple, "epoch": int}``.

    With ``decode="gpu"`` the workers leave the JPEGs encoded: ``"jpegs"`` (a list of
    1-D uint8 tensors) replaces ``"images"``, for ``device_decode`` to decode on the device.
    ``shuffle_buffer`` is the window within which a shard's samples are permuted
    (the most samples a reader holds); ``resume_at`` skips the global positions a
    checkpoint's steps already trained (see ``plan.py``).
    """

    def __init__(self, manifest: Manifest, source: Any, *, batch_size: int, seed: int = 0, rank: int = 0,
                 world_size: int = 1, shuffle: bool = True, shuffle_buffer: int = 1000, decode: str = "cpu") -> None:
        super().__init__()
        self.manifest = manifest
        self.source = source
        self.batch_size = batch_size
        self.seed = seed
        self.rank = rank
        self.world_size = world_size
        self.shuffle = shuffle
        self.shuffle_buffer = shuffle_buffer
        self.decode = decode
        self._worker_batches = 0  # batches this worker's iterator yielded (StatefulDataLoader's state)
        self._skip_batches = 0  # batches of this worker's assignment to skip (a StatefulDataLoader resume)
        steps_per_epoch(manifest.num_images, world_size, batch_size)  # fail here, not in a worker

    def position(self, steps: int, num_workers: int) -> dict[str, Any]:
        """The data position once every rank has run ``steps`` more steps of this epoch's plan.

        Epoch, the spans of the global order trained, their count, the steps that trained them,
        and the seed and window that define the order; ``resume_from`` takes it on any layout.
        """
        consumed = consumed_after(self.manifest.num_images, self.consumed, world_size=self.world_size,
                                  batch_size=self.batch_size, num_workers=num_workers, steps=steps)
        return position(self.epoch, consumed, self.steps_before + steps, self.seed, self.shuffle_buffer,
                        self.manifest)

    def resume_from(self, state: dict[str, Any]) -> bool:
        """Start at ``state``'s epoch, skipping the positions it trained; False when that epoch was complete."""
        check_same_order(state, self.seed, self.shuffle_buffer, self.manifest)
        self.set_epoch(int(state["epoch"]))
        complete = state["samples"] >= self.manifest.num_images
        if len(state["consumed"]) and not complete:
            self.resume_at(tuple((lo, hi) for lo, hi in state["consumed"]), state["steps"])
        else:
            self.resume_at((), 0)
        return not complete

    def state_dict(self) -> dict[str, Any]:
        """This worker's place in the same layout (``StatefulDataLoader``): the epoch and its batches yielded."""
        return {"epoch": self.epoch, "worker_batches": self._worker_batches, "consumed": list(self.consumed),
                "steps_before": self.steps_before}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.set_epoch(int(state["epoch"]))
        self.resume_at(tuple((lo, hi) for lo, hi in state["consumed"]), int(state["steps_before"]))
        self._skip_batches = int(state["worker_batches"])

    def __len__(self) -> int:
        """Batches of this epoch (those before a resume included), summed over workers; the same on every rank."""
        return self.steps_this_epoch(self.manifest.num_images, self.world_size, self.batch_size)

    def assignment(self, worker: int = 0, num_workers: int = 1) -> Assignment:
        return plan_epoch([s.samples for s in self.manifest.shards], seed=self.seed, epoch=self.epoch,
                          batch_size=self.batch_size, world_size=self.world_size, rank=self.rank,
                          num_workers=num_workers, worker=worker, shuffle=self.shuffle, consumed=self.consumed)

    def raw_samples(self, assignment: Assignment) -> Iterator[RawSample]:
        """The assignment's samples in the epoch's order (each slice counts positions in its shard's order)."""
        shards = [self.manifest.shards[piece.shard] for piece in assignment.slices]
        orders = [sample_order(shard.samples, seed=self.seed, epoch=self.epoch, shard=piece.shard,
                               window=self.shuffle_buffer, shuffle=self.shuffle)[piece.start:piece.stop]
                  for piece, shard in zip(assignment.slices, shards, strict=True)]
        # Each shard read at the version the manifest names (a reopen that finds another fails); a source that
        # reads ahead is told how far each piece reads, so it holds no more of a shard than the piece needs.
        hints: dict[str, Any] = {}
        if getattr(self.source, "reads_ahead", False):
            hints["ends"] = [bytes_for_samples(shard.bytes, shard.samples, max(order) + 1, shard.members)
                             for shard, order in zip(shards, orders, strict=True)]
        opened = self.source.open_shards([shard.name for shard in shards], etags=[shard.etag for shard in shards],
                                         **hints)
        for shard, order, (name, stream) in zip(shards, orders, opened, strict=True):
            wanted = [shard.first_index + i for i in order]
            yield from reordered(read_shard(name, stream, first_index=shard.first_index, start=min(order),
                                            stop=max(order) + 1, expected=shard.samples, labels=shard.labels,
                                            members=shard.members, hint=self.manifest.fix_hint()), wanted)

    def __iter__(self) -> Iterator[dict[str, Any]]:
        info = get_worker_info()
        worker, num_workers = (info.id, info.num_workers) if info is not None else (0, 1)
        skip, self._skip_batches = self._skip_batches, 0
        assignment = _skip(self.assignment(worker, num_workers), skip)
        self._worker_batches = skip
        samples: Iterator[RawSample] = self.raw_samples(assignment)
        keys: dict[int, str] = {}

        def keyed(sample: RawSample) -> RawSample:
            keys[sample.index] = sample.key
            return sample

        size = self.manifest.image_size
        on_device = self.decode == "gpu"
        items = ((encoded(s.image, s.key, s.shard), s.label, s.index) if on_device else decode(s, size)
                 for s in map(keyed, samples))
        for batch in batched(items, assignment.batch_sizes, encoded=on_device):
            batch["keys"] = tuple(keys.pop(i) for i in batch["index"])  # for --sample-log
            batch["epoch"] = self.epoch  # the epoch whose plan and shuffle made this batch
            self._worker_batches += 1
            yield batch


class EpochLoader(DataLoader):
    """A DataLoader whose workers start, with the current epoch, at the first batch asked for.

    Lightning creates the first epoch's iterator before it has finished restoring
    a checkpoint's loop state, and never calls ``set_epoch`` on an IterableDataset.
    Workers take their copy of the dataset when they start, so starting them at the
    first ``next()`` (when ``epoch_fn()``, e.g. ``trainer.current_epoch``, is the
    epoch being run) gives every epoch, resumed ones included, its own shuffle.
    The epoch goes to the batch sampler when it has ``set_epoch`` (map-style,
    ``ExactlyOnceBatchSampler``), else to the dataset (``ShardDataset``, which
    batches itself).
    """

    def __init__(self, dataset: Any, *, epoch_fn: Callable[[], int], **kwargs: Any) -> None:
        if "batch_sampler" not in kwargs:
            kwargs["batch_size"] = None  # ShardDataset yields whole batches
        super().__init__(dataset, **kwargs)
        self._epoch_fn = epoch_fn

    def __iter__(self) -> Iterator[Any]:  # type: ignore[override]  # batches, not a loader iterator
        return _StartOnFirstBatch(self)

    def _start(self) -> Iterator[Any]:
        import_worker_modules()  # before the workers fork: each inherits them instead of importing them
        holder = self.batch_sampler if hasattr(self.batch_sampler, "set_epoch") else self.dataset
        holder.set_epoch(int(self._epoch_fn()))  # type: ignore[union-attr]
        return super().__iter__()


class _StartOnFirstBatch:
    def __init__(self, loader: EpochLoader) -> None:
        self._loader = loader
        self._batches: Iterator[Any] | None = None

    def __iter__(self) -> "_StartOnFirstBatch":
        return self

    def __next__(self) -> Any:
        if self._batches is None:
            self._batches = self._loader._start()
        return next(self._batches)

    def __len__(self) -> int:
        return len(self._loader)
