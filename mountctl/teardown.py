"""Making sure mounts end with their owner.

Three layers, because no one of them covers every way a process ends:

- SIGTERM and SIGHUP are turned into ``SystemExit`` in the main thread (only
  where nobody installed a handler before us), so ``with`` blocks unwind and
  unmount as they do on Ctrl-C; ``atexit`` stops whatever is still live.
- Mount programs are started from one long-lived thread with
  ``PR_SET_PDEATHSIG``: the kernel signals the child when its parent *thread*
  dies, so spawning from a short-lived thread would kill the mount early.
  The signal is set by a tiny exec wrapper, not a ``preexec_fn``.
- A SIGKILLed owner runs none of this; the kernel's parent-death signal then
  stops the mount program, and the next start (or ``mountctl cleanup``) clears
  what is left.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import queue
import signal
import subprocess
import sys
import threading
import weakref
from collections.abc import Callable
from typing import Any

from .errors import MountTimeout

__all__ = ["spawn_with_parent_death_signal", "track", "untrack", "install_signal_handlers"]

log = logging.getLogger("mountctl")

SPAWN_TIMEOUT_S = 30.0
_live: weakref.WeakKeyDictionary[Any, int] = weakref.WeakKeyDictionary()
_atexit_registered = False
_signals_installed = False
_install_lock = threading.Lock()

# Runs as the child before it becomes the mount program: a preexec_fn would run Python
# between fork and exec of a multi-threaded process, which can deadlock on a lock some
# other thread held at the fork.  This small program sets the parent-death signal and
# execs; if the parent died before the signal was set, it gives up instead.
_EXEC_WITH_PARENT_DEATH_SIGNAL = r"""
import ctypes, os, signal, sys
ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
if os.getppid() != int(sys.argv[1]):
    sys.exit("mountctl: the supervising process ended before the mount program started")
os.execv(sys.argv[2], sys.argv[2:])
"""


class _Request:
    def __init__(self, work: Callable[[], Any]) -> None:
        self.work = work
        self.reply: queue.Queue[tuple[bool, Any]] = queue.Queue(maxsize=1)
        self.abandoned = threading.Event()
        # Held while the caller decides to abandon and while the spawner decides to reply: a reply
        # made just after the timeout is either taken by the caller or killed, never left unowned.
        self.decided = threading.Lock()


class _Spawner:
    """One daemon thread that lives as long as the process and starts every mount program."""

    def __init__(self) -> None:
        self._requests: queue.Queue[_Request] = queue.Queue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def run(self, work: Callable[[], Any], timeout_s: float = SPAWN_TIMEOUT_S) -> Any:
        with self._lock:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._loop, name="mountctl-spawner", daemon=True)
                self._thread.start()
        request = _Request(work)
        self._requests.put(request)
        try:
            ok, value = request.reply.get(timeout=timeout_s)
        except queue.Empty:
            with request.decided:
                try:
                    ok, value = request.reply.get_nowait()  # it came in just now: ours after all
                except queue.Empty:
                    request.abandoned.set()
                    raise MountTimeout(f"starting a mount program took longer than {timeout_s:g}s; the machine "
                                       "may be overloaded: try again", timeout_s=timeout_s) from None
        if not ok:
            raise value
        return value

    def _loop(self) -> None:
        while True:
            request = self._requests.get()
            try:
                result: tuple[bool, Any] = (True, request.work())
            except BaseException as exc:  # handed back to the caller's thread
                result = (False, exc)
            with request.decided:
                if not request.abandoned.is_set():
                    request.reply.put(result)
                    continue
            if result[0] and isinstance(result[1], subprocess.Popen):
                result[1].kill()  # nobody is waiting for this child any more
                with contextlib.suppress(subprocess.TimeoutExpired):
                    result[1].wait(timeout=5)


_spawner = _Spawner()


def spawn_with_parent_death_signal(argv: list[str], **popen_kwargs: Any) -> subprocess.Popen[bytes]:
    """Start ``argv`` (argv[0] an absolute path) so the kernel stops it when this process dies."""
    wrapped = [sys.executable, "-I", "-S", "-c", _EXEC_WITH_PARENT_DEATH_SIGNAL, str(os.getpid()), *argv]
    return _spawner.run(lambda: subprocess.Popen(wrapped, **popen_kwargs))


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
    """Idempotent.  Signal handlers can only be set from the main thread: a call from another
    thread registers the exit hook and leaves the handlers for the next main-thread call.
    Never replaces a handler someone else set."""
    global _atexit_registered, _signals_installed
    with _install_lock:
        if not _atexit_registered:
            atexit.register(_stop_all)
            _atexit_registered = True
        if _signals_installed or threading.current_thread() is not threading.main_thread():
            return
        _signals_installed = True
        for signum in (signal.SIGTERM, signal.SIGHUP):
            if signal.getsignal(signum) is signal.SIG_DFL:
                signal.signal(signum, _exit_on_signal)
