"""A script's own SeaweedFS in a scratch home, so a measurement never touches the user's server or data.

    from scratch_server import scratch_server   # benchmarks/lab/ is on sys.path when a script there runs
    with scratch_server("open-cost-") as (home, server, direct, s3): ...

Yields the scratch home, the server, settings that reach it directly, and a boto3 client on those
settings; the server is stopped and the home removed when the block ends, on an error or Ctrl-C too.

``far_scratch_server`` is the same behind the far profile (20 ms per request, 50 MB/s per connection), with
``MOUNTCTL_HOME`` in the scratch home for the block (private mounts and records) and one bucket made:

    with far_scratch_server("first-get-", bucket="lab") as (home, server, s3): ...
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from typing import Any

from mountctl.local_s3.far_proxy import FarProfile
from mountctl.local_s3.server import LocalS3
from mountctl.s3 import S3Settings
from mountctl.s3 import client as s3_client

__all__ = ["scratch_server", "far_scratch_server"]


@contextlib.contextmanager
def scratch_server(prefix: str) -> Iterator[tuple[str, LocalS3, S3Settings, Any]]:
    with tempfile.TemporaryDirectory(prefix=prefix) as home:
        server = LocalS3(os.path.join(home, "s3"))
        server.start()
        try:
            direct = server.settings(direct=True)
            yield home, server, direct, s3_client(direct)
        finally:
            server.stop()


@contextlib.contextmanager
def far_scratch_server(prefix: str, *, bucket: str) -> Iterator[tuple[str, LocalS3, Any]]:
    """The scratch home, its server (``server.settings()`` reach it through the far proxy) and a boto3 client
    that reaches it directly, for uploads that should not pay the far profile."""
    before = os.environ.get("MOUNTCTL_HOME")
    with tempfile.TemporaryDirectory(prefix=prefix) as home:
        os.environ["MOUNTCTL_HOME"] = os.path.join(home, "home")
        server = LocalS3(os.path.join(home, "home", "local-s3"))
        try:
            server.start(buckets=(bucket,))
            server.start_far(FarProfile())
            yield home, server, s3_client(server.settings(direct=True))
        finally:
            server.stop()
            if before is None:
                os.environ.pop("MOUNTCTL_HOME", None)
            else:
                os.environ["MOUNTCTL_HOME"] = before
