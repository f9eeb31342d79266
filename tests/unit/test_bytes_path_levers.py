"""Each bytes cell's label names the one lever it changes from the default route of the same program."""

from __future__ import annotations

from dataclasses import fields

from benchmarks.harness.bytes_path import bytes_routes
from mountctl.pytorch.data.sources import MountpointOptions


def test_a_no_cache_cell_differs_from_the_default_by_the_cache_alone():
    """It also turned the in-memory read-ahead off: two levers under one label, the read-ahead's effect reported
    as the cache's."""
    routes = {(r.backend, r.variant): r.mountpoint for r in bytes_routes(["mountpoint"], ["mount-s3", "rclone"])}
    for program in ("mount-s3", "rclone"):
        default, no_cache = routes[(program, "default")], routes[(program, "no-cache")]
        assert default == MountpointOptions(backend=program)  # the default route: the kind's defaults, nothing else
        changed = {f.name for f in fields(MountpointOptions) if getattr(default, f.name) != getattr(no_cache, f.name)}
        assert changed == {"cache"} and no_cache.cache is False, (default, no_cache)
