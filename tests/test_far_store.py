"""The far store: real nginx in front of the real SeaweedFS adds S3's latency and per-connection rate, and nothing else."""

from __future__ import annotations

import dataclasses
import hashlib
import io
import json
import os
import subprocess
import sys
import time
import uuid
from concurrent.futures import ThreadPoolExecutor

import psutil
import pytest

from mountctl import Mount, MountSpec
from mountctl.local_s3.far_proxy import FarProfile, FarProxy, find_nginx
from mountctl.s3 import client as s3_client

from conftest import make_bucket, missing, remove_bucket, require_fuse

LATENCY_MS = 30.0
RATE_MB_S = 20.0  # small, so that a stream long enough to measure stays quick
BIG = 12 * 1024 * 1024
MOUNTCTL = [sys.executable, "-m", "mountctl"]
# Where a Debian nginx writes when it is not told otherwise: the proxy must leave them alone.
SYSTEM_PLACES = ("/var/log/nginx", "/var/lib/nginx", "/run/nginx.pid")


def _require_nginx() -> None:
    nginx = find_nginx()
    if nginx is None:
        missing("nginx is not installed (apt-get install nginx-light libnginx-mod-http-lua)")
    modules = "/usr/lib/nginx/modules/ngx_http_lua_module.so"
    if not os.path.exists(modules):
        missing("nginx's Lua module is not installed (apt-get install libnginx-mod-http-lua)")


def _nginx_in_session(pid: int) -> list[int]:
    found = []
    for process in psutil.process_iter(["name"]):
        try:
            if process.info["name"] == "nginx" and os.getsid(process.pid) == pid:
                found.append(process.pid)
        except OSError:
            continue
    return found


def _system_state() -> dict[str, object]:
    state: dict[str, object] = {}
    for place in SYSTEM_PLACES:
        if os.path.isdir(place):
            state[place] = sorted((name, os.stat(os.path.join(place, name)).st_mtime) for name in os.listdir(place))
        else:
            state[place] = os.path.exists(place)
    return state


@pytest.fixture(scope="module")
def far(local_s3, tmp_path_factory):
    """One proxy (30 ms, 20 MB/s) in front of the session's server, and a bucket with a 12 MiB object."""
    _require_nginx()
    direct = local_s3.settings(direct=True)
    proxy = FarProxy(direct.endpoint_url or "", str(tmp_path_factory.mktemp("far") / "proxy"),
                     FarProfile(latency_ms=LATENCY_MS, rate_mb_s=RATE_MB_S))
    endpoint = proxy.start()
    s3 = s3_client(direct)
    bucket = make_bucket(s3, f"far-{uuid.uuid4().hex[:8]}")
    data = os.urandom(BIG)
    s3.put_object(Bucket=bucket, Key="big.bin", Body=data)
    yield {"proxy": proxy, "settings": dataclasses.replace(direct, endpoint_url=endpoint), "direct": s3,
           "bucket": bucket, "data": data}
    remove_bucket(s3, bucket)
    proxy.stop()


def test_every_request_waits_at_least_the_latency_before_its_first_byte(far):
    s3 = s3_client(far["settings"])
    s3.head_object(Bucket=far["bucket"], Key="big.bin")  # the connection is open: only the wait remains
    firsts = []
    for _ in range(5):
        start = time.perf_counter()
        body = s3.get_object(Bucket=far["bucket"], Key="big.bin", Range="bytes=0-0")["Body"]
        assert body.read() == far["data"][:1]
        firsts.append(time.perf_counter() - start)
    assert min(firsts) >= LATENCY_MS / 1000, firsts


def test_one_connection_stays_under_the_cap(far):
    s3 = s3_client(far["settings"])
    start = time.perf_counter()
    data = s3.get_object(Bucket=far["bucket"], Key="big.bin")["Body"].read()
    rate = len(data) / (time.perf_counter() - start) / 1e6
    assert data == far["data"]
    assert rate <= RATE_MB_S * 1.08, f"one stream ran at {rate:.1f} MB/s past a {RATE_MB_S:g} MB/s cap"


def test_the_rate_cap_is_per_connection_not_shared_by_parallel_ranged_gets(far):
    """Six ranged GETs at once: each is held to the per-connection rate (a lower bound on its time, which load
    cannot break), all six are in flight together, and together they finish sooner than one shared cap would
    allow (a bound six times what they need).  How far parallel GETs scale is a benchmark's figure (the limit
    cells), not asserted here."""
    streams = 6
    part = BIG // streams
    s3 = s3_client(far["settings"])  # its pool holds 32 connections

    def get(i: int) -> tuple[bytes, float, float]:
        started = time.perf_counter()
        body = s3.get_object(Bucket=far["bucket"], Key="big.bin",
                             Range=f"bytes={i * part}-{(i + 1) * part - 1}")["Body"].read()
        return body, started, time.perf_counter()

    with ThreadPoolExecutor(streams) as pool:
        list(pool.map(get, range(streams)))  # open the connections
        started = time.perf_counter()
        results = list(pool.map(get, range(streams)))
        elapsed = time.perf_counter() - started
    # One cap shared by all six could not move the whole object faster than this (6 x what each needs alone).
    assert elapsed < BIG / (RATE_MB_S * 1e6), f"{streams} GETs took {elapsed:.2f} s: as if they shared one cap"
    assert b"".join(body for body, _, _ in results) == far["data"]
    for body, started, ended in results:
        assert ended - started >= 0.9 * len(body) / (RATE_MB_S * 1e6), "a GET ran faster than the per-connection cap"
    last_start, first_end = max(r[1] for r in results), min(r[2] for r in results)
    assert last_start < first_end, "the six GETs were not in flight at the same time"


def test_boto3_through_the_proxy_keeps_sigv4_uploads_ranges_and_listing_intact(far):
    from boto3.s3.transfer import TransferConfig

    s3 = s3_client(far["settings"])
    key = "up/odd key+=&é.bin"
    payload = os.urandom(6 * 1024 * 1024 + 17)
    # Multipart upload (3 parts) through the proxy: every part's signature must survive it.
    config = TransferConfig(multipart_threshold=2 * 1024 * 1024, multipart_chunksize=2 * 1024 * 1024)
    s3.upload_fileobj(io.BytesIO(payload), far["bucket"], key, Config=config)
    assert far["direct"].get_object(Bucket=far["bucket"], Key=key)["Body"].read() == payload
    got = s3.get_object(Bucket=far["bucket"], Key=key, Range="bytes=1000-1999")
    assert got["ContentRange"] == f"bytes 1000-1999/{len(payload)}" and got["Body"].read() == payload[1000:2000]
    listed = [obj["Key"] for obj in s3.list_objects_v2(Bucket=far["bucket"], Prefix="up/")["Contents"]]
    assert listed == [key]
    wrong = s3_client(dataclasses.replace(far["settings"], secret_access_key="not-the-secret"))
    with pytest.raises(Exception, match="SignatureDoesNotMatch|AccessDenied|403"):
        wrong.head_object(Bucket=far["bucket"], Key=key)


def test_a_mount_through_the_proxy_reads_the_same_bytes(far, s3_env, monkeypatch, mount_root):
    require_fuse()
    monkeypatch.setenv("AWS_ENDPOINT_URL", far["settings"].endpoint_url)
    spec = MountSpec(uri=f"s3://{far['bucket']}/", mount_dir=str(mount_root / "m"), backend="s3fs")
    with Mount(spec) as m:
        path = os.path.join(m.path, "big.bin")
        with open(path, "rb") as f:
            f.seek(5 * 1024 * 1024 + 3)
            assert f.read(4096) == far["data"][5 * 1024 * 1024 + 3:][:4096]
            f.seek(0)
            assert hashlib.sha256(f.read()).digest() == hashlib.sha256(far["data"]).digest()


def test_a_stopped_proxy_leaves_no_process_no_files_and_no_temporary_workdir(local_s3, tmp_path):
    _require_nginx()
    before = _system_state()
    workdir = tmp_path / "far"
    with FarProxy(local_s3.settings(direct=True).endpoint_url or "", str(workdir)) as endpoint:
        proxy = FarProxy(endpoint, str(workdir))  # another handle on the same workdir sees it running
        master = json.loads((workdir / "far-proxy.json").read_text())["process"]["pid"]
        assert proxy.endpoint_url == endpoint and len(_nginx_in_session(master)) >= 2  # master and a worker
    assert not _nginx_in_session(master)
    assert not workdir.exists()
    assert _system_state() == before


def test_cli_far_profile_points_env_at_the_proxy_and_stop_ends_both(tmp_path):
    _require_nginx()
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("AWS_")}, "MOUNTCTL_HOME": str(tmp_path / "home")}

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(MOUNTCTL + list(args), env=env, capture_output=True, text=True, timeout=90)

    try:
        started = run("local-s3", "start", "--profile", "far", "--latency-ms", "25", "--rate-mb-s", "80")
        assert started.returncode == 0, started.stderr
        status = json.loads(run("local-s3", "status", "--json").stdout)
        assert status["profile"] == "far" and status["far"] == {"latency_ms": 25.0, "rate_mb_s": 80.0, "slowdown_pct": 0.0}
        assert status["endpoint"] != status["server_endpoint"]
        exports = run("local-s3", "env").stdout
        assert f"AWS_ENDPOINT_URL={status['endpoint']}" in exports
        master = json.loads((tmp_path / "home" / "local-s3" / "far-proxy" / "far-proxy.json").read_text())
        assert _nginx_in_session(master["process"]["pid"])
    finally:
        stopped = run("local-s3", "stop")
    assert stopped.returncode == 0, stopped.stderr
    assert run("local-s3", "status").returncode == 3
    assert not _nginx_in_session(master["process"]["pid"])
    assert not (tmp_path / "home" / "local-s3" / "far-proxy").exists()
