"""The DataLoader workers' multiprocessing temp dir: one per run, removed at its end and swept after a crash.

A worker that sends a tensor to the main process shares its memory by file
descriptor (torch's default strategy), through multiprocessing's resource
sharer, which listens on a socket in a ``pymp-*`` directory of its own.  Each
worker makes one, and a worker ended by SIGTERM (an epoch cut short, a
DataLoader dropped mid-way, the interpreter exiting) or a run killed outright
leaves it in /tmp.  Inside ``worker_tempdir()`` every worker forked by this
process uses one directory named after it, removed when the block ends;
directories of processes that no longer exist are removed when the next one
starts.  Workers that outlive the block (a worker's error ended the run) keep
the directory until they are gone.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import shutil
import tempfile
from collections.abc import Iterator

__all__ = ["worker_tempdir", "sweep_stale", "PREFIX"]

PREFIX = "pymp-mountctl-"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's live process
    return True


def sweep_stale(root: str | None = None) -> list[str]:
    """Remove the worker temp dirs of runs whose process is gone; return what was removed."""
    root = root or tempfile.gettempdir()
    removed = []
    for name in os.listdir(root):
        if not name.startswith(PREFIX):
            continue
        pid = name[len(PREFIX):].partition("-")[0]
        if pid.isdigit() and not _alive(int(pid)):
            shutil.rmtree(os.path.join(root, name), ignore_errors=True)
            removed.append(name)
    return removed


@contextlib.contextmanager
def worker_tempdir() -> Iterator[str]:
    """For the block, DataLoader workers forked from this process share one temp dir that is ours to remove."""
    sweep_stale()
    path = tempfile.mkdtemp(prefix=f"{PREFIX}{os.getpid()}-")
    # multiprocessing.util.get_temp_dir() uses this entry when set (and inherits it into forked children);
    # there is no public setting for it.
    config = multiprocessing.current_process()._config  # type: ignore[attr-defined]
    previous = config.get("tempdir")
    config["tempdir"] = path
    try:
        yield path
    finally:
        if previous is None:
            config.pop("tempdir", None)
        else:
            config["tempdir"] = previous
        _remove_when_workers_are_gone(path)


def _remove_when_workers_are_gone(path: str) -> None:
    """Workers still alive (a worker's error ended the run while a trainer still holds their iterator) remove
    their own sockets from ``path`` when they exit; removing it under them made each print a FileNotFoundError
    traceback at its exit.  So ``path`` goes now if no worker is left, else at this process's exit, after
    multiprocessing has ended its children (exit priority below theirs; a crash leaves it to ``sweep_stale``)."""
    if not multiprocessing.active_children():
        shutil.rmtree(path, ignore_errors=True)
        return
    from multiprocessing.util import Finalize

    Finalize(None, shutil.rmtree, args=(path,), kwargs={"ignore_errors": True}, exitpriority=-100)
