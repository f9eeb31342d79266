"""Distributed checkpoints (``torch.distributed.checkpoint``): to S3 through s3torchconnector, or to a directory.

Every rank calls ``save``/``load`` together.  An ``s3://`` URI goes through
s3torchconnector's ``S3StorageWriter``/``S3StorageReader``; a path (for
instance on a read-write mountctl mount) through DCP's own
``FileSystemWriter``/``FileSystemReader``.  DCP writes one file per rank
plus ``.metadata`` last, and a load reads ``.metadata`` first, so a save
that failed half-way is never loaded: it has no metadata.

``load`` fills the given state dict in place, as DCP does; with
``model_and_optimizer``/``restore`` a model and its optimizer round-trip
through ``torch.distributed.checkpoint.state_dict`` (which also creates the
optimizer's state before the first step, so a fresh optimizer can load).
"""

from __future__ import annotations

import os
from typing import Any

from mountctl import S3Settings, parse_s3_uri
from mountctl.pytorch.errors import CheckpointError

__all__ = ["save", "load", "model_and_optimizer", "restore", "METADATA"]

METADATA = ".metadata"


def _is_s3(where: str) -> bool:
    return where.startswith("s3://")


def _s3_fs(settings: S3Settings, reader_constructor: Any = None) -> Any:
    """The connector's DCP file system on a client that has the settings' endpoint.

    ``S3StorageWriter``/``S3StorageReader`` take no endpoint (their client would go to AWS, or wherever
    the environment points), so the file system they made is replaced by one on our own client.
    """
    from s3torchconnector._s3client import S3Client
    from s3torchconnector.dcp.s3_file_system import S3FileSystem

    options = settings.s3torch_options()
    client = S3Client(options["region"], endpoint=options["endpoint"], s3client_config=options["s3client_config"])
    return S3FileSystem(options["region"], s3_client=client, reader_constructor=reader_constructor)


def _on_settings_endpoint(storage: Any, path: str, settings: S3Settings) -> Any:
    storage.fs = _s3_fs(settings, getattr(storage, "_reader_constructor", None))  # the reader's, kept
    storage.path = storage.fs.init_path(path)
    return storage


def _writer(where: str, settings: S3Settings) -> Any:
    if _is_s3(where):
        from s3torchconnector.dcp import S3StorageWriter

        path = str(parse_s3_uri(where))
        options = settings.s3torch_options()
        return _on_settings_endpoint(S3StorageWriter(region=options["region"], path=path,
                                                     s3client_config=options["s3client_config"], overwrite=True),
                                     path, settings)
    from torch.distributed.checkpoint import FileSystemWriter

    return FileSystemWriter(where, sync_files=False, overwrite=True)


def _reader(where: str, settings: S3Settings) -> Any:
    if _is_s3(where):
        from s3torchconnector.dcp import S3StorageReader

        path = str(parse_s3_uri(where))
        options = settings.s3torch_options()
        return _on_settings_endpoint(S3StorageReader(region=options["region"], path=path,
                                                     s3client_config=options["s3client_config"]), path, settings)
    from torch.distributed.checkpoint import FileSystemReader

    return FileSystemReader(where)


def _failures() -> tuple[type[BaseException], ...]:
    """What a failed save or load raises: DCP gathers the ranks' exceptions into one CheckpointException
    (a BaseException, not an Exception); alone, the storage layer's own (OSError, s3torchconnector's
    S3Exception) come through, and a load that finds no ``.metadata`` ends in an AssertionError."""
    from s3torchconnector import S3Exception
    from torch.distributed.checkpoint.api import CheckpointException

    return (OSError, RuntimeError, AssertionError, S3Exception, CheckpointException)


def _reason(exc: BaseException) -> str:
    """One line per failing rank instead of DCP's tracebacks."""
    failures = getattr(exc, "failures", None)
    if isinstance(failures, dict) and failures:
        # Each failure is DCP's (exception, traceback summary) pair.
        return "; ".join(f"rank {rank}: {f[0] if isinstance(f, tuple) else f}" for rank, f in sorted(failures.items()))
    return str(exc)


def save(state: dict[str, Any], where: str, settings: S3Settings) -> None:
    """Save ``state`` on every rank of the default process group (or alone, without one)."""
    import torch.distributed.checkpoint as dcp

    if not _is_s3(where):
        try:
            os.makedirs(where, exist_ok=True)
        except OSError as exc:
            raise CheckpointError(f"cannot create DCP checkpoint directory {where}: {exc.strerror}; "
                                  "choose a writable directory (a mount needs --read-write)") from None
    try:
        dcp.save(state, storage_writer=_writer(where, settings))
    except _failures() as exc:
        raise CheckpointError(f"distributed checkpoint save to {where} failed: {_reason(exc)}; its metadata was not "
                              "written, so it will not be loaded") from None


def load(state: dict[str, Any], where: str, settings: S3Settings) -> None:
    """Fill ``state`` in place from the checkpoint at ``where``."""
    import torch.distributed.checkpoint as dcp

    try:
        dcp.load(state, storage_reader=_reader(where, settings))
    except _failures() as exc:
        raise CheckpointError(f"loading the distributed checkpoint at {where} failed: {_reason(exc)}; check that a "
                              "save there finished (it has a .metadata file)") from None


def model_and_optimizer(model: Any, optimizer: Any, **extra: Any) -> dict[str, Any]:
    """The state DCP saves for a model and its optimizer (plus ``extra`` values, e.g. the step)."""
    from torch.distributed.checkpoint.state_dict import get_state_dict

    model_state, optimizer_state = get_state_dict(model, optimizer)
    return {"model": model_state, "optimizer": optimizer_state, **extra}


def restore(model: Any, optimizer: Any, where: str, settings: S3Settings, **extra: Any) -> dict[str, Any]:
    """Load a ``model_and_optimizer`` checkpoint into ``model`` and ``optimizer``; return the ``extra`` values.

    ``extra`` gives their names and defaults (e.g. ``step=0``); the checkpoint's values replace them.
    """
    from torch.distributed.checkpoint.state_dict import set_state_dict

    state = model_and_optimizer(model, optimizer, **extra)
    load(state, where, settings)
    set_state_dict(model, optimizer, model_state_dict=state["model"], optim_state_dict=state["optimizer"])
    return {name: state[name] for name in extra}
