"""Servers whose owner is gone: far-store proxies (nginx) and embedded S3 servers (weed), for ``mountctl cleanup``.

A run killed with SIGKILL runs none of its own cleanup.  Its proxy's master is stopped by
the kernel (parent-death signal), but a proxy whose master was SIGKILLed leaves workers
that keep serving, and a server held by runs that are all gone runs on.  Both are found
by their working directory (every one runs in a private dir of mountctl's making) among
this user's processes, and stopped only when their own records say the owner is gone.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable

from .. import paths
from ..errors import MountctlError
from .far_proxy import FarProxy

__all__ = ["stop_orphans"]


def _working_dirs(name: str, marker: str, roots: tuple[str, ...] | None) -> set[str]:
    """Working directories of this user's ``name`` processes that hold ``marker`` (under ``roots`` if given)."""
    import psutil

    found = set()
    for process in psutil.process_iter(["name", "uids"]):
        try:
            if process.info["name"] != name or process.info["uids"].real != os.getuid():
                continue
            cwd = process.cwd()
        except (psutil.Error, OSError):
            continue
        if roots is not None and not any(cwd == root or cwd.startswith(root + os.sep) for root in roots):
            continue
        if os.path.exists(os.path.join(cwd, marker)):
            found.add(cwd)
    return found


def _proxy_at(workdir: str) -> FarProxy | None:
    try:
        with open(os.path.join(workdir, "far-proxy.json")) as f:
            upstream = json.load(f).get("upstream")
        return FarProxy(upstream, workdir)
    except (OSError, ValueError, AttributeError, MountctlError):
        return None


def stop_orphans(roots: Iterable[str] | None = None) -> list[str]:
    """Stop every proxy and server of this user whose owner is gone; one line per thing stopped.

    ``roots`` limits the search to working directories under them (this ``$MOUNTCTL_HOME``'s
    server is always looked at).
    """
    from .server import LocalS3

    scope = tuple(os.path.abspath(root) for root in roots) if roots is not None else None
    cleared: list[str] = []
    for workdir in sorted(_working_dirs("nginx", "far-proxy.json", scope)):
        proxy = _proxy_at(workdir)
        why = proxy.orphaned() if proxy else None
        if proxy is not None and why:
            proxy.stop()
            cleared.append(f"orphaned far-store proxy in {workdir}: {why}")
    servers = _working_dirs("weed", "server.json", scope) | {paths.local_s3_dir()}
    for server_dir in sorted(servers):
        why = LocalS3(server_dir).stop_if_orphaned()
        if why:
            cleared.append(f"orphaned {why}")
    return cleared
