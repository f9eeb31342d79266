"""A script's own SeaweedFS in a scratch home, so a measurement never touches the user's server or data.

    from scratch_server import scratch_server   # benchmarks/lab/ is on sys.path when a script there runs
    with scratch_server("open-cost-") as (home, server, direct, s3): ...

Yields the scratch home, the server, settings that reach it directly, and a boto3 client on those
settings; the server is stopped and the home removed when the block ends, on an error or Ctrl-C too.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from typing import Any

from mountctl.local_s3.server import LocalS3
from mountctl.s3 import S3Settings
from mountctl.s3 import client as s3_client

__all__ = ["scratch_server"]


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
