"""Servers end with their owners: nginx after SIGKILL of its master or its owner, and the shared local S3 held
by two runs at once.  Real nginx, real weed, real processes killed with SIGKILL."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import psutil
import pytest

from mountctl.errors import LocalS3Error
from mountctl.local_s3.far_proxy import FarProfile, FarProxy, find_nginx
from mountctl.local_s3.orphans import stop_orphans
from mountctl.local_s3.server import LocalS3

from conftest import missing

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _require_nginx() -> None:
    if find_nginx() is None:
        missing("nginx is not installed (apt-get install nginx-light libnginx-mod-http-lua)")


def _nginx_in(workdir: str) -> list[psutil.Process]:
    found = []
    for process in psutil.process_iter(["name"]):
        try:
            if process.info["name"] == "nginx" and process.cwd() == workdir:
                found.append(process)
        except psutil.Error:
            continue
    return found


def _answers(endpoint: str) -> bool:
    import urllib.error
    import urllib.request

    try:
        urllib.request.urlopen(endpoint + "/", timeout=2)
    except urllib.error.HTTPError:
        return True  # an S3 error page: something serves the port
    except OSError:
        return False
    return True


def _until(condition, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"{what} within {timeout_s:g}s"
        time.sleep(0.1)


def _python(code: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    environment = {**os.environ, "PYTHONPATH": ROOT, **(env or {})}
    return subprocess.Popen([sys.executable, "-c", textwrap.dedent(code)], env=environment, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


@pytest.fixture
def proxy_workdir(local_s3, tmp_path):
    _require_nginx()
    workdir = str(tmp_path / "far")
    yield workdir
    for process in _nginx_in(workdir):  # whatever a failed test left
        process.kill()


def test_stop_after_sigkill_of_the_master_leaves_no_worker_serving(local_s3, proxy_workdir):
    proxy = FarProxy(local_s3.settings(direct=True).endpoint_url or "", proxy_workdir, FarProfile(latency_ms=0))
    endpoint = proxy.start()
    master = json.loads(open(os.path.join(proxy_workdir, "far-proxy.json")).read())["process"]["pid"]
    os.kill(master, signal.SIGKILL)
    _until(lambda: not psutil.pid_exists(master) or psutil.Process(master).status() == psutil.STATUS_ZOMBIE,
           10, "the master did not die")
    assert _answers(endpoint), "nginx's workers should still serve after their master's SIGKILL"
    FarProxy(local_s3.settings(direct=True).endpoint_url or "", proxy_workdir).stop()  # another handle, as the CLI
    assert not _nginx_in(proxy_workdir)
    assert not _answers(endpoint)
    assert not os.path.exists(proxy_workdir)


def test_cleanup_stops_the_workers_of_a_proxy_whose_master_was_killed(local_s3, proxy_workdir, tmp_path):
    proxy = FarProxy(local_s3.settings(direct=True).endpoint_url or "", proxy_workdir, FarProfile(latency_ms=0))
    endpoint = proxy.start(outlive_owner=True)
    master = json.loads(open(os.path.join(proxy_workdir, "far-proxy.json")).read())["process"]["pid"]
    assert stop_orphans([str(tmp_path)]) == []  # a live proxy is no orphan
    os.kill(master, signal.SIGKILL)
    _until(lambda: not psutil.pid_exists(master) or psutil.Process(master).status() == psutil.STATUS_ZOMBIE,
           10, "the master did not die")
    cleared = stop_orphans([str(tmp_path)])
    assert any(proxy_workdir in line and "master" in line for line in cleared), cleared
    assert not _nginx_in(proxy_workdir) and not _answers(endpoint)


def test_a_proxy_ends_with_its_owner_killed_by_sigkill(local_s3, proxy_workdir):
    owner = _python(f"""
        import time
        from mountctl.local_s3.far_proxy import FarProfile, FarProxy
        endpoint = FarProxy({local_s3.settings(direct=True).endpoint_url!r}, {proxy_workdir!r},
                            FarProfile(latency_ms=0)).start()
        print(endpoint, flush=True)
        time.sleep(300)
    """)
    try:
        endpoint = owner.stdout.readline().strip()  # type: ignore[union-attr]
        assert endpoint.startswith("http://"), owner.stderr.read()  # type: ignore[union-attr]
        assert _answers(endpoint)
    finally:
        owner.kill()
        owner.wait(timeout=30)
    _until(lambda: not _nginx_in(proxy_workdir), 30, "nginx outlived its SIGKILLed owner")
    assert not _answers(endpoint)


_HOLDER = """
    import os, sys, time
    import boto3
    from mountctl.local_s3.server import uri_or_embedded
    name, flags = os.environ["NAME"], os.environ["FLAGS"]
    with uri_or_embedded(None, "s3://mountctl/race/"):
        open(os.path.join(flags, name + ".in"), "w").close()
        deadline = time.monotonic() + 240
        while not os.path.exists(os.path.join(flags, name + ".go")):
            assert time.monotonic() < deadline, "never released"
            time.sleep(0.05)
        boto3.client("s3").list_buckets()  # the server still answers this run
        print("answered", flush=True)
"""


def test_two_runs_starting_the_shared_server_at_once_keep_it_until_the_last_ends(tmp_path):
    home, flags = str(tmp_path / "home"), tmp_path / "flags"
    flags.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update(MOUNTCTL_HOME=home, FLAGS=str(flags))
    runs = {name: subprocess.Popen([sys.executable, "-c", textwrap.dedent(_HOLDER)], text=True,
                                   env={**env, "NAME": name, "PYTHONPATH": ROOT},
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE) for name in ("a", "b")}
    server = LocalS3(os.path.join(home, "local-s3"))
    try:
        _until(lambda: all((flags / f"{n}.in").exists() or runs[n].poll() is not None for n in runs), 120,
               "both runs did not get the server")
        assert all(run.poll() is None for run in runs.values()), {n: r.stderr.read() for n, r in runs.items()}
        (flags / "a.go").touch()
        out, err = runs["a"].communicate(timeout=120)
        assert runs["a"].returncode == 0 and "answered" in out, err
        assert server.status().running, "the first run to end stopped the server under the other"
        (flags / "b.go").touch()
        out, err = runs["b"].communicate(timeout=120)
        assert runs["b"].returncode == 0 and "answered" in out, err
        assert not server.status().running, "the last run to end should stop the server it started"
    finally:
        for run in runs.values():
            if run.poll() is None:
                run.kill()
                run.wait(timeout=30)
        server.stop()


def test_cleanup_stops_a_server_whose_only_holder_was_killed_and_refuses_a_profile_change_while_held(tmp_path):
    _require_nginx()
    home, flags = str(tmp_path / "home"), tmp_path / "flags"
    flags.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update(MOUNTCTL_HOME=home, FLAGS=str(flags), NAME="a", PYTHONPATH=ROOT)
    holder = subprocess.Popen([sys.executable, "-c", textwrap.dedent(_HOLDER)], text=True, env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    server = LocalS3(os.path.join(home, "local-s3"))
    try:
        _until(lambda: (flags / "a.in").exists() or holder.poll() is not None, 120, "the run did not get the server")
        assert holder.poll() is None, holder.stderr.read()  # type: ignore[union-attr]
        server.start_far(FarProfile(latency_ms=0, rate_mb_s=0))
        with pytest.raises(LocalS3Error, match=f"pid {holder.pid}"):
            server.start_far(FarProfile(latency_ms=0, rate_mb_s=10))
        with pytest.raises(LocalS3Error, match=f"pid {holder.pid}"):
            server.stop_far()
        assert stop_orphans([str(tmp_path)]) == []  # held by a live run
        pid = server.status().pid
        holder.kill()
        holder.wait(timeout=30)
        cleared = stop_orphans([str(tmp_path)])
        assert any("local S3 server" in line and str(pid) in line for line in cleared), cleared
        assert not server.status().running
        assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait(timeout=30)
        server.stop()
