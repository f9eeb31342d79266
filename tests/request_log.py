"""A far store that logs every request, for tests that count what one open costs.

Real nginx (the far-store proxy with ``log_requests``) in front of the session's real SeaweedFS: the
mount programs talk to it as they would to S3, and its access log says what they sent.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import os
import time
import urllib.parse
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

from mountctl.local_s3.far_proxy import FarProfile, FarProxy, find_nginx
from mountctl.s3 import S3Settings
from mountctl.s3 import client as s3_client

from conftest import make_bucket, missing, remove_bucket

PREFIX = "imgs/"


@dataclass
class LoggedStore:
    proxy: FarProxy
    settings: S3Settings  # endpoint: the proxy
    bucket: str
    names: list[str]  # file names under PREFIX
    size: int

    @property
    def uri(self) -> str:
        return f"s3://{self.bucket}/{PREFIX}"

    def mark(self) -> int:
        """The number of requests logged so far, once nginx has written the last one (bounded wait)."""
        count, deadline = -1, time.monotonic() + 5
        while time.monotonic() < deadline:
            time.sleep(0.3)  # nginx writes a request's line once its response has been sent
            now = len(self._lines())
            if now == count:
                break
            count = now
        return count

    def since(self, mark: int) -> collections.Counter[str]:
        """Requests for the dataset's objects since ``mark``, by method (listings as LIST)."""
        counts: collections.Counter[str] = collections.Counter()
        for line in self._lines()[mark:self.mark()]:
            method, uri = line.split(" ", 2)[:2]
            if "prefix=" in uri:
                counts["LIST"] += 1
            elif f"/{self.bucket}/{PREFIX}" in uri:
                counts[method] += 1
        return counts

    def lines_since(self, mark: int) -> list[str]:
        """The log's lines since ``mark`` (``METHOD URI STATUS ...``), every request to the store."""
        return self._lines()[mark:self.mark()]

    def directory_listings(self, mark: int) -> list[str]:
        """The listings of the dataset's directory itself since ``mark``: a lookup lists one name each
        (``prefix=PREFIX/NAME/``, ``max-keys=1``), a listing of the directory has the prefix itself."""
        itself = "&prefix=" + urllib.parse.quote(PREFIX, safe="")
        return [line for line in self.lines_since(mark) if line.split(" ")[1].endswith(itself)]

    def gets_by_name(self, mark: int) -> dict[str, list[int]]:
        """The HTTP status of every GET of each dataset file since ``mark``, by file name."""
        found: dict[str, list[int]] = collections.defaultdict(list)
        for line in self._lines()[mark:self.mark()]:
            method, uri, status = line.split(" ", 3)[:3]
            where = f"/{self.bucket}/{PREFIX}"
            if method == "GET" and where in uri and "prefix=" not in uri:
                found[uri.split(where, 1)[1].split("?", 1)[0]].append(int(status))
        return found

    def settle(self, mark: int, method: str, count: int, timeout_s: float = 30.0) -> None:
        """Wait (bounded) until ``count`` requests of ``method`` since ``mark`` are logged.

        nginx logs a request when it ends, and a program may finish a download after the reader closed
        the file (rclone completes its cache file): without this a late line lands in the next count.
        """
        deadline = time.monotonic() + timeout_s
        while self.since(mark)[method] < count and time.monotonic() < deadline:
            time.sleep(0.2)

    def _lines(self) -> list[str]:
        try:
            with open(self.proxy.requests_path) as f:
                return f.read().splitlines()
        except FileNotFoundError:
            return []


@contextlib.contextmanager
def logged_store(local_s3, workdir: str, *, files: int, size: int, latency_ms: float = 5.0) -> Iterator[LoggedStore]:
    """A bucket of ``files`` objects of ``size`` bytes behind a request-logging proxy; all removed at the end."""
    if find_nginx() is None or not os.path.exists("/usr/lib/nginx/modules/ngx_http_lua_module.so"):
        missing("nginx with its Lua module is not installed (apt-get install nginx-light libnginx-mod-http-lua)")
    direct = local_s3.settings(direct=True)
    proxy = FarProxy(direct.endpoint_url or "", os.path.join(workdir, "proxy"),
                     FarProfile(latency_ms=latency_ms, rate_mb_s=0), log_requests=True)
    endpoint = proxy.start()
    s3 = s3_client(direct)
    bucket = make_bucket(s3, f"open-{uuid.uuid4().hex[:8]}")
    names = [f"img{i:04d}.jpg" for i in range(files)]
    try:
        for name in names:
            s3.put_object(Bucket=bucket, Key=PREFIX + name, Body=os.urandom(size))
        yield LoggedStore(proxy, dataclasses.replace(direct, endpoint_url=endpoint), bucket, names, size)
    finally:
        remove_bucket(s3, bucket)
        proxy.stop()


def read_every_file(root: str, names: list[str]) -> int:
    """Open, read and close each file in turn, as a loader that opens one file per sample does."""
    total = 0
    for name in names:
        with open(os.path.join(root, name), "rb") as f:
            total += len(f.read())
    return total
