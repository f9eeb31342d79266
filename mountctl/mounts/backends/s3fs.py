"""s3fs-fuse: its command line (options joined after ``-o``), the 0600 password file, open cost and memory
bound."""

from __future__ import annotations

import os

from ...errors import InvalidSpec
from ...paths import write_private
from ...s3 import S3Settings
from ..cache import free_mb
from ..mounttable import MountEntry
from ..spec import MountSpec
from .base import MIB, Backend, cache_plan

__all__ = ["S3fsFuse", "s3fs_open_options", "s3fs_memory_options"]

_S3FS_BASE_MB = 24  # an idle s3fs 1.90 mount: 15 MiB RSS measured
_STAT_ENTRY_BYTES = 400  # s3fs's stat cache: "100,000 entries (about 40MB)"


class S3fsFuse(Backend):
    name = "s3fs"
    program = "s3fs"
    install_hint = "install it with `apt-get install s3fs`"

    def command(self, spec: MountSpec, settings: S3Settings, workdir: str) -> list[str]:
        target = spec.bucket + (":/" + spec.prefix.rstrip("/") if spec.prefix else "")
        options = [
            f"endpoint={settings.region}",
            f"stat_cache_expire={max(1, int(spec.metadata_ttl_s))}",
            f"logfile={os.path.join(workdir, 'logs', 's3fs.log')}",
            "dbglevel=warn",
            # A store that throttles (503 SlowDown) is retried, with s3fs's own growing wait, rather than
            # failing the read: at 30 % SlowDown, 3 retries failed readdir and the first reads.
            "retries=10",
            "connect_timeout=10",
            "readwrite_timeout=60",
            # 20 ranged GETs of 5 MB in flight per read: on a store shaped like S3, about twice the rate
            # of s3fs's own 5 x 10 MB (benchmarks/lab/tune_far.py); the parts go to temp files, not memory.
            # Uploads through the mount then cap at 10,000 x 5 MB per file.
            "parallel_count=20",
            "multipart_size=5",
        ]
        if settings.endpoint_url:
            options += [f"url={settings.endpoint_url}", "use_path_request_style"]
        if settings.has_credentials:
            options.append(f"passwd_file={os.path.join(workdir, 's3fs.passwd')}")
        else:
            options.append("public_bucket=1")
        if spec.read_only:
            options.append("ro")
        options += s3fs_open_options(spec)
        plan = cache_plan(spec, workdir)
        if plan is not None:
            # s3fs has no size cap: ensure_diskfree makes it stop caching once the cache disk has less
            # free than that floor (half of what is free now, room left to everyone else: a floor of
            # free - cap broke reads with ENOSPC once another process wrote more than the cap).  Half
            # the free disk is at least MIN_CACHE_MB, room for s3fs's multipart buffers on top of it.
            cache = os.path.join(spec.cache_dir or workdir, "s3fs-cache")
            options += [f"use_cache={cache}", f"ensure_diskfree={plan.keep_free_mb}"]
            options = _s3fs_parts_within(options, free_mb(spec.cache_dir or workdir) - plan.keep_free_mb)
            # The kernel's page cache keeps a file's pages across opens while its size and
            # mtime stay the same (FUSE's auto_cache), instead of dropping them at every open.
            options.append("auto_cache")
        if spec.uid is not None:
            options.append(f"uid={spec.uid}")
        if spec.gid is not None:
            options.append(f"gid={spec.gid}")
        if spec.allow_other:
            options.append("allow_other")
        options = s3fs_memory_options(options, spec.memory_mb)
        extra = self._extra(spec)
        for option in options:
            if "," in option.split("=", 1)[-1]:
                raise InvalidSpec(f"s3fs option {option!r} may not contain a comma")
        return [self.executable(), target, spec.mount_dir, "-f", "-o", ",".join(options)] + extra

    def environment(self, spec: MountSpec, settings: S3Settings, workdir: str) -> dict[str, str]:
        if settings.has_credentials:
            secret = f"{settings.access_key_id}:{settings.secret_access_key}"
            if settings.session_token:
                secret += f":{settings.session_token}"
            write_private(os.path.join(workdir, "s3fs.passwd"), secret + "\n")
        env = settings.child_env()
        # s3fs would prefer these over the password file; keep one source of truth.
        for name in ("AWSACCESSKEYID", "AWSSECRETACCESSKEY", "AWSSESSIONTOKEN"):
            env.pop(name, None)
        return env

    def owns(self, entry: MountEntry) -> bool:
        return entry.fs_type == "fuse.s3fs"


def s3fs_open_options(spec: MountSpec) -> list[str]:
    """s3fs-fuse: at most one HEAD per open from its cache (it was two).

    s3fs 1.90 drops a file's stat entry at every open and again as it closes, whatever
    ``stat_cache_expire`` says, so each open sends a HEAD; no option turns that off.  What an option can
    remove is the second HEAD: the kernel's lookup before the open, which arrives once the kernel's
    1 s attribute cache expired and finds s3fs's entry gone.  On a read-only mount the kernel keeps
    entries and attributes for the metadata TTL (libfuse's ``entry_timeout``/``attr_timeout``).
    """
    if not spec.read_only:
        return []
    ttl = max(1, int(spec.metadata_ttl_s))
    return [f"entry_timeout={ttl}", f"attr_timeout={ttl}"]


def _s3fs_parts_within(options: list[str], room_mb: int) -> list[str]:
    """Fewer parts in flight where the cache disk is small: s3fs refuses to start ("no enough disk space")
    unless parallel_count x multipart_size fit above its ensure_diskfree floor (a quarter is left spare)."""
    values = {option.partition("=")[0]: option.partition("=")[2] for option in options}
    part = int(values.get("multipart_size") or 10)
    fit = max(1, room_mb * 3 // 4 // part)
    if int(values.get("parallel_count") or 5) <= fit:
        return options
    return [option for option in options if not option.startswith("parallel_count=")] + [f"parallel_count={fit}"]


def s3fs_memory_options(options: list[str], memory_mb: int | None) -> list[str]:
    """s3fs's ``-o`` options under ``memory_mb``: parallel requests x part size within the budget, dirty data
    (at least s3fs's minimum of 50) and the stat cache within it too.

    s3fs writes what it downloads to a temporary file (or its cache), not to memory: its RSS is
    mostly per-request buffers and the stat cache, which is what these bound.
    """
    if not memory_mb:
        return options
    budget = max(16, memory_mb - _S3FS_BASE_MB)
    values = {option.partition("=")[0]: option.partition("=")[2] for option in options}
    part = max(5, int(values.get("multipart_size") or 10))
    parallel = max(1, min(int(values.get("parallel_count") or 5), budget // 2 // part))
    changes = {"multipart_size": str(part), "parallel_count": str(parallel),
               "max_dirty_data": str(max(50, min(int(values.get("max_dirty_data") or 5120), budget))),
               "max_stat_cache_size": str(min(int(values.get("max_stat_cache_size") or 100_000),
                                              budget * MIB // 4 // _STAT_ENTRY_BYTES))}
    kept = [option for option in options if option.split("=", 1)[0] not in changes]
    return kept + [f"{name}={value}" for name, value in changes.items()]
