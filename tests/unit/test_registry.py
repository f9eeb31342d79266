"""The registry: a typed record per mount directory, changed only under its lock."""

from __future__ import annotations

import multiprocessing
import os
import subprocess
import sys
import threading

import pytest

from mountctl.errors import RegistryError
from mountctl.mounts.spec import MountSpec
from mountctl.processes import process_identity
from mountctl.s3 import S3Settings
from mountctl.shared.client import acquire, sharing_identity
from mountctl.shared.registry import MAX_EVENTS, MountRecord, Registry
from mountctl.shared.supervisor import _published, _stopping_as_nobody_holds


def _record(mount_dir: str = "/m") -> MountRecord:
    return MountRecord(uri="s3://b/", mount_dir=mount_dir, spec={}, identity={})


def test_record_round_trips_through_json(tmp_path):
    registry = Registry(str(tmp_path))
    registry.write(_record().replace(holders=({"pid": 1, "create_time": 2.0},), state="mounted"))
    again = registry.read("/m")
    assert again is not None and again.state == "mounted" and again.holders == ({"pid": 1, "create_time": 2.0},)


def test_unknown_state_is_refused():
    with pytest.raises(RegistryError, match="unknown state"):
        MountRecord(uri="s3://b/", mount_dir="/m", spec={}, identity={}, state="sleeping")  # type: ignore[arg-type]


def _bump_many(directory: str, count: int) -> None:
    registry = Registry(directory)
    for _ in range(count):
        registry.modify("/m", lambda r: r.replace(restarts=r.restarts + 1))


def test_concurrent_changes_from_threads_and_processes_are_never_lost(tmp_path):
    registry = Registry(str(tmp_path))
    registry.write(_record())
    context = multiprocessing.get_context("spawn")
    processes = [context.Process(target=_bump_many, args=(str(tmp_path), 25)) for _ in range(2)]
    threads = [threading.Thread(target=_bump_many, args=(str(tmp_path), 25)) for _ in range(3)]
    for worker in [*processes, *threads]:
        worker.start()
    for worker in [*processes, *threads]:
        worker.join(timeout=60)
    assert registry.read("/m").restarts == 5 * 25


def test_concurrent_event_publishes_keep_every_event(tmp_path):
    """The supervisor's own publish path, from several threads (the watchdog and the main loop)."""
    registry = Registry(str(tmp_path))
    registry.write(_record())
    mount = type("MountFacts", (), {"restarts": 0, "pid": 7, "backend": "rclone", "log_path": None, "cache": None, "cache_note": "",
                                    "program_version": "rclone v1", "memory_mb": None, "memory_note": ""})()

    def publish(thread: int) -> None:
        for n in range(MAX_EVENTS // 4):
            registry.modify("/m", _published(mount, {"time": 0.0, "event": "slow", "detail": f"{thread}-{n}"}))

    threads = [threading.Thread(target=publish, args=(t,)) for t in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    details = {event["detail"] for event in registry.read("/m").events}
    assert len(details) == MAX_EVENTS


def test_lock_wait_is_bounded(tmp_path):
    registry = Registry(str(tmp_path))
    with registry.locked("/m"):
        with pytest.raises(RegistryError, match="stayed busy") as info:
            with Registry(str(tmp_path)).locked("/m", timeout_s=0.2):
                pass
    assert info.value.timeout_s == 0.2


def test_a_join_after_the_supervisors_last_look_waits_for_a_new_mount(tmp_path):
    """Forced interleaving: the supervisor finds nobody holding the mount, and a job joins before the supervisor
    marks the record `stopping`.  That window was microseconds wide between two holds of the lock, so no run of
    real parts lands in it on demand.  This process stands in for the supervisor (alive; it never mounts), so the
    test needs no S3 server and no FUSE.  The joiner must not be told "mounted" about the mount being taken down:
    it waits, and joins the next mount once one is up."""
    registry = Registry(str(tmp_path))
    settings = S3Settings(endpoint_url="http://127.0.0.1:9", region="us-east-1", access_key_id="k",
                          secret_access_key="s")
    spec = MountSpec(uri="s3://bucket/", mount_dir=str(tmp_path / "m"), backend="rclone")
    identity = sharing_identity(spec, settings)
    ending = MountRecord(uri=spec.uri, mount_dir=spec.mount_dir, spec=spec.to_dict(), identity=identity,
                         state="mounted", supervisor=process_identity(os.getpid()), program_pid=1)
    registry.write(ending)
    assert _stopping_as_nobody_holds(registry, spec.mount_dir)  # the supervisor's last look: it goes on to stop the mount
    joined: list[object] = []
    joiner = threading.Thread(target=lambda: joined.append(acquire(spec, settings=settings, registry=registry)),
                              daemon=True)
    joiner.start()
    joiner.join(timeout=1.0)
    try:
        assert not joined and registry.read(spec.mount_dir).holders == (), "joined a mount that is being taken down"
    finally:
        # The old mount is gone and another supervisor (a stand-in process) has mounted anew.
        new_supervisor = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
        registry.write(ending.replace(supervisor=process_identity(new_supervisor.pid), program_pid=2))
        joiner.join(timeout=10)
        new_supervisor.kill()
        new_supervisor.wait(timeout=10)
    record = registry.read(spec.mount_dir)
    assert joined and record.program_pid == 2 and len(record.holders) == 1
    joined[0].release(wait=False)
