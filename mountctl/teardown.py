"""Making sure mounts end with their owner.

Three layers, because no one of them covers every way a process ends:

- SIGTERM and SIGHUP are turned into ``SystemExit`` in the main thread (only
  where nobody installed a handler before us), so ``with`` blocks unwind and
  unmount as they do on Ctrl-C; ``atexit`` stops whatever is still live.
- Mount programs are started from one long-lived thread with
  ``PR_SET_PDEATHSIG``: the kernel signals the child when its parent *thread*
  dies, so spawning from a short-lived thread would kill the mount early.
- A SIGKILLed owner runs none of this; the kernel's parent-death signal then
  stops the mount program, and the next start (or ``mountctl cleanup``) clears
  what is left.
"""

from __future__ import annotations

import atexit
import ctypes
import logging
import os
import queue
import signal
import subprocess
import threading
import weakref
from collections.abc import Callable
from typing import Any

__all__ = ["spawn_with_parent_death_signal", "track", "install_signal_handlers"]

log = logging.getLogger("mountctl")

_PR_SET_PDEATHSIG = 1
_live: "weakref.WeakKeyDictionary[Any, int]" = weakref.WeakKeyDictionary()
_installed = False
_install_lock = threading.Lock()


def _die_with_parent() -> None:
    """Runs in the child before exec."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


class _Spawner:
    """One daemon thread that lives as long as the process and starts every mount program."""

    def __init__(self) -> None:
        self._requests: queue.Queue[tuple[Callable[[], Any], queue.Queue[Any]]] = queue.Queue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def run(self, work: Callable[[], Any]) -> Any:
        with self._lock:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._loop, name="mountctl-spawner", daemon=True)
                self._thread.start()
        reply: queue.Queue[Any] = queue.Queue(maxsize=1)
        self._requests.put((work, reply))
        ok, value = reply.get()
        if not ok:
            raise value
        return value

    def _loop(self) -> None:
        while True:
            work, reply = self._requests.get()
            try:
                reply.put((True, work()))
            except BaseException as exc:  # handed back to the caller's thread
                reply.put((False, exc))


_spawner = _Spawner()


def spawn_with_parent_death_signal(argv: list[str], **popen_kwargs: Any) -> "subprocess.Popen[bytes]":
    return _spawner.run(lambda: subprocess.Popen(argv, preexec_fn=_die_with_parent, **popen_kwargs))


def track(resource: Any) -> None:
    """Stop ``resource`` (anything with ``stop()``) at interpreter exit if still live."""
    _live[resource] = os.getpid()
    install_signal_handlers()


def untrack(resource: Any) -> None:
    _live.pop(resource, None)


def _stop_all() -> None:
    # A forked child (a DataLoader worker, say) inherits this table but owns none of it.
    for resource, owner in list(_live.items()):
        if owner != os.getpid():
            continue
        try:
            resource.stop()
        except Exception:  # keep stopping the others
            log.exception("could not stop %r at exit", resource)


def _exit_on_signal(signum: int, frame: Any) -> None:
    raise SystemExit(128 + signum)


def install_signal_handlers() -> None:
    """Idempotent; only from the main thread, and never over a handler someone else set."""
    global _installed
    with _install_lock:
        if _installed:
            return
        _installed = True
        atexit.register(_stop_all)
        if threading.current_thread() is not threading.main_thread():
            return
        for signum in (signal.SIGTERM, signal.SIGHUP):
            if signal.getsignal(signum) is signal.SIG_DFL:
                signal.signal(signum, _exit_on_signal)
