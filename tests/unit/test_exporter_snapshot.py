"""The exporter's snapshot: scrapes read the registry and the last probe round, and never probe themselves.

``probe_figures`` is counted through a wrapper around the real function (the probe itself runs as
always); the exporter under real load, with a real mount, is tests/test_exporter_load.py.
"""

from __future__ import annotations

import os
import time

from mountctl.observability import snapshot as snapshot_module
from mountctl.observability.exporter import readiness
from mountctl.observability.snapshot import StatusSnapshot
from mountctl.processes import process_identity
from mountctl.shared.registry import MountRecord, Registry


def _mounted(tmp_path) -> MountRecord:
    return MountRecord(uri="s3://data/", mount_dir=str(tmp_path / "m"), spec={}, identity={}, state="mounted",
                       backend="s3fs", supervisor=process_identity(), program_pid=os.getpid(), since=time.time())


def _registry(tmp_path, *, empty: bool = False) -> Registry:
    registry = Registry(str(tmp_path / "mounts"))
    os.makedirs(registry.dir)
    if not empty:
        registry.write(_mounted(tmp_path))
    return registry


def test_scrapes_serve_the_last_round_and_probe_nothing(tmp_path, monkeypatch):
    calls = []
    real = snapshot_module.probe_figures
    monkeypatch.setattr(snapshot_module, "probe_figures", lambda *a, **k: calls.append(a[0]) or real(*a, **k))
    snapshot = StatusSnapshot(timeout_s=1.0, interval_s=60, registry=_registry(tmp_path))
    first = snapshot.rows()
    assert first[0]["health"]["state"] == "unprobed" and readiness(first)[0]  # not probed yet is not broken
    snapshot.probe_round()
    for _ in range(100):
        rows = snapshot.rows()
    assert len(calls) == 1
    # Nothing is mounted at the record's directory: the round said so, and every scrape repeats it.
    assert rows[0]["health"]["state"] == "unmounted" and not rows[0]["up"] and not readiness(rows)[0]


def test_a_mount_program_that_died_is_seen_at_the_next_scrape_without_a_probe(tmp_path):
    registry = _registry(tmp_path)
    record = registry.records()[0]
    registry.write(record.replace(program_pid=2 ** 22 + 1))  # above pid_max's default: no such process
    snapshot = StatusSnapshot(timeout_s=1.0, interval_s=60, registry=registry)
    row = snapshot.rows()[0]
    assert row["health"]["state"] == "dead" and not readiness([row])[0]


def test_a_cache_is_walked_at_most_once_per_period(tmp_path):
    snapshot = StatusSnapshot(cache_walk_s=60)
    cache = tmp_path / "cache"
    cache.mkdir()
    (cache / "a").write_bytes(b"x" * 8192)
    first = snapshot._cache_bytes(str(cache))
    (cache / "b").write_bytes(b"x" * 8192)
    assert snapshot._cache_bytes(str(cache)) == first > 0


def test_a_new_mount_wakes_one_round_and_then_rounds_keep_the_interval(tmp_path):
    """A scrape that sees a mount no round covered wakes the prober once; the wake must not stay set, or every
    round after it runs each second (a probe process per mount per second) whatever ``interval_s`` says."""
    registry = _registry(tmp_path, empty=True)
    snapshot = StatusSnapshot(timeout_s=1.0, interval_s=60, registry=registry).start()
    try:
        deadline = time.monotonic() + 10
        while snapshot.rounds < 1:  # the first round, over no mount
            assert time.monotonic() < deadline, "the first round never ran"
            time.sleep(0.01)
        registry.write(_mounted(tmp_path))  # a mount appears between rounds
        assert snapshot.rows()[0]["health"]["state"] == "unprobed"
        while snapshot.rounds < 2:  # woken at once, not in 60 s
            assert time.monotonic() < deadline, "a new mount did not wake the prober"
            time.sleep(0.01)
        time.sleep(3.0)  # three times the floor between rounds, a twentieth of the interval
        assert snapshot.rounds == 2
    finally:
        snapshot.stop()
