"""``resnet.py bench --suite node``: a node's 64 readers on one shared mount, against the ranged-GET limit.

8 processes stand for a node's ranks, each with 8 readers (``node_reads``), on one shared
mount per program (watchdog on, the bound of ``--memory-mb``), far store first, then
loopback.  Each cell reports the aggregate MB/s beside the ranged-GET limit measured in
the same run on the same objects, the slowest rank against the mean, the mount program's
CPU seconds per GB and its peak RSS, and every failed read and remount.  The objects
(``objects`` x ``object_mb``, random bytes) are written once under ``URI/node-scale/``.
"""

from __future__ import annotations

import dataclasses
import json
import os
import tempfile
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

import mountctl
from benchmarks.harness.limits import ranged_get
from benchmarks.harness.monitor import ResourceMonitor
from benchmarks.harness.node_reads import read_as_ranks
from benchmarks.harness.stores import check_store_choice, far_profile, plan_stores
from mountctl import installed_backends, parse_s3_uri, s3
from mountctl.s3 import S3Settings, resolve

__all__ = ["NodeScaleConfig", "run_node_scale", "node_markdown", "node_table"]

MIB = 1 << 20


@dataclass(frozen=True)
class NodeScaleConfig:
    uri: str
    objects: int = 64
    object_mb: int = 16
    ranks: int = 8
    threads: int = 8
    memory_mb: int = 512
    backends: tuple[str, ...] = ()  # default: auto and every installed program
    store: str = "both"
    far_latency_ms: float | None = None
    far_rate_mb_s: float | None = None
    timeout_s: float = 600.0

    def __post_init__(self) -> None:
        check_store_choice(self.store)
        far_profile(self.far_latency_ms, self.far_rate_mb_s)


def run_node_scale(config: NodeScaleConfig) -> dict[str, Any]:
    from benchmarks.harness.facts import machine_facts, run_facts

    # The date, machine (load average at start included) and command, as the sweep records them.
    facts: dict[str, Any] = {"started": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                             "machine": machine_facts(), "run": run_facts()}
    settings = resolve()
    plan = plan_stores(config.store, settings, config.far_latency_ms, config.far_rate_mb_s)
    uri = config.uri.rstrip("/") + "/node-scale/"
    sizes = _ensure_objects(plan.origin, uri, config.objects, config.object_mb * MIB)
    keys = {parse_s3_uri(uri).prefix + name: size for name, size in sizes.items()}
    programs = config.backends or ("auto", *installed_backends())
    cells: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="mountctl-node-scale-") as workdir:
        for store in sorted(plan.stores, key=lambda store: store != "far"):  # far first: the store users have
            with plan.settings(store, os.path.join(workdir, "proxy-" + store)) as reach:
                limit = ranged_get(reach, parse_s3_uri(uri).bucket, keys, threads=config.ranks * config.threads,
                                   part_size=8 * MIB)
                limit_mb_s = limit["bytes"] / 1e6 / limit["seconds"]
                for program in programs:
                    cell = _cell(config, reach, uri, sizes, program, os.path.join(workdir, f"m-{store}-{program}"))
                    cell.update(store=store, limit_mb_s=round(limit_mb_s, 1),
                                ratio_to_limit=round(cell["aggregate_mb_s"] / limit_mb_s, 3))
                    cells.append(cell)
    facts["machine"]["load_average_end"] = [round(x, 2) for x in os.getloadavg()]
    return {"config": dataclasses.asdict(config), "load_average": _load_average(), "cells": cells, **facts}


def _cell(config: NodeScaleConfig, settings: S3Settings, uri: str, sizes: dict[str, int], program: str,
          mount_dir: str) -> dict[str, Any]:
    # No warm beside the readers: the cell measures 64 readers' load on one mount, not a warm's reads among them.
    with mountctl.mount(uri, mount_dir, backend=program, settings=settings, memory_mb=config.memory_mb,
                        watchdog=True, warm="off") as handle:
        first_pid = handle.pid
        with ResourceMonitor(first_pid) as monitor:
            reads = read_as_ranks(handle.path, sizes, ranks=config.ranks, threads=config.threads,
                                  timeout_s=config.timeout_s)
        # The kernel's high-water mark (VmHWM), as `mountctl status` reports it: no spike between samples is lost.
        [row] = [row for row in mountctl.status() if row["dir"] == handle.path]
        peak, resolved, last_pid = row["memory"]["peak_rss_bytes"], handle.backend, handle.pid
        record = handle.record() if isinstance(handle, mountctl.SharedMount) else None
    usage = monitor.usage
    events = [event["event"] for event in record.events] if record else []
    program_cpu_s = (usage.program_cpu_pct or 0.0) / 100 * usage.seconds
    return {
        "program": program, "resolved": resolved, "readers": config.ranks * config.threads,
        "bytes": reads.bytes, "seconds": round(reads.seconds, 2), "aggregate_mb_s": round(reads.aggregate_mb_s, 1),
        "slowest_rank_share": round(reads.slowest_share, 3), "failed_reads": len(reads.failures),
        "first_failures": reads.failures[:3], "restarts": record.restarts if record else None,
        "events": events, "program_cpu_s_per_gb": round(program_cpu_s / max(reads.bytes / 1e9, 1e-9), 2),
        "program_peak_rss_mib": round((peak or 0) / MIB, 1), "memory_bound_mib": config.memory_mb,
        "same_program": last_pid == first_pid}


def _ensure_objects(settings: S3Settings, uri: str, count: int, size: int) -> dict[str, int]:
    """``count`` objects of ``size`` random bytes under ``uri``; those already there with that size are kept."""
    location = parse_s3_uri(uri)
    client = s3.client(settings, read_timeout=120)
    have = {location.prefix + name: stored.size
            for name, stored in s3.list_objects(client, location.bucket, location.prefix).items()}
    sizes = {f"part-{i:04d}.bin": size for i in range(count)}
    body = b""
    for name in sizes:
        if have.get(location.prefix + name) != size:
            body = body or os.urandom(size)
            client.put_object(Bucket=location.bucket, Key=location.prefix + name, Body=body)
    return sizes


def _load_average() -> list[float]:
    with open("/proc/loadavg") as f:
        return [float(part) for part in f.read().split()[:3]]


def node_table(result: dict[str, Any]) -> str:
    """The cells as one Markdown table (``benchmarks_page.py`` takes it as it is for BENCHMARKS.md)."""
    lines = ["| store | program | MB/s | limit MB/s | x limit | slowest rank / mean | failed reads | restarts | "
             "CPU s/GB | peak RSS MiB (bound) |", "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for c in result["cells"]:
        name = c["program"] if c["program"] == c["resolved"] else f"{c['program']} ({c['resolved']})"
        lines.append(f"| {c['store']} | {name} | {c['aggregate_mb_s']:.0f} | {c['limit_mb_s']:.0f} | "
                     f"{c['ratio_to_limit']:.2f} | {c['slowest_rank_share']:.2f} | {c['failed_reads']} | "
                     f"{c['restarts']} | {c['program_cpu_s_per_gb']:.1f} | {c['program_peak_rss_mib']:.0f} "
                     f"({c['memory_bound_mib']}) |")
    return "\n".join(lines)


def node_markdown(result: dict[str, Any]) -> str:
    return "\n".join([f"64 readers on one mount ({result['config']['ranks']} ranks x {result['config']['threads']} "
                      f"readers, {result['config']['objects']} x {result['config']['object_mb']} MiB); load average "
                      f"{' '.join(str(x) for x in result['load_average'])}", "", node_table(result)])


def write_node_report(result: dict[str, Any], out: str) -> str:
    os.makedirs(out, exist_ok=True)
    path = os.path.join(out, "node-scale.json")
    with open(path, "w") as f:
        json.dump(result, f, indent=2)
    return path
