"""What one machine gives its readers' read-ahead: how many ranks share it, and how much memory it may use.

Both are read where the launcher and the kernel state them, because a guess breaks the node's memory bound the
other way: torchrun states the ranks on a node (``LOCAL_WORLD_SIZE``), SLURM states them in several variables of
which any may be missing, and in a container or a SLURM job the memory that counts is the cgroup's limit, not the
machine's (a reader that sizes itself by physical memory is killed by the cgroup first).
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Mapping

__all__ = ["ranks_on_node", "memory_for_readers", "cgroup_memory_limit"]

_TASKS_ENTRY = re.compile(r"^(\d+)(?:\(x(\d+)\))?$")  # SLURM_TASKS_PER_NODE: "4(x2),3" = 4, 4, 3
_NO_LIMIT_V1 = 1 << 60  # cgroup v1 writes "no limit" as a page-rounded LONG_MAX


def _int(environ: Mapping[str, str], name: str) -> int | None:
    try:
        value = int(environ.get(name, "").strip())
    except ValueError:
        return None
    return value if value > 0 else None


def _tasks_per_node(text: str, node_id: int | None) -> int | None:
    """This node's count in SLURM's compressed list, or the largest when the node is unknown."""
    counts: list[int] = []
    for entry in text.split(","):
        match = _TASKS_ENTRY.match(entry.strip())
        if match is None:
            return None
        counts += [int(match.group(1))] * int(match.group(2) or 1)
    if not counts:
        return None
    if node_id is not None and 0 <= node_id < len(counts):
        return counts[node_id]
    return max(counts)


def ranks_on_node(environ: Mapping[str, str] | None = None) -> int:
    """The training ranks on this machine: torchrun's ``LOCAL_WORLD_SIZE``, else SLURM's per-node task count
    (``SLURM_NTASKS_PER_NODE``, then ``SLURM_STEP_TASKS_PER_NODE`` / ``SLURM_TASKS_PER_NODE`` for this node, then
    ``SLURM_NTASKS`` over ``SLURM_NNODES``), never fewer than ``SLURM_LOCALID + 1``; 1 when nothing says."""
    env = os.environ if environ is None else environ
    local = _int(env, "LOCAL_WORLD_SIZE")
    if local is not None:
        return local
    # SLURM_LOCALID is this task's index on the node: there are at least that many ranks before it
    at_least = (_int(env, "SLURM_LOCALID") or 0) + 1
    count = _int(env, "SLURM_NTASKS_PER_NODE")
    if count is None:
        node = env.get("SLURM_NODEID", "").strip()
        node_id = int(node) if node.isdigit() else None
        for name in ("SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE"):
            if env.get(name):
                count = _tasks_per_node(env[name], node_id)
                if count is not None:
                    break
    if count is None:
        tasks, nodes = _int(env, "SLURM_NTASKS"), _int(env, "SLURM_NNODES")
        if tasks is not None:
            count = math.ceil(tasks / (nodes or 1))
    return max(at_least, count or 1)


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="ascii") as f:
            return f.read().strip()
    except (OSError, UnicodeDecodeError):
        return None


def _limit_in(directory: str, file_name: str, top: str) -> int | None:
    """The smallest limit in ``directory`` and every parent up to ``top`` (a child cannot use more than its
    parent allows, whatever its own file says)."""
    smallest: int | None = None
    while True:
        text = _read(os.path.join(directory, file_name))
        if text and text != "max":
            try:
                value = int(text)
            except ValueError:
                value = None
            if value is not None and 0 < value < _NO_LIMIT_V1:
                smallest = value if smallest is None else min(smallest, value)
        if os.path.normpath(directory) == os.path.normpath(top):
            return smallest
        parent = os.path.dirname(directory)
        if parent == directory or not parent.startswith(os.path.normpath(top)):
            return smallest
        directory = parent


def cgroup_memory_limit(root: str = "/") -> int | None:
    """This process's cgroup memory limit in bytes (v2 ``memory.max``, v1 ``memory.limit_in_bytes``, the smallest
    over its ancestors); None where none is set or none can be read. ``root`` is where ``/proc`` and ``/sys``
    are found (a test's directory)."""
    membership = _read(os.path.join(root, "proc/self/cgroup")) or ""
    limits: list[int] = []
    for line in membership.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        _, controllers, path = parts
        relative = path.lstrip("/")
        if controllers == "":  # v2: one unified hierarchy
            top = os.path.join(root, "sys/fs/cgroup")
            found = _limit_in(os.path.join(top, relative), "memory.max", top)
        elif "memory" in controllers.split(","):
            top = os.path.join(root, "sys/fs/cgroup/memory")
            found = _limit_in(os.path.join(top, relative), "memory.limit_in_bytes", top)
        else:
            continue
        if found is not None:
            limits.append(found)
    return min(limits) if limits else None


def memory_for_readers(root: str = "/") -> int:
    """The memory this machine's readers may use: its physical memory, or its cgroup's limit where smaller."""
    physical = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    limit = cgroup_memory_limit(root)
    return physical if limit is None else min(physical, limit)
