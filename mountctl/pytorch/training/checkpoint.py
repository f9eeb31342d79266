"""Where checkpoints go: an S3 URI (through s3torchconnector's Lightning plugin) or a path.

One file, ``last.ckpt``, rewritten every ``--checkpoint-every-n-steps``
steps, at the end of every epoch and when training stops (``--max-steps``);
``--resume`` continues from it with the global step, optimizer, loop state and
data position restored, so an interrupted epoch goes on at the first sample
its saved steps had not trained.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from mountctl import S3Settings, parse_s3_uri
from mountctl.pytorch.errors import CheckpointError
from mountctl.pytorch.training.checkpoint_routes import PathCheckpointIO, Route, route_for, s3io_plugin
from mountctl.s3 import ensure_bucket, object_size, short_client

__all__ = ["CheckpointTarget", "RoutedTarget", "LAST"]

LAST = "last.ckpt"


@dataclass(frozen=True)
class CheckpointTarget:
    location: str  # s3://bucket/prefix/ or an absolute directory

    @classmethod
    def parse(cls, location: str) -> "CheckpointTarget":
        if location.startswith("s3://"):
            return cls(str(parse_s3_uri(location)))
        route = route_for(location)
        if route is not None:
            return RoutedTarget(route.location)
        if "://" in location:
            raise CheckpointError(f"checkpoint location {location!r} is not one --checkpoint-dir understands: write "
                                  "s3://bucket/prefix/, fsspec+s3://bucket/prefix/, mount://bucket/prefix/ (or "
                                  "mount+PROGRAM://bucket/prefix/) or a local path")
        return cls(os.path.abspath(os.path.expanduser(location)))

    @property
    def is_s3(self) -> bool:
        return self.location.startswith("s3://")

    @property
    def last(self) -> str:
        return self.location + LAST if self.is_s3 else os.path.join(self.location, LAST)

    @property
    def is_path(self) -> bool:
        """A plain directory: saves go to ``partial`` and are renamed over ``last`` (elsewhere the
        object store or the route writes the final name whole, or not at all)."""
        return not self.is_s3

    @property
    def partial(self) -> str:
        """Where a save to a path is written before it is renamed over ``last``."""
        return os.path.join(self.location, f".{LAST}.partial")

    def prepare(self, settings: S3Settings) -> None:
        """Fail before training, not after the first epoch, when the location cannot be written."""
        if self.is_s3:
            ensure_bucket(settings, parse_s3_uri(self.location).bucket, create=True)
            return
        try:
            os.makedirs(self.location, exist_ok=True)
        except OSError as exc:
            raise CheckpointError(f"cannot create checkpoint directory {self.location}: {exc.strerror}; "
                                  "choose a writable --checkpoint-dir") from None
        if not os.access(self.location, os.W_OK):
            raise CheckpointError(f"checkpoint directory {self.location} is not writable; choose another "
                                  "--checkpoint-dir")

    def plugin(self, settings: S3Settings) -> Any:
        """The Trainer's CheckpointIO plugin: s3torchconnector's for S3, Lightning's own (loading safely) for a path."""
        if not self.is_s3:
            return PathCheckpointIO()
        return s3io_plugin(settings)

    def has_last(self, settings: S3Settings) -> bool:
        if not self.is_s3:
            return os.path.isfile(self.last)
        location = parse_s3_uri(self.location)
        return object_size(short_client(settings), location.bucket, location.prefix + LAST) is not None

    def resume_path(self, settings: S3Settings) -> str:
        if not self.has_last(settings):
            raise CheckpointError(f"--resume found no checkpoint at {self.last}; train once with "
                                  f"--checkpoint-dir {self.location} first, or drop --resume to start fresh")
        return self.last



@dataclass(frozen=True)
class RoutedTarget(CheckpointTarget):
    """``fsspec+s3://`` and ``mount[+PROGRAM]://`` locations: ``checkpoint_routes.py`` does the work."""

    @property
    def route(self) -> Route:
        route = route_for(self.location)
        assert route is not None, self.location  # parse() made this target from a route's location
        return route

    @property
    def is_s3(self) -> bool:
        return False

    @property
    def is_path(self) -> bool:
        return False  # the route writes the final name once, with no rename (mount-s3 has none)

    @property
    def last(self) -> str:
        return self.location + LAST

    def prepare(self, settings: S3Settings) -> None:
        self.route.prepare(settings)

    def plugin(self, settings: S3Settings) -> Any:
        return self.route.plugin(settings)

    def has_last(self, settings: S3Settings) -> bool:
        return self.route.has(settings, LAST)
