"""64 readers on one shared mount of the far store: no failed read, no remount, memory under the bound.

A node of 8 GPUs runs 8 ranks with 8 loader workers each: 64 files open at once on one mount.
Here 8 real processes stand for the ranks, each with 8 reader threads, on one shared mount
(its supervisor's watchdog on, probing every half second with a 1 s bound, tighter than the
default so that a busy mount is probed often) of real nginx adding S3's latency and
per-connection rate in front of the real SeaweedFS.  The data is small (64 x 2 MiB) so that
the test runs in seconds; the benchmark cell (``resnet.py bench --suite node``) measures rates.
"""

from __future__ import annotations

import dataclasses
import os
import uuid

import pytest

import mountctl
from benchmarks.harness.node_reads import read_as_ranks
from mountctl import MountSpec
from mountctl.local_s3.far_proxy import FarProfile, FarProxy, find_nginx
from mountctl.mounts.backends import BACKENDS, MOUNT_S3_MIN_MEMORY_MB, choose_backend
from mountctl.observability.metrics import program_memory
from mountctl.s3 import client as s3_client

from conftest import make_bucket, missing, require_fuse

MIB = 1 << 20
OBJECTS = 64
OBJECT_BYTES = 2 * MIB
RANKS, THREADS = 8, 8
# The bound each mount runs under; every file of the 64 is open at once, so it must hold for any number of them.
MEMORY_MB = 384


@pytest.fixture(scope="module")
def far_objects(local_s3, tmp_path_factory):
    """64 objects of 2 MiB behind a far-store proxy (S3's default profile: 20 ms, 50 MB/s per connection)."""
    if find_nginx() is None or not os.path.exists("/usr/lib/nginx/modules/ngx_http_lua_module.so"):
        missing("nginx with its Lua module is not installed (apt-get install nginx-light libnginx-mod-http-lua)")
    direct = local_s3.settings(direct=True)
    proxy = FarProxy(direct.endpoint_url or "", str(tmp_path_factory.mktemp("far") / "proxy"), FarProfile())
    endpoint = proxy.start()
    s3 = s3_client(direct)
    bucket = make_bucket(s3, f"node-{uuid.uuid4().hex[:8]}")
    sizes = {f"part-{i:03d}.bin": OBJECT_BYTES for i in range(OBJECTS)}
    for name in sizes:
        s3.put_object(Bucket=bucket, Key=name, Body=os.urandom(OBJECT_BYTES))
    try:
        yield {"settings": dataclasses.replace(direct, endpoint_url=endpoint), "bucket": bucket, "sizes": sizes}
    finally:
        proxy.stop()
        s3.delete_objects(Bucket=bucket, Delete={"Objects": [{"Key": name} for name in sizes]})
        s3.delete_bucket(Bucket=bucket)


# Each program by name: `auto` is one of them, so it adds no case.
@pytest.mark.parametrize("program", ["mount-s3", "rclone", "s3fs"])
def test_64_readers_on_one_shared_mount_fail_no_read_and_cause_no_remount(program, far_objects, mount_root):
    require_fuse()
    if not BACKENDS[program].available():
        missing(f"{program} is not installed")
    spec = MountSpec(uri=f"s3://{far_objects['bucket']}/", mount_dir=str(mount_root / "m"), backend=program,
                     memory_mb=MEMORY_MB, probe_timeout_s=1.0, warm="off")  # the 64 readers' load alone
    handle = mountctl.shared.acquire(spec, settings=far_objects["settings"], watchdog=True, watchdog_interval_s=0.5)
    try:
        first_pid = handle.pid
        reads = read_as_ranks(handle.path, far_objects["sizes"], ranks=RANKS, threads=THREADS, timeout_s=240)
        last_pid = handle.pid
        peak = program_memory(last_pid)["peak_rss_bytes"]
        record = handle.record()
    finally:
        handle.release()
    assert record is not None
    events = [event["event"] for event in record.events]
    name = choose_backend(program).name
    print(f"\n[64 readers, {program} -> {name}] {reads.bytes / MIB:.0f} MiB in {reads.seconds:.2f}s "
          f"({reads.aggregate_mb_s:.0f} MB/s), slowest rank {reads.slowest_share:.2f} x mean, "
          f"peak RSS {(peak or 0) / MIB:.0f} MiB (bound {MEMORY_MB}), events {events}")
    assert reads.failures == []
    assert reads.bytes == OBJECTS * OBJECT_BYTES
    assert record.restarts == 0 and last_pid == first_pid, events
    assert not {"unresponsive", "dead", "remounted"} & set(events), events
    bound_mb = max(MEMORY_MB, MOUNT_S3_MIN_MEMORY_MB) if name == "mount-s3" else MEMORY_MB  # its least target
    assert peak is not None and peak < bound_mb * MIB, f"{name} peaked at {(peak or 0) / MIB:.0f} MiB"
