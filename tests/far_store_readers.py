"""A bucket behind the real nginx far-store proxy, and reader processes that read its files through a mount again
and again: what the tests of a store that stops answering under a mount's readers share.

The store is stopped by SIGSTOP of the proxy's process group (``Store.pgid``): connections stay open and new ones
complete in the kernel, and nothing answers.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import signal
import subprocess
import sys
import textwrap
import threading
import uuid
from collections.abc import Iterator

from mountctl import Mount
from mountctl.local_s3.far_proxy import FarProfile, FarProxy, find_nginx
from mountctl.mounts.backends import BACKENDS
from mountctl.s3 import S3Settings
from mountctl.s3 import client as s3_client

from conftest import make_bucket, missing, remove_bucket, require_fuse

# A reader process (as a DataLoader worker is one): reads its files through the mount again and again, pausing
# argv[2] seconds after each, and prints how many bytes each read returned.  Not a thread of the test: a process
# that forks (the health probe) while it holds FUSE files open has its child flush each of them on exec, which
# waits behind the very reads a test makes slow, or on a mount whose store does not answer.
READER = textwrap.dedent("""
    import os, sys, time
    root, pause, names = sys.argv[1], float(sys.argv[2]), sys.argv[3:]
    while True:
        for name in names:
            try:
                with open(os.path.join(root, name), "rb") as f:
                    while block := f.read(1 << 20):
                        print(len(block), flush=True)
            except OSError as exc:
                print(f"error {name}: {exc}", flush=True)
                sys.exit(1)
            time.sleep(pause)
""")


@dataclasses.dataclass
class Store:
    settings: S3Settings  # through the proxy
    endpoint: str  # the proxy's
    pgid: int  # nginx's process group: SIGSTOP it and the store hangs
    names: list[str]  # the objects put, at the top of the bucket
    stopped: bool = False

    def stop(self) -> None:
        os.killpg(self.pgid, signal.SIGSTOP)
        self.stopped = True

    def resume(self) -> None:
        os.killpg(self.pgid, signal.SIGCONT)
        self.stopped = False


def require_far_store_mount_s3() -> None:
    require_fuse()
    if not BACKENDS["mount-s3"].available():
        missing("mount-s3 is not installed; `bash scripts/setup.sh` builds it")
    if find_nginx() is None:
        missing("nginx is not installed (apt-get install nginx-light libnginx-mod-http-lua)")


@contextlib.contextmanager
def far_store(local_s3, work_dir: str, bucket_prefix: str, files: int, size: int) -> Iterator[tuple[Store, str]]:
    """(store, bucket): a new bucket of ``files`` random objects of ``size`` bytes, behind a proxy of its own;
    the proxy is continued, stopped and the bucket removed afterwards."""
    direct = local_s3.settings(direct=True)
    s3 = s3_client(direct)
    bucket = make_bucket(s3, f"{bucket_prefix}-{uuid.uuid4().hex[:8]}")
    names = [f"part-{i}.bin" for i in range(files)]
    for name in names:
        s3.put_object(Bucket=bucket, Key=name, Body=os.urandom(size))
    proxy = FarProxy(direct.endpoint_url or "", os.path.join(work_dir, "proxy"), FarProfile(latency_ms=1, rate_mb_s=0))
    store: Store | None = None
    try:
        endpoint = proxy.start()
        store = Store(dataclasses.replace(direct, endpoint_url=endpoint), endpoint,
                      (proxy.state() or {})["process"]["pid"], names)
        yield store, bucket
    finally:
        if store is not None and store.stopped:
            store.resume()
        proxy.stop()
        remove_bucket(s3, bucket)


class Readers:
    """``count`` reader processes over ``names`` under ``root`` (each starting at another file); ``done`` holds
    the size of every read returned, ``errors`` the line of each reader that failed."""

    def __init__(self, root: str, names: list[str], count: int, *, pause_s: float = 0.0) -> None:
        self.done: list[int] = []
        self.errors: list[str] = []
        self._processes: list[subprocess.Popen[str]] = []
        self._collectors: list[threading.Thread] = []
        for i in range(count):
            order = names[i % len(names):] + names[:i % len(names)]
            process = subprocess.Popen([sys.executable, "-c", READER, root, str(pause_s), *order],
                                       stdout=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True)
            self._processes.append(process)
            self._collectors.append(threading.Thread(target=self._collect, args=(process,), daemon=True))
            self._collectors[-1].start()

    @property
    def served(self) -> int:
        return sum(self.done)

    def _collect(self, process: subprocess.Popen[str]) -> None:
        assert process.stdout is not None
        for line in process.stdout:
            if line.startswith("error"):
                self.errors.append(line.strip())
            else:
                self.done.append(int(line))

    def stop(self) -> None:
        for process in self._processes:
            process.kill()
        for process in self._processes:
            process.wait(timeout=60)
        for collector in self._collectors:
            collector.join(timeout=10)


def tear_down(store: Store, readers: Readers | None, mount: Mount) -> None:
    """Continue the store first (a reader waiting on the mount leaves only once its program answers), then stop
    the readers, then the mount."""
    if store.stopped:
        store.resume()
    if readers is not None:
        readers.stop()
    mount.stop()
