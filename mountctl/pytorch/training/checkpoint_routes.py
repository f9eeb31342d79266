"""Checkpoint routes besides s3torchconnector and a plain path: fsspec's whole-object S3 and a read-write mount.

``--checkpoint-dir`` spellings handled here (``checkpoint.py`` dispatches to them):

- ``fsspec+s3://bucket/prefix/``: s3fs, one ``pipe`` of the whole serialized
  checkpoint (a single PUT, or a multipart upload that S3 makes visible only
  when complete) and one ``cat`` to load it; a file-like ``f.write`` through
  fsspec is several times slower.
- ``mount://bucket/prefix/`` (or ``mount+rclone://``, ``mount+s3fs://``,
  ``mount+mount-s3://`` to pick the program): the prefix mounted read-write
  with mountctl for the run; a save is one sequential write of the final name,
  the one write pattern every mount program supports.  mount-s3 can neither
  rename nor overwrite: there each save is a new version beside the last one,
  and the older versions go only once it is whole (``versioned.py``).

Each save serializes to memory first, so only the transfer can fail half-way;
when it does, the partial file is removed and the error says so: a later
``--resume`` never finds a truncated checkpoint.
"""

from __future__ import annotations

import contextlib
import io
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from lightning.fabric.plugins.io.checkpoint_io import CheckpointIO
from lightning.fabric.plugins.io.torch_io import TorchCheckpointIO

from mountctl import BACKEND_NAMES, MountctlError, MountHandle, S3Settings, get_backend, mount, parse_s3_uri
from mountctl.pytorch.errors import CheckpointError
from mountctl.pytorch.training.versioned import newest_whole, save_versioned, whole_versions
from mountctl.s3 import ensure_bucket, is_not_found, list_object_sizes, object_size, short_client

__all__ = ["ROUTE_PREFIXES", "Route", "route_for", "s3io_plugin", "FsspecCheckpointIO", "MountCheckpointIO", "PathCheckpointIO",
           "serialize", "deserialize", "unreadable"]

FSSPEC = "fsspec+s3://"
MOUNT = "mount://"
ROUTE_PREFIXES = (FSSPEC, MOUNT, "mount+")
_CHUNK = 8 << 20  # bytes per write() through a mount: sequential, large enough for every program
T = TypeVar("T")


def serialize(state: dict[str, Any]) -> bytes:
    buffer = io.BytesIO()
    import torch

    torch.save(state, buffer)
    return buffer.getvalue()


def deserialize(data: bytes, map_location: Any = None, weights_only: bool | None = None, *, where: str = ""
                ) -> dict[str, Any]:
    """A checkpoint's bytes as its state, loaded with ``weights_only=True`` whatever the caller asked.

    Loading with ``weights_only=False`` runs whatever code the file names, so it is never done (torch's own
    error for a file it cannot load suggests it; ours says what to do instead).  Anything torch.load raises
    on these bytes means the file is no whole checkpoint: one ``CheckpointError`` naming ``where``.
    """
    import torch

    del weights_only  # always True: a checkpoint from `resnet.py train` holds only tensors and plain types
    try:
        loaded = torch.load(io.BytesIO(data), map_location=map_location, weights_only=True)
    except Exception as exc:  # noqa: BLE001  # unpickling, zip and tensor errors all mean the same here
        raise unreadable(where or "the checkpoint", f"{type(exc).__name__}, {len(data)} bytes") from None
    if not isinstance(loaded, dict):
        raise unreadable(where or "the checkpoint", f"holds a {type(loaded).__name__}, not a checkpoint dict")
    return loaded


def unreadable(where: str, why: str) -> CheckpointError:
    """The one message for a checkpoint that exists but cannot be loaded safely."""
    return CheckpointError(f"checkpoint {where} is unreadable ({why}): it is not a whole checkpoint written by "
                           "`resnet.py train`. Move it aside (rename or delete it) and run without --resume to "
                           "start afresh, or resume from another --checkpoint-dir")


@dataclass(frozen=True)
class Route:
    """One non-default route: its name, the S3 prefix it stores under and (for a mount) the program."""

    name: str  # "fsspec" or "mount"
    location: str  # as the user wrote it, canonical: fsspec+s3://b/p/ or mount[+program]://b/p/
    s3_uri: str  # s3://b/p/
    backend: str = "auto"

    def prepare(self, settings: S3Settings) -> None:
        """Fail before training, not at the first save: the bucket must exist (created on a custom endpoint)."""
        location = parse_s3_uri(self.s3_uri)
        ensure_bucket(settings, location.bucket, create=True)

    def has(self, settings: S3Settings, name: str) -> bool:
        location = parse_s3_uri(self.s3_uri)
        if self.name == "mount":  # a mount-s3 route keeps versions of the name (versioned.py)
            from botocore.exceptions import ClientError

            try:
                sizes = list_object_sizes(short_client(settings), location.bucket, location.prefix)
            except ClientError as exc:
                if is_not_found(exc):  # no bucket: no checkpoint
                    return False
                raise
            return bool(whole_versions(sizes, name))
        return object_size(short_client(settings), location.bucket, location.prefix + name) is not None

    def plugin(self, settings: S3Settings) -> CheckpointIO:
        if self.name == "fsspec":
            return FsspecCheckpointIO(settings)
        return MountCheckpointIO(self.location, self.s3_uri, backend=self.backend, settings=settings)


def route_for(location: str) -> Route | None:
    """The route ``location`` names, or None for an s3:// URI or a path (``checkpoint.py``'s own)."""
    if location.startswith(FSSPEC):
        uri = _s3_dir(location[len("fsspec+"):])
        return Route("fsspec", "fsspec+" + uri, uri)
    if location.startswith(("mount://", "mount+")):
        scheme, _, rest = location.partition("://")
        backend = scheme.partition("+")[2] or "auto"
        if backend not in BACKEND_NAMES or not rest:
            raise CheckpointError(f"checkpoint location {location!r}: write mount://bucket/prefix/ or "
                                  f"mount+PROGRAM://bucket/prefix/ with PROGRAM one of {', '.join(BACKEND_NAMES)}")
        uri = _s3_dir("s3://" + rest)
        return Route("mount", f"{scheme}://{uri[len('s3://'):]}", uri, backend)
    return None


def _s3_dir(uri: str) -> str:
    text = str(parse_s3_uri(uri))
    return text if text.endswith("/") else text + "/"


def _retrying(what: str, attempt: Callable[[], T], *, retry_for_s: float,
              retry_on: tuple[type[BaseException], ...] = ()) -> T:
    """Run ``attempt`` again after a connection-level failure (an S3 server restarting), for up to ``retry_for_s``."""
    from botocore.exceptions import BotoCoreError

    deadline = time.monotonic() + retry_for_s
    delay = 0.5
    while True:
        try:
            return attempt()
        except (OSError, BotoCoreError, *retry_on) as exc:
            if isinstance(exc, (FileNotFoundError, PermissionError)) or time.monotonic() + delay > deadline:
                raise CheckpointError(f"{what} failed: {exc}; nothing was written in its place. Check that the "
                                      "bucket exists and the endpoint answers, then run again") from None
            time.sleep(delay)
            delay = min(delay * 2, 8.0)


def s3io_plugin(settings: S3Settings, *, retry_for_s: float = 60.0) -> CheckpointIO:
    """s3torchconnector's Lightning plugin, with a failed save or load retried and then named.

    When the connection drops mid-save, the connector's writer fails inside ``torch.save``
    (a RuntimeError such as "enforce fail at inline_container.cc"); the multipart upload is
    never completed, so S3 keeps the earlier object, and the whole save is tried again.
    """
    from s3torchconnector import S3Exception
    from s3torchconnector.lightning import S3LightningCheckpoint

    failures = (S3Exception, RuntimeError)

    class S3ioCheckpointIO(S3LightningCheckpoint):
        def save_checkpoint(self, checkpoint: dict[str, Any], path: Any, storage_options: Any = None) -> None:
            _retrying(f"saving checkpoint {path} through s3torchconnector",
                      lambda: super(S3ioCheckpointIO, self).save_checkpoint(checkpoint, path, storage_options),
                      retry_for_s=retry_for_s, retry_on=failures)

        def load_checkpoint(self, path: Any, map_location: Any = None, weights_only: bool | None = None
                            ) -> dict[str, Any]:
            # Fetch (retried) and decode (once, safely) apart: a corrupt object is no connection failure.
            bucket, _, key = str(path).removeprefix("s3://").partition("/")
            data: bytes = _retrying(f"loading checkpoint {path} through s3torchconnector",
                                    lambda: self._client.get_object(bucket, key).read(),
                                    retry_for_s=retry_for_s, retry_on=failures)
            return deserialize(data, map_location, weights_only, where=str(path))

    return S3ioCheckpointIO(**settings.s3torch_options())


class PathCheckpointIO(TorchCheckpointIO):
    """Lightning's own route for a path, with the load made safe and its failure named (``deserialize``)."""

    def load_checkpoint(self, path: Any, map_location: Any = None, weights_only: bool | None = None
                        ) -> dict[str, Any]:
        try:
            with open(path, "rb") as f:
                data = f.read()
        except OSError as exc:
            raise CheckpointError(f"loading checkpoint {path} failed: {exc.strerror or exc}; check the "
                                  "--checkpoint-dir") from None
        return deserialize(data, map_location, weights_only, where=str(path))


class FsspecCheckpointIO(CheckpointIO):
    """Lightning's CheckpointIO over s3fs, whole objects only (``pipe``/``cat``): the fast fsspec path."""

    def __init__(self, settings: S3Settings, *, retry_for_s: float = 60.0) -> None:
        self.settings = settings
        self.retry_for_s = retry_for_s
        self._fs: Any = None

    @property
    def fs(self) -> Any:
        if self._fs is None:  # made in the process that uses it: an s3fs instance does not survive a fork
            import s3fs

            self._fs = s3fs.S3FileSystem(skip_instance_cache=True, **self.settings.s3fs_options())
        return self._fs

    @staticmethod
    def _key(path: Any) -> str:
        text = str(path)
        for prefix in (FSSPEC, "s3://"):
            if text.startswith(prefix):
                return text[len(prefix):]
        raise CheckpointError(f"fsspec checkpoint path {text!r} is not an s3:// or fsspec+s3:// URI")

    def save_checkpoint(self, checkpoint: dict[str, Any], path: Any, storage_options: Any = None) -> None:
        data = serialize(checkpoint)
        key = self._key(path)
        _retrying(f"saving checkpoint s3://{key} through fsspec",
                  lambda: self.fs.pipe_file(key, data), retry_for_s=self.retry_for_s)

    def load_checkpoint(self, path: Any, map_location: Any = None, weights_only: bool | None = None
                        ) -> dict[str, Any]:
        key = self._key(path)
        data = _retrying(f"loading checkpoint s3://{key} through fsspec", lambda: self.fs.cat_file(key),
                         retry_for_s=self.retry_for_s)
        return deserialize(data, map_location, weights_only, where=str(path))

    def remove_checkpoint(self, path: Any) -> None:
        with contextlib.suppress(FileNotFoundError):
            self.fs.rm_file(self._key(path))

    def teardown(self) -> None:
        from mountctl.pytorch.data.sources.fsspec_s3 import close_filesystem

        if self._fs is not None:
            close_filesystem(self._fs)
        self._fs = None


class MountCheckpointIO(CheckpointIO):
    """Lightning's CheckpointIO through a read-write mountctl mount of the prefix, held for the run.

    Lightning calls ``teardown`` at the end of ``fit``; that releases the mount.
    """

    def __init__(self, location: str, s3_uri: str, *, backend: str = "auto", settings: S3Settings) -> None:
        self.location = location
        self.s3_uri = s3_uri
        self.backend = backend
        self.settings = settings
        self._stack: contextlib.ExitStack | None = None
        self._handle: MountHandle | None = None

    @property
    def handle(self) -> MountHandle:
        if self._handle is None:
            stack = contextlib.ExitStack()
            try:
                self._handle = stack.enter_context(mount(self.s3_uri, backend=self.backend, read_only=False,
                                                         settings=self.settings))
            except MountctlError as exc:
                stack.close()
                raise CheckpointError(f"cannot mount {self.s3_uri} read-write for checkpoints: {exc}") from None
            self._stack = stack
        return self._handle

    def local_path(self, path: Any) -> str:
        text = str(path)
        for prefix in (self.location, self.s3_uri):
            if text.startswith(prefix):
                return os.path.join(self.handle.path, text[len(prefix):])
        if os.path.isabs(text):
            return text
        raise CheckpointError(f"checkpoint path {text!r} is not under {self.location}")

    def save_checkpoint(self, checkpoint: dict[str, Any], path: Any, storage_options: Any = None) -> None:
        data = memoryview(serialize(checkpoint))
        final = self.local_path(path)
        overwrites = get_backend(self.handle.backend).overwrites_files
        try:
            if not overwrites:  # new files only: a new version, then the old ones go
                save_versioned(os.path.dirname(final), os.path.basename(final), data)
                return
            with open(final, "wb") as f:  # sequential writes; the program uploads on close
                for start in range(0, len(data), _CHUNK):
                    f.write(data[start:start + _CHUNK])
        except OSError as exc:
            with contextlib.suppress(OSError):
                if overwrites:  # save_versioned removed its own partial file
                    os.unlink(final)
            raise CheckpointError(f"saving checkpoint {path} through the {self.handle.backend} mount failed: "
                                  f"{exc.strerror or exc}; the partial file was removed, so --resume will not "
                                  "pick it up. Check the mount (`mountctl status`) and the bucket, then run again"
                                  ) from None

    def load_checkpoint(self, path: Any, map_location: Any = None, weights_only: bool | None = None
                        ) -> dict[str, Any]:
        local = self.local_path(path)
        try:
            local = newest_whole(os.path.dirname(local), os.path.basename(local)) or local  # mount-s3's versions
            with open(local, "rb") as f:  # one sequential read: random reads are slow on some programs
                data = f.read()
        except OSError as exc:
            raise CheckpointError(f"loading checkpoint {path} through the {self.handle.backend} mount failed: "
                                  f"{exc.strerror or exc}") from None
        return deserialize(data, map_location, weights_only, where=str(path))

    def remove_checkpoint(self, path: Any) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.local_path(path))

    def teardown(self) -> None:
        if self._stack is not None:
            self._stack.close()
        self._stack = None
        self._handle = None
