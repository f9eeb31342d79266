"""The node's read-ahead budget reads the ranks where torchrun and SLURM state them, and the memory its cgroup allows.

The cgroup cases are files in a temporary directory laid out as /proc and /sys: a fake, because no real cgroup can
be made with a chosen limit on demand (it needs a delegated hierarchy, which CI machines do not give).
"""

from __future__ import annotations

import os

import pytest

from mountctl.pytorch.data.read_ahead.budget import cgroup_memory_limit, memory_for_readers, ranks_on_node

GIB = 1 << 30


@pytest.mark.parametrize(("environ", "ranks"), [
    ({}, 1),
    ({"LOCAL_WORLD_SIZE": "8", "SLURM_NTASKS_PER_NODE": "4"}, 8),  # torchrun's own count first
    ({"SLURM_NTASKS_PER_NODE": "4"}, 4),
    ({"SLURM_TASKS_PER_NODE": "4(x2),3", "SLURM_NODEID": "2"}, 3),  # this node's entry of the compressed list
    ({"SLURM_TASKS_PER_NODE": "4(x2),3"}, 4),  # the node unknown: the largest, so the budget still holds
    ({"SLURM_STEP_TASKS_PER_NODE": "2", "SLURM_TASKS_PER_NODE": "8"}, 2),  # the step's own tasks
    ({"SLURM_NTASKS": "16", "SLURM_NNODES": "3"}, 6),
    ({"SLURM_LOCALID": "5"}, 6),  # task 5 on this node: at least six ranks
    ({"SLURM_NTASKS_PER_NODE": "2", "SLURM_LOCALID": "3"}, 4),
    ({"SLURM_TASKS_PER_NODE": "garbled"}, 1),
])
def test_the_ranks_on_a_node_are_read_from_torchrun_then_slurm(environ, ranks):
    assert ranks_on_node(environ) == ranks


def _cgroup_root(tmp_path, membership: str, files: dict[str, str]) -> str:
    (tmp_path / "proc/self").mkdir(parents=True)
    (tmp_path / "proc/self/cgroup").write_text(membership)
    for path, text in files.items():
        target = tmp_path / "sys/fs/cgroup" / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text + "\n")
    return str(tmp_path)


def test_a_cgroup_v2_limit_is_the_smallest_memory_max_up_its_hierarchy(tmp_path):
    root = _cgroup_root(tmp_path, "0::/slurm/job_7/step_0\n", {
        "slurm/memory.max": str(8 * GIB), "slurm/job_7/memory.max": str(2 * GIB),
        "slurm/job_7/step_0/memory.max": "max"})
    assert cgroup_memory_limit(root) == 2 * GIB
    assert memory_for_readers(root) == min(2 * GIB, os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))


def test_a_cgroup_v1_limit_is_read_from_the_memory_controller(tmp_path):
    root = _cgroup_root(tmp_path, "12:cpu,cpuacct:/docker/abc\n4:memory:/docker/abc\n", {
        "memory/docker/abc/memory.limit_in_bytes": str(3 * GIB),
        "cpu,cpuacct/docker/abc/memory.limit_in_bytes": str(1 * GIB)})  # another controller's file: not read
    assert cgroup_memory_limit(root) == 3 * GIB


def test_no_cgroup_limit_leaves_physical_memory(tmp_path):
    root = _cgroup_root(tmp_path, "4:memory:/\n0::/\n", {
        "memory/memory.limit_in_bytes": "9223372036854771712", "memory.max": "max"})  # both say "no limit"
    assert cgroup_memory_limit(root) is None
    assert cgroup_memory_limit(str(tmp_path / "nowhere")) is None
    assert memory_for_readers(root) == os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def test_the_in_memory_read_ahead_is_sized_by_the_cgroups_limit_not_the_machines(tmp_path, monkeypatch):
    """A 1 GiB container on a large machine: 1/16 of it is 64 MiB, the shard decoded and one ahead."""
    from mountctl.pytorch.data.read_ahead import next_shards

    root = _cgroup_root(tmp_path, "0::/box\n", {"box/memory.max": str(GIB)})
    monkeypatch.setattr(next_shards, "memory_for_readers", lambda: memory_for_readers(root))
    assert next_shards.in_memory_ahead(1).shards == 1
