"""The embedded local S3 leaves nothing behind: its files stay in its state dir, `mountctl cleanup`
clears what an old one left in /tmp, and a command that started it for itself stops it again."""

from __future__ import annotations

import os
import socket
import subprocess
import tempfile

import boto3

from mountctl.local_s3.server import LocalS3, sweep_stray_server_files, uri_or_embedded
from mountctl.s3 import client as s3_client

from conftest import missing, server_files_in_tmp, server_ports


def _dead_pid() -> int:
    child = subprocess.Popen(["true"])
    child.wait()
    return child.pid


def test_local_s3_start_and_stop_leave_nothing_in_tmp_and_log_in_the_state_dir(tmp_path):
    server = LocalS3(str(tmp_path / "local-s3"))
    try:
        server.weed()
    except Exception as exc:
        missing(f"the local S3 server cannot start: {exc}")
    before = set(os.listdir("/tmp"))
    server.start(buckets=())
    pid, ports = server.status().pid, server_ports(server)
    try:
        written_while_running = server_files_in_tmp(pid, ports)
        logs = os.listdir(os.path.join(server.dir, "logs"))
        # The sweep that `mountctl cleanup` runs keeps the files of a weed that is running.
        beside = tmp_path / "tmp"
        beside.mkdir()
        (beside / f"weed.host.user.log.INFO.20260101-000000.{pid}").write_text("running")
        assert sweep_stray_server_files(str(beside)) == []
    finally:
        server.stop()
    new_weed_entries = sorted(n for n in set(os.listdir("/tmp")) - before if n.startswith(("weed.", "seaweedfs-")))

    # Another checkout's tests may run a weed beside this one: count only what this server wrote.
    assert server_files_in_tmp(pid, ports) == [], f"new weed entries in /tmp: {new_weed_entries}"
    assert [n for n in written_while_running if n.startswith("weed.")] == [], "glog files went to /tmp"
    assert any(n.startswith("weed.") and n.endswith(f".{pid}") for n in logs), logs


def test_cleanup_sweep_removes_what_a_gone_weed_left_in_tmp(tmp_path):
    """Fake leftovers in a private dir stand in for /tmp: an old weed's files cannot be made on demand."""
    dead = _dead_pid()
    log = tmp_path / f"weed.host.user.log.INFO.20260101-000000.{dead}"
    log.write_text("old")
    (tmp_path / "weed.INFO").symlink_to(log.name)
    stale_socket = tmp_path / "seaweedfs-filer-grpc-28888.sock"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.bind(str(stale_socket))  # the file stays after close, and nobody answers it
    unrelated = tmp_path / "weed.notes.txt"
    unrelated.write_text("not weed's")

    removed = sweep_stray_server_files(str(tmp_path))

    assert sorted(os.path.basename(p) for p in removed) == sorted([log.name, "weed.INFO", stale_socket.name])
    assert os.listdir(tmp_path) == [unrelated.name]


def test_without_a_uri_a_command_starts_the_embedded_s3_points_aws_at_it_and_stops_it(tmp_path, monkeypatch):
    monkeypatch.setenv("MOUNTCTL_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("AWS_SESSION_TOKEN", "from-real-aws")
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", "http://127.0.0.1:9/")
    monkeypatch.delenv("AWS_ACCESS_KEY_ID", raising=False)
    server = LocalS3()
    try:
        server.weed()
    except Exception as exc:
        missing(f"the local S3 server cannot start: {exc}")
    messages = tmp_path / "messages.txt"
    with open(messages, "w") as out, uri_or_embedded(None, "s3://made-here/bench/", out=out) as uri:
        assert uri == "s3://made-here/bench/"
        status = server.status()
        assert status.running
        assert os.environ["AWS_ENDPOINT_URL_S3"] == status.endpoint_url and "AWS_SESSION_TOKEN" not in os.environ
        boto3.client("s3").head_bucket(Bucket="made-here")  # the standard chain reaches it
        pid, ports = status.pid, server_ports(server)
    assert not server.status().running
    assert server_files_in_tmp(pid, ports) == []
    assert os.environ["AWS_SESSION_TOKEN"] == "from-real-aws" and os.environ["AWS_ENDPOINT_URL_S3"] == "http://127.0.0.1:9/"
    assert "AWS_ACCESS_KEY_ID" not in os.environ
    assert "started it; stopping it at the end" in messages.read_text()


def test_without_a_uri_a_running_embedded_s3_is_used_and_left_running(local_s3):
    with uri_or_embedded(None, "s3://mountctl/bench/") as uri:
        assert uri == "s3://mountctl/bench/" and os.environ["AWS_ENDPOINT_URL"] == local_s3.status().endpoint_url
    assert local_s3.status().running


def test_a_given_uri_is_used_as_it_is_and_nothing_starts(tmp_path, monkeypatch):
    monkeypatch.setenv("MOUNTCTL_HOME", str(tmp_path / "home"))
    with uri_or_embedded("s3://mine/data/", "s3://mountctl/bench/") as uri:
        assert uri == "s3://mine/data/"
    assert not (tmp_path / "home" / "local-s3" / "server.json").exists()


def test_a_state_dir_too_deep_for_a_unix_socket_still_serves_and_leaves_nothing(tmp_path):
    """A socket path over 107 bytes cannot be bound: weed's sockets then go to a private dir of ours in /tmp."""
    deep = tmp_path / ("d" * 60) / ("e" * 60) / "local-s3"
    server = LocalS3(str(deep))
    try:
        server.weed()
    except Exception as exc:
        missing(f"the local S3 server cannot start: {exc}")
    server.start(buckets=("deep",))
    try:
        s3 = s3_client(server.settings())
        s3.put_object(Bucket="deep", Key="k", Body=b"v")
        assert s3.get_object(Bucket="deep", Key="k")["Body"].read() == b"v"
        tmp = tempfile.gettempdir()  # the tests run with a TMPDIR of their own
        short = [os.path.join(tmp, n) for n in os.listdir(tmp) if n.startswith(f"mountctl-{os.getuid()}-")
                 and os.path.exists(os.path.join(tmp, n, "filer.sock"))]
        assert short and all(os.stat(path).st_mode & 0o077 == 0 for path in short)
    finally:
        server.stop()
    assert not any(os.path.exists(path) for path in short)


def test_a_port_taken_before_weed_binds_it_is_tried_again_on_other_ports(tmp_path, monkeypatch):
    """Another server binding a port between our check and weed's own bind cannot be timed on demand, so the
    first port chosen is one this test holds, which the real weed then finds taken, as it would in that race."""
    from mountctl.local_s3 import server as server_module

    server = LocalS3(str(tmp_path / "local-s3"))
    try:
        server.weed()
    except Exception as exc:
        missing(f"the local S3 server cannot start: {exc}")
    held = socket.socket()
    held.bind(("127.0.0.1", 0))
    held.listen()
    taken = held.getsockname()[1]
    real, handed = server_module._free_port_pair, []

    def first_one_taken() -> int:
        handed.append(taken if not handed else real())
        return handed[-1]

    monkeypatch.setattr(server_module, "_free_port_pair", first_one_taken)
    try:
        server.start(buckets=())
        try:
            assert taken not in server_ports(server)
            boto3_client = s3_client(server.settings(direct=True))
            assert boto3_client.list_buckets()["Buckets"] == []
        finally:
            server.stop()
    finally:
        held.close()
    with open(server.log_path) as log:
        assert "start 1 exited; trying again on other ports" in log.read()
