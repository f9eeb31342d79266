"""``mountctl cleanup`` leaves a managed mount alone while its supervisor lives, however slow its probe.

Real components throughout: the session's SeaweedFS, a real rclone mount run by a real mountctl supervisor
process, and the real ``mountctl cleanup`` command (its search for orphaned servers kept to this test's
directory, so that the runs of others on this machine are not touched).  The slow probe is made for real:
rclone stopped with SIGSTOP leaves every access to the mount waiting in the kernel, as a program that
serves 64 readers makes the probe wait its turn.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import subprocess
import sys
import textwrap
import time
import uuid

import psutil
import pytest

import mountctl
from mountctl import Mount, paths
from mountctl.cli import main
from mountctl.local_s3.far_proxy import FarProfile, FarProxy, find_nginx
from mountctl.mounts.health import mount_health
from mountctl.mounts.mounttable import find_mount
from mountctl.mounts.spec import MountSpec
from mountctl.s3 import client as s3_client
from mountctl.shared import Registry

from conftest import make_bucket, missing, remove_bucket, require_fuse


def test_cleanup_leaves_a_slow_mount_to_its_live_supervisor_and_says_so(s3_env, s3, bucket, mount_root, tmp_path,
                                                                       monkeypatch, capsys):
    require_fuse()
    monkeypatch.setenv("MOUNTCTL_HOME", str(tmp_path / "home"))  # cleanup looks at this home's mounts alone
    from mountctl.local_s3 import orphans

    scoped = orphans.stop_orphans
    monkeypatch.setattr(orphans, "stop_orphans", lambda roots=None: scoped([str(tmp_path)]))
    s3.put_object(Bucket=bucket, Key="k.txt", Body=b"kept")
    directory = os.path.join(paths.managed_mounts_dir(), "live")
    handle = mountctl.shared.acquire(MountSpec(uri=f"s3://{bucket}/", mount_dir=directory, backend="rclone"),
                                     watchdog=False)  # the watchdog would remount; what is asserted is cleanup's part
    try:
        record = Registry().read(directory)
        assert record is not None and record.supervisor is not None
        supervisor, program = record.supervisor["pid"], handle.pid
        assert program is not None
        os.kill(program, signal.SIGSTOP)
        try:
            assert mount_health(directory, None, program, 2.0).state == "unresponsive"  # what the old cleanup cleared
            assert main(["cleanup"]) == 0
        finally:
            os.kill(program, signal.SIGCONT)
        out = capsys.readouterr().out
        assert find_mount(directory) is not None, f"cleanup cleared a mount whose supervisor is alive:\n{out}"
        assert psutil.Process(program).is_running() and psutil.Process(supervisor).is_running()
        [line] = [line for line in out.splitlines() if directory in line]
        assert line.startswith(f"left alone {directory} (s3://{bucket}/): unresponsive"), out
        assert f"supervisor (pid {supervisor}) is alive" in line and "mountctl unmount" in line, line
        assert mount_health(directory, None, program, 30.0).state == "healthy"  # it serves again, untouched
        print(f"\n[cleanup beside a stopped mount] {line}")
    finally:
        handle.release()


READER = textwrap.dedent("""
    import sys
    read = 0
    with open(sys.argv[1], "rb", buffering=0) as f:
        while chunk := f.read(1 << 20):
            read += len(chunk)
            if read == len(chunk):
                print("reading", flush=True)
    print(f"read {read}", flush=True)
""")
SLOW_OBJECT = 24 * 1024 * 1024


@pytest.fixture
def slow_store(local_s3, tmp_path):
    """The session's SeaweedFS behind a far proxy that answers each request after 3 s and sends 2 MB/s per
    connection: a listing (the probe's lookup) takes longer than cleanup's 2 s probe, while a reader's
    stream keeps bringing bytes in."""
    if find_nginx() is None or not os.path.exists("/usr/lib/nginx/modules/ngx_http_lua_module.so"):
        missing("nginx with its Lua module is not installed (apt-get install nginx-light libnginx-mod-http-lua)")
    direct = local_s3.settings(direct=True)
    bucket = make_bucket(s3_client(direct), f"t-{uuid.uuid4().hex[:12]}")
    s3_client(direct).put_object(Bucket=bucket, Key="big.bin", Body=os.urandom(SLOW_OBJECT))
    proxy = FarProxy(direct.endpoint_url or "", str(tmp_path / "far"), FarProfile(latency_ms=3000, rate_mb_s=2))
    endpoint = proxy.start()
    try:
        yield dataclasses.replace(direct, endpoint_url=endpoint), bucket
    finally:
        proxy.stop()
        remove_bucket(s3_client(direct), bucket)


def test_cleanup_leaves_a_busy_mount_without_a_record_to_its_reader(slow_store, mount_root, tmp_path, monkeypatch,
                                                                    capsys):
    """A shared=False mount (as `bench --suite mlperf` makes) has no registry record, so no program pid: cleanup
    must find the program that serves it, and a probe that times out while that program receives from its
    store is a busy mount, not a stale one."""
    require_fuse()
    settings, bucket = slow_store
    monkeypatch.setenv("MOUNTCTL_HOME", str(tmp_path / "home"))  # cleanup looks at this home's mounts alone
    from mountctl.local_s3 import orphans

    scoped = orphans.stop_orphans
    monkeypatch.setattr(orphans, "stop_orphans", lambda roots=None: scoped([str(tmp_path)]))
    directory = os.path.join(paths.managed_mounts_dir(), "own")
    # One GET streams the whole object, read as the reader asks for it: the store sends for as long as it reads.
    spec = MountSpec(uri=f"s3://{bucket}/", mount_dir=directory, backend="rclone", metadata_ttl_s=1,
                     mount_timeout_s=60, extra_args={"rclone": ["--vfs-read-chunk-streams", "0", "--vfs-read-chunk-size",
                                                                "64M", "--buffer-size", "0"]})
    with Mount(spec, settings=settings, watchdog=False) as mounted:
        assert Registry().read(directory) is None
        reader = subprocess.Popen([sys.executable, "-c", READER, os.path.join(directory, "big.bin")],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            assert reader.stdout.readline().strip() == "reading", reader.stderr.read()
            time.sleep(1.5)  # past the listing cache: the probe's lookup waits 3 s for the store
            assert main(["cleanup"]) == 0
            out, err = reader.communicate(timeout=120)
        finally:
            if reader.poll() is None:
                reader.kill()
                reader.wait(timeout=10)
        cleaned = capsys.readouterr().out
        assert out.strip() == f"read {SLOW_OBJECT}", f"the reader failed:\n{err}\ncleanup said:\n{cleaned}"
        assert find_mount(directory) is not None and mounted.pid is not None, cleaned
        [line] = [line for line in cleaned.splitlines() if directory in line]
        assert line.startswith(f"left alone {directory}: busy"), line
        print(f"\n[cleanup beside a busy mount with no record] {line}")
