"""The owner count of the shared local S3 server: who stops it, and when (the file logic; the race itself is
tests/test_orphans.py with real processes)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from mountctl.local_s3 import owners
from mountctl.processes import process_identity


def _gone_identity() -> dict:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    identity = process_identity(child.pid)
    child.wait(timeout=30)
    return identity


def test_the_last_holder_to_leave_stops_a_server_nobody_pinned(tmp_path):
    owners.join(str(tmp_path), fresh=True)
    assert owners.read_owners(str(tmp_path)).live == [process_identity()]
    assert owners.leave(str(tmp_path)) is True
    assert owners.read_owners(str(tmp_path)).owners == ()


def test_a_live_other_holder_keeps_it_running(tmp_path):
    other = process_identity(os.getppid())
    (tmp_path / "owners.json").write_text(json.dumps({"pinned": False, "owners": [other]}))
    owners.join(str(tmp_path), fresh=False)
    assert owners.leave(str(tmp_path)) is False
    assert owners.read_owners(str(tmp_path)).live == [other]


def test_a_holder_that_was_killed_does_not_count(tmp_path):
    (tmp_path / "owners.json").write_text(json.dumps({"pinned": False, "owners": [_gone_identity()]}))
    owners.join(str(tmp_path), fresh=False)
    assert owners.read_owners(str(tmp_path)).live == [process_identity()]
    assert owners.leave(str(tmp_path)) is True


def test_a_pinned_server_outlives_every_holder_until_unpinned(tmp_path):
    owners.pin(str(tmp_path))
    owners.join(str(tmp_path), fresh=False)
    assert owners.leave(str(tmp_path)) is False
    owners.pin(str(tmp_path), False)
    assert owners.read_owners(str(tmp_path)) == owners.Owners()


def test_the_file_is_private_and_a_damaged_one_reads_as_empty(tmp_path):
    owners.join(str(tmp_path), fresh=True)
    assert os.stat(tmp_path / "owners.json").st_mode & 0o777 == 0o600
    (tmp_path / "owners.json").write_text("{not json")
    assert owners.read_owners(str(tmp_path)) == owners.Owners()
