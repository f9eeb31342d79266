"""``Registry.claim``: the one transaction that reads a record, checks its supervisor and clears what a dead one left."""

from __future__ import annotations

from mountctl.processes import process_identity
from mountctl.shared.registry import MountRecord, Registry

DEAD = {"pid": 999_999_999, "create_time": 1.0}  # no such process: a supervisor that died


def _record(supervisor: dict) -> MountRecord:
    return MountRecord(uri="s3://b/", mount_dir="/m", spec={}, identity={}, supervisor=supervisor)


def test_a_claim_yields_the_record_of_a_live_supervisor_and_clears_nothing(tmp_path):
    registry = Registry(str(tmp_path))
    registry.write(_record(process_identity()))  # alive: this process
    with registry.claim("/m") as claim:
        assert claim.record is not None and claim.record.supervised() and not claim.cleared
    assert registry.read("/m") is not None and registry.live("/m") is not None


def test_a_claim_clears_a_dead_supervisor_s_record_before_the_caller_sees_it(tmp_path):
    registry = Registry(str(tmp_path))
    registry.write(_record(DEAD))
    assert registry.live("/m") is None  # a glance sees no owner, and clears nothing
    assert registry.read("/m") is not None
    with registry.claim("/m") as claim:
        assert claim.record is None and claim.cleared
    assert registry.read("/m") is None


def test_a_claim_on_an_empty_directory_yields_nothing_and_cleared_nothing(tmp_path):
    with Registry(str(tmp_path)).claim("/m") as claim:
        assert claim.record is None and not claim.cleared


def test_clear_if_abandoned_leaves_a_live_supervisor_alone(tmp_path):
    registry = Registry(str(tmp_path))
    registry.write(_record(process_identity()))
    assert registry.clear_if_abandoned("/m") is False and registry.read("/m") is not None
    registry.write(_record(DEAD))
    assert registry.clear_if_abandoned("/m") is True and registry.read("/m") is None
