"""The local S3 server keeps its files in its state dir, and `mountctl cleanup` clears what an old one left in /tmp."""

from __future__ import annotations

import os
import socket
import subprocess

from mountctl.local_s3 import LocalS3, sweep_stray_server_files

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
