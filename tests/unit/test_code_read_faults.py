"""Races and ignored failures found by reading the code, each pinned by the case that used to go wrong.

Stand-ins are used where no real component produces the case on demand: a supervisor whose
registry lock is busy at shutdown, a mount whose forced clear fails.
"""

from __future__ import annotations

import os
import sys
import threading
import time

import pytest

from mountctl import Mount, MountSpec, StaleMount, paths
from mountctl.mounts.fusectl import UnmountResult
from mountctl.mounts.mounttable import MountEntry
from mountctl.processes import process_identity
from mountctl.shared.registry import MountRecord, Registry, clear_abandoned
from mountctl.shared.supervisor import shut_down


def test_node_key_is_never_read_empty_or_short_while_another_process_writes_it(tmp_path, monkeypatch):
    monkeypatch.setenv("MOUNTCTL_HOME", str(tmp_path))
    path = os.path.join(paths.private_dir(), "node.key")
    open(path, "wb").close()  # what a writer of the old kind leaves for a moment: the file, empty
    key = os.urandom(32)

    def finish_writing() -> None:
        time.sleep(0.2)
        with open(path, "wb") as f:
            f.write(key)

    writer = threading.Thread(target=finish_writing)
    writer.start()
    try:
        assert paths.node_key() == key
    finally:
        writer.join()


def test_node_key_made_by_racing_threads_is_one_full_key(tmp_path, monkeypatch):
    monkeypatch.setenv("MOUNTCTL_HOME", str(tmp_path))
    keys: list[bytes] = []
    threads = [threading.Thread(target=lambda: keys.append(paths.node_key())) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(set(keys)) == 1 and len(keys[0]) == 32
    assert sorted(os.listdir(paths.private_dir())) == ["node.key"]  # no temp file left


def test_a_damaged_node_key_is_an_error_that_says_what_to_do(tmp_path, monkeypatch):
    monkeypatch.setenv("MOUNTCTL_HOME", str(tmp_path))
    with open(os.path.join(paths.private_dir(), "node.key"), "wb") as f:
        f.write(b"short")
    with pytest.raises(Exception, match="remove it"):
        paths.node_key(wait_s=0.1)


def _record(mount_dir: str, supervisor: dict) -> MountRecord:
    return MountRecord(uri="s3://b/", mount_dir=mount_dir, spec={}, identity={}, supervisor=supervisor)


def test_clearing_abandoned_mounts_never_clears_one_whose_supervisor_lives(tmp_path):
    """doctor/cleanup checked liveness before taking the lock: a mount started meanwhile was cleared."""
    registry = Registry(str(tmp_path))
    registry.write(_record("/m", process_identity()))  # a supervisor that is alive: this process
    with registry.locked("/m"):
        assert clear_abandoned("/m", registry.read("/m"), registry) is False
    assert registry.read("/m") is not None
    registry.write(_record("/m", {"pid": 999_999_999, "create_time": 1.0}))
    with registry.locked("/m"):
        assert clear_abandoned("/m", registry.read("/m"), registry) is True
    assert registry.read("/m") is None


def test_supervisor_shutdown_stops_the_mount_and_removes_its_record_whatever_fails(tmp_path, monkeypatch):
    registry = Registry(str(tmp_path))
    registry.write(_record("/m", process_identity()))
    stopped = []

    class Failing:
        def stop(self) -> None:
            stopped.append(True)
            raise OSError("fusermount3 failed")

    def busy(*_a, **_k):
        raise TimeoutError("registry lock busy")

    monkeypatch.setattr(registry, "update", busy)
    with pytest.raises(OSError, match="fusermount3"):
        shut_down(registry, "/m", Failing())
    assert stopped and registry.read("/m") is None


def test_mount_stop_says_so_when_the_forced_clear_fails(tmp_path, monkeypatch):
    mount_module = sys.modules["mountctl.mounts.mount"]

    entry = MountEntry(mount_id=1, device="0:99", mount_point=str(tmp_path / "m"), fs_type="fuse.rclone",
                       source="r:", options="rw")
    monkeypatch.setattr(mount_module, "find_mount", lambda path: entry)
    monkeypatch.setattr(mount_module, "unmount", lambda path, **_: UnmountResult(False, False, "permission denied"))
    monkeypatch.setattr(mount_module, "force_clear", lambda path, **_: UnmountResult(False, False, "still busy"))
    m = Mount(MountSpec(uri="s3://bucket/", mount_dir=str(tmp_path / "m"), backend="rclone"), guard=None)
    m._workdir = str(tmp_path / "work")
    os.makedirs(m._workdir)
    with pytest.raises(StaleMount, match="still busy"):
        m.stop()
    assert [e["event"] for e in m.events] == ["unmount-failed"]
