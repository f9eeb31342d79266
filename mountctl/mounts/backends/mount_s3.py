"""Mountpoint for Amazon S3 (``mount-s3``): its command line, memory bound and version rules.

AWS's own mount-s3 where installed, else mountctl's build on AWS's crates (``mount-s3/``).
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import stat
import tempfile
import time

from ...errors import BackendNotFound
from ...processes import paths_in_use
from ...programs import bundled_mount_s3
from ...s3 import S3Settings
from ..mounttable import MountEntry
from ..object_list import read_object_list
from ..spec import MountSpec
from .base import Backend, cache_plan, flag_value, ownership_flags, set_flag

__all__ = ["MountS3", "mount_s3_memory_flags", "describe_mount_s3", "mount_s3_takes_read_part_size",
           "MOUNT_S3_MIN_MEMORY_MB", "MOUNT_S3_READ_PART_BYTES", "MOUNT_S3_FUSE_THREADS", "WHOLE_FILE_FIRST_GET",
           "sweep_object_list_stores"]

MOUNT_S3_MIN_MEMORY_MB = 512  # mountpoint-s3-fs's MINIMUM_MEM_LIMIT, the least --memory-target it takes
MOUNT_S3_READ_PART_BYTES = 5 * 1024 * 1024  # the least part size mountpoint-s3-client takes
# FUSE threads (Mountpoint's default is 16). Each answers one request at a time, and a lookup or an open of a file
# not yet read waits a round trip to S3 on its thread; a standard loader with the read-ahead sampler has its 32
# threads plus the workers' own reads in flight, so 16 threads queued the workers behind the sampler. 64 cover
# that with room for a warm's readers; an idle thread costs nothing (measured: docs/standard-loaders.md).
MOUNT_S3_FUSE_THREADS = 64
# A file's first GET when readers read files whole (``MountSpec.whole_files``): 16 MiB, fetched by the CRT as
# parallel parts from the first byte, where the prefetcher's default 1.125 MiB comes alone and the window ramps
# up only as the reader waits. On the far store it reads whole shards faster and would make a random small read
# wait longer (measured: docs/mount-s3.md, "Tuned on the far store"), hence only where files are read whole.
WHOLE_FILE_FIRST_GET = 16 * 1024 * 1024
_READ_PART_SIZE_SINCE = (1, 8, 0)  # the first AWS mount-s3 release with --read-part-size
# Where our mount-s3 keeps a list mount's SQLite store (mount-s3/src/manifest.rs): a directory in its $TMPDIR,
# removed only when the program exits cleanly.  A store this young may belong to a program still opening it.
_MANIFEST_STORE_PREFIX = "mount-s3-manifest-"
_MANIFEST_STORE_GRACE_S = 60.0


class MountS3(Backend):
    """Mountpoint for Amazon S3: AWS's own mount-s3 where installed, else mountctl's build on AWS's crates."""

    name = "mount-s3"
    program = "mount-s3"
    install_hint = ("run `bash scripts/setup.sh`, which builds mount-s3 from AWS's published Mountpoint crates, "
                    "or install AWS's mount-s3 package")
    # Mountpoint's prefetcher never reads across files: a standard loader's cold first epoch waits one round trip
    # per file, so a mount with a cache warms it (rclone and s3fs spend more CPU per GB, which the loader needs).
    warms_by_itself = True
    overwrites_files = False  # Mountpoint writes new files only, sequentially

    def version(self, executable: str | None = None) -> str:
        """``mount-s3 1.x (AWS)`` or ``mount-s3 built from mountpoint-s3-fs X.Y``: which one runs matters."""
        return describe_mount_s3(super().version(executable))

    def _executable_for(self, spec: MountSpec) -> str:
        """A list of objects is a flag of mountctl's build only (AWS's mount-s3 has no --manifest)."""
        if not spec.objects:
            return self.executable()
        ours = bundled_mount_s3()
        if ours is None:
            raise BackendNotFound("mounting a list of objects needs mountctl's mount-s3 (AWS's has no --manifest), "
                                  "which is not built: run `bash scripts/setup.sh`", program=self.program)
        return ours

    def memory_bound(self, spec: MountSpec) -> tuple[int | None, str]:
        """Mountpoint keeps to no bound under 512 MiB: a smaller one runs at 512, said in one line."""
        if spec.memory_mb is None or spec.memory_mb >= MOUNT_S3_MIN_MEMORY_MB:
            return spec.memory_mb, ""
        return MOUNT_S3_MIN_MEMORY_MB, (
            f"memory bound raised to {MOUNT_S3_MIN_MEMORY_MB} MiB instead of the {spec.memory_mb} MiB asked: "
            f"mount-s3 takes no --memory-target under {MOUNT_S3_MIN_MEMORY_MB} MiB; give --memory-mb "
            f"{MOUNT_S3_MIN_MEMORY_MB} or more, or choose --backend rclone or s3fs for a smaller bound")

    def environment(self, spec: MountSpec, settings: S3Settings, workdir: str) -> dict[str, str]:
        # mount-s3 makes its own directory under --cache but not --cache itself; only this user may enter it.
        if cache_plan(spec, workdir) is not None:
            cache = _mount_s3_cache_dir(spec, workdir)
            os.makedirs(cache, mode=0o700, exist_ok=True)
            os.chmod(cache, 0o700)
        env = settings.child_env()
        if spec.objects:
            # Our mount-s3 builds a list's SQLite store in a temporary directory, removed when it exits, but not
            # when it is killed: kept in the mount's private workdir, it goes with the workdir (at unmount, or
            # swept by `mountctl cleanup` once the owner is gone), and a remount clears what a killed one left.
            tmp = os.path.join(workdir, "tmp")
            for name in os.listdir(tmp) if os.path.isdir(tmp) else ():
                if name.startswith(_MANIFEST_STORE_PREFIX):
                    shutil.rmtree(os.path.join(tmp, name), ignore_errors=True)
            os.makedirs(tmp, mode=0o700, exist_ok=True)
            env["TMPDIR"] = tmp
        return env

    def keeps_pages(self, spec: MountSpec) -> bool:
        """Our build keeps them unless told not to. Only a read-only mount counts: a read-write one (checkpoints)
        would have a warm read every earlier save into memory."""
        if not spec.read_only or "--no-keep-cache" in self._extra(spec):
            return False
        try:
            return self._ours(self._executable_for(spec))
        except BackendNotFound:
            return False

    def _ours(self, executable: str) -> bool:
        """mountctl's build on AWS's crates, which takes our own prefetcher flags; AWS's mount-s3 does not."""
        return self.version(executable).startswith("mount-s3 built from ")

    def read_part_size_note(self, executable: str | None = None) -> str:
        """Empty, or one line on why this mount-s3 reads in its own default parts (an AWS release before 1.8.0)."""
        line = self.version(executable)
        if mount_s3_takes_read_part_size(line):
            return ""
        return (f"{line} has no --read-part-size (AWS added it in 1.8.0): it reads in its default 8 MiB parts, "
                "not mountctl's 5 MiB; upgrade AWS's mount-s3 for the faster first reads")

    def command(self, spec: MountSpec, settings: S3Settings, workdir: str) -> list[str]:
        executable = self._executable_for(spec)
        argv = [executable, spec.bucket, spec.mount_dir, "--foreground",
                "--region", settings.region, "--log-directory", os.path.join(workdir, "logs")]
        if spec.prefix:
            argv += ["--prefix", spec.prefix]
        if spec.objects:
            read_object_list(spec.objects)  # a missing or malformed list is named here, not in mount-s3's log
            argv += ["--manifest", spec.objects, "--manifest-directory", os.path.basename(spec.data_dir)]
        if spec.read_only:
            argv.append("--read-only")
        else:
            # Read-write means what it means for rclone and s3fs: a file may be removed too (mount-s3 refuses
            # unlink without it). Overwrites stay refused: a checkpoint writes a new version (versioned.py).
            argv.append("--allow-delete")
        if settings.endpoint_url:
            # Off AWS the store rarely supports the CRC32 trailers mount-s3 adds to uploads.
            argv += ["--endpoint-url", settings.endpoint_url, "--force-path-style", "--upload-checksums", "off"]
        plan = cache_plan(spec, workdir)
        if plan is not None:
            # Each mount-s3 process needs a cache directory of its own.
            argv += ["--cache", _mount_s3_cache_dir(spec, workdir),
                     "--max-cache-size", str(plan.size_mb)]
        argv += ["--metadata-ttl", str(int(spec.metadata_ttl_s))]
        argv += ownership_flags(spec)
        if not settings.has_credentials:
            argv.append("--no-sign-request")
        extra = self._extra(spec)
        if (not any(flag_value(extra, name) for name in ("--part-size", "--read-part-size"))
                and not self.read_part_size_note(executable)):
            # GETs in 5 MiB parts (the least the client takes) rather than 8: the client fetches a file's first
            # part alone before it knows the size, so a smaller one starts the parallel parts sooner; a random
            # read costs the same (measured: docs/mount-s3.md "Tuned on the far store"). Uploads keep 8 MiB parts.
            argv += ["--read-part-size", str(MOUNT_S3_READ_PART_BYTES)]
        if not flag_value(extra, "--max-threads"):
            argv += ["--max-threads", str(MOUNT_S3_FUSE_THREADS)]
        if spec.whole_files and not flag_value(extra, "--initial-request-size") and self._ours(executable):
            argv += ["--initial-request-size", str(WHOLE_FILE_FIRST_GET)]  # a flag of our build, not AWS's
        return mount_s3_memory_flags(argv + extra, spec.memory_mb)

    def owns(self, entry: MountEntry) -> bool:
        return entry.fs_type in ("fuse", "fuse.mountpoint-s3") and entry.source == "mountpoint-s3"


def _mount_s3_cache_dir(spec: MountSpec, workdir: str) -> str:
    return os.path.join(spec.cache_dir or workdir, "mount-s3-cache")


def describe_mount_s3(version_line: str) -> str:
    """AWS's mount-s3 prints ``mount-s3 1.22.0``; ours says what it is built from (mount-s3/src/main.rs)."""
    if version_line.startswith("mount-s3 built from "):
        return version_line.split(" (mountctl", 1)[0]
    if version_line.startswith("mount-s3 "):
        return f"{version_line} (AWS)"
    return version_line


def mount_s3_takes_read_part_size(version_line: str) -> bool:
    """False only for AWS's mount-s3 before 1.8.0, which refuses ``--read-part-size`` (and so every mount that
    passes it); ours and any version line we cannot read take it."""
    match = re.match(r"mount-s3 (\d+)\.(\d+)\.(\d+)", version_line)
    if match is None:
        return True
    return tuple(int(part) for part in match.groups()) >= _READ_PART_SIZE_SINCE


def mount_s3_memory_flags(argv: list[str], memory_mb: int | None) -> list[str]:
    """mount-s3 under ``memory_mb``: ``--memory-target`` for its memory limiter, which sizes the prefetch
    window of every open file to fit (its parts come from one paged pool).

    Mountpoint takes no target under 512 MiB (``MINIMUM_MEM_LIMIT``; AWS's CLI refuses one): a smaller bound
    is raised to that for mount-s3, the least it can keep to, and ``MountS3.memory_bound`` says so (``Mount``
    logs it, the registry keeps it for ``mountctl status``). Its ``--max-threads`` counts FUSE threads, not
    S3 requests, so the bound does not change it."""
    if not memory_mb:
        return argv
    return set_flag(argv, "--memory-target", str(max(memory_mb, MOUNT_S3_MIN_MEMORY_MB)))


def sweep_object_list_stores(folder: str | None = None) -> list[str]:
    """Remove the list-mount stores (``mount-s3-manifest-*``) of this user that no live process has open, from
    ``folder`` (default: the temporary directory, where mount-s3 kept them before mountctl gave it a directory
    of its mount's own); one line per store removed."""
    folder = folder or tempfile.gettempdir()
    found = []
    with contextlib.suppress(OSError):
        for name in os.listdir(folder):
            path = os.path.join(folder, name)
            with contextlib.suppress(OSError):
                info = os.lstat(path)
                if (name.startswith(_MANIFEST_STORE_PREFIX) and stat.S_ISDIR(info.st_mode)
                        and info.st_uid == os.getuid() and time.time() - info.st_mtime > _MANIFEST_STORE_GRACE_S):
                    found.append(path)
    if not found:
        return []
    used = paths_in_use(found)
    removed = []
    for path in found:
        if path not in used:
            shutil.rmtree(path, ignore_errors=True)
            removed.append(f"mount-s3 list store {path} (no mount uses it)")
    return removed
