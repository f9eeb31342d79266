"""The ``mountctl`` command line: a thin layer over the Python API."""

from __future__ import annotations

import argparse
import json
import logging
import shlex
import sys
import time
from typing import TYPE_CHECKING

from .argparsing import ArgumentParser
from .errors import InvalidSpec, MountctlError
from .mounts.spec import BACKEND_NAMES, MountSpec
from .redaction import redact

if TYPE_CHECKING:
    from .local_s3.far_proxy import FarProfile
    from .local_s3.server import LocalS3Status

__all__ = ["main", "configure"]


def _seconds(text: str) -> float:
    """A bound in seconds: a bound of 0 or less would make every probe fail ("unresponsive") at once."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not 0 < value <= 3600:
        raise argparse.ArgumentTypeError(f"{text} must be more than 0 and at most 3600 seconds")
    return value


def _parser() -> argparse.ArgumentParser:
    formatter = argparse.RawDescriptionHelpFormatter
    parser = ArgumentParser(
        prog="mountctl", formatter_class=formatter,
        description="Serve S3 to PyTorch loaders as plain files through supervised FUSE mounts.",
        epilog="example:\n  mountctl local-s3 start && eval \"$(mountctl local-s3 env)\"\n"
               "  mountctl mount s3://mountctl/ /tmp/m --backend rclone\n  mountctl status\n  mountctl unmount /tmp/m",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log what mountctl does")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    m = commands.add_parser(
        "mount", formatter_class=formatter, help="mount an S3 prefix; returns once it is readable",
        description="Mount s3://bucket[/prefix/] at DIR under a detached supervisor that remounts it "
                    "if the mount program dies or hangs. Endpoint and credentials come from the "
                    "standard AWS environment (AWS_ENDPOINT_URL, AWS_PROFILE, ...).",
        epilog="example:\n  mountctl mount s3://my-bucket/train/ /mnt/train --backend rclone --metadata-ttl 300")
    m.add_argument("uri", help="s3://bucket/ or s3://bucket/prefix/")
    m.add_argument("dir", help="mount directory (created if missing; must be empty)")
    m.add_argument("--backend", default="auto", choices=BACKEND_NAMES,
                   help="mount program; auto = mount-s3, else rclone, else s3fs, the order measured in BENCHMARKS.md (default: auto)")
    m.add_argument("--read-write", action="store_true", help="allow writes (default: read-only)")
    m.add_argument("--cache-dir", help="local cache directory (enables the program's data cache, in a private "
                   "subdirectory of its own, removed at unmount)")
    m.add_argument("--cache-size-mb", type=int, help="cap on the data cache, in MiB (at most half the free disk)")
    m.add_argument("--metadata-ttl", type=float, default=MountSpec.metadata_ttl_s,
                   help="seconds to cache listings and attributes (default: %(default)s)")
    m.add_argument("--endpoint-url", help="S3 endpoint (default: AWS_ENDPOINT_URL or AWS)")
    m.add_argument("--region", help="S3 region (default: AWS_REGION or us-east-1)")
    m.add_argument("--uid", type=int, help="owner uid of the files")
    m.add_argument("--gid", type=int, help="owner gid of the files")
    m.add_argument("--allow-other", action="store_true", help="let other users read the mount")
    m.add_argument("--timeout", type=float, default=30.0, help="seconds to wait for the mount (default 30)")
    m.add_argument("--no-watchdog", action="store_true", help="do not remount automatically")
    m.add_argument("--extra-arg", action="append", default=[], metavar="ARG",
                   help="pass ARG to the mount program as is (repeatable)")
    warm = m.add_mutually_exclusive_group()
    warm.add_argument("--warm", nargs="?", const="all", metavar="LIST",
                      help="once mounted, read files into the cache in the background, ahead of the loader: every "
                           "file (no LIST, or 'all') or those listed in the file LIST, one path per line relative "
                           "to the prefix; only what fits the cache: --cache-dir's, or with none, on mountctl's "
                           "mount-s3 read only, the page cache (a quarter of the available memory).  Without it a "
                           "mount-s3 mount warms the whole tree when all of it fits that, else nothing")
    warm.add_argument("--no-warm", dest="warm", action="store_const", const="off",
                      help="no warm at all, not even mount-s3's automatic one")
    m.add_argument("--objects", metavar="LIST",
                   help="serve exactly the objects in the file LIST (one key<TAB>etag<TAB>size line each, keys "
                        "relative to the prefix): no LIST or HEAD when a file is opened, each read pinned to its ETag; "
                        "read-only, mountctl's mount-s3; they appear under DIR/<last part of the prefix>/")
    m.add_argument("--whole-files", action="store_true",
                   help="readers read each file whole, front to back (shards, whole objects): mount-s3 (mountctl's "
                   "build) fetches a file's first 16 MiB at once, in parallel parts; not for reads at random offsets")
    m.add_argument("--memory-mb", type=int, metavar="MIB",
                   help="bound on the mount program's memory, turned into its own buffer flags (at least 64; "
                        "default: the program's defaults)")

    u = commands.add_parser("unmount", formatter_class=formatter, help="unmount and stop the supervisor",
                            epilog="example:\n  mountctl unmount /mnt/train")
    u.add_argument("dir")
    u.add_argument("--timeout", type=float, default=30.0, help="seconds to wait (default 30)")

    s = commands.add_parser("status", formatter_class=formatter, help="list managed mounts and their health",
                            description="Each mount's health is probed with a bound, so this never hangs.",
                            epilog="example:\n  mountctl status --json | python -m json.tool")
    s.add_argument("--json", action="store_true", help="print JSON")
    s.add_argument("--timeout", type=_seconds, default=2.0, help="health probe bound per mount (default 2 s)")

    e = commands.add_parser(
        "exporter", formatter_class=formatter, help="serve this node's mounts as Prometheus metrics",
        description="Serve /metrics (Prometheus), /healthz (200 while running) and /readyz (200 unless a "
                    "managed mount is broken, else 503 naming which) until interrupted.  Mounts are probed in the "
                    "background every --interval; a scrape starts no process.  Keep it on loopback and let a "
                    "local scraper read it (docs/security.md).",
        epilog="example:\n  mountctl exporter --listen 127.0.0.1:9464\n  curl -s 127.0.0.1:9464/readyz")
    e.add_argument("--listen", default="127.0.0.1:9464", metavar="HOST:PORT",
                   help="address to serve on (default 127.0.0.1:9464)")
    e.add_argument("--timeout", type=_seconds, default=2.0, help="health probe bound per mount (default 2 s)")
    e.add_argument("--interval", type=_seconds, default=5.0,
                   help="seconds between background probes of the mounts; a scrape serves the last (default 5)")

    d = commands.add_parser("doctor", formatter_class=formatter, help="check FUSE, programs, credentials, S3",
                            epilog="example:\n  mountctl doctor --uri s3://my-bucket/train/")
    d.add_argument("--json", action="store_true", help="print JSON")
    d.add_argument("--uri", help="also check access to this bucket/prefix")

    c = commands.add_parser("cleanup", formatter_class=formatter,
                            help="clear stale mounts, records and servers left by crashed processes",
                            epilog="example:\n  mountctl cleanup")
    c.add_argument("--json", action="store_true", help="print JSON")

    local = commands.add_parser(
        "local-s3", formatter_class=formatter, help="the embedded local S3 server (SeaweedFS)",
        description="Run SeaweedFS on 127.0.0.1 with generated credentials, for demos and tests.",
        epilog="example:\n  mountctl local-s3 start\n  eval \"$(mountctl local-s3 env)\"\n  mountctl local-s3 stop")
    actions = local.add_subparsers(dest="action", required=True, metavar="ACTION")
    start = actions.add_parser(
        "start", help="start (no-op when running); returns when S3 answers", formatter_class=formatter,
        description="Start the server unless it runs.  --profile far also puts an nginx proxy in front of it that "
                    "makes it look like S3 in the same region (latency per request, a rate cap per connection); "
                    "`env` then prints the proxy's endpoint.  --profile local removes the proxy again; without "
                    "--profile the running profile is kept.",
        epilog="example:\n  mountctl local-s3 start --bucket data\n  mountctl local-s3 start --profile far --latency-ms 20")
    start.add_argument("--bucket", action="append", help="bucket to create (repeatable; default: mountctl)")
    start.add_argument("--timeout", type=float, default=60.0)
    start.add_argument("--profile", choices=("local", "far"),
                       help="local: the server as it is (the default for a new start); far: behind the proxy")
    start.add_argument("--latency-ms", type=float, help="far: wait per request, ms (default 20)")
    start.add_argument("--rate-mb-s", type=float, help="far: cap per connection, MB/s (default 50; 0 = none)")
    start.add_argument("--slowdown-pct", type=float,
                       help="far: answer this %% of GETs and HEADs with S3's 503 SlowDown (default 0)")
    actions.add_parser("stop", help="stop the server", epilog="example:\n  mountctl local-s3 stop",
                       formatter_class=formatter)
    st = actions.add_parser("status", help="running or not, endpoint, pid",
                            epilog="example:\n  mountctl local-s3 status --json", formatter_class=formatter)
    st.add_argument("--json", action="store_true")
    actions.add_parser("env", help="print export lines for eval",
                       epilog="example:\n  eval \"$(mountctl local-s3 env)\"", formatter_class=formatter)
    return parser


def _mount_spec(args: argparse.Namespace) -> MountSpec:
    """The mount the arguments ask for, checked: nothing is mounted, started or read (part of ``configure``)."""
    spec = MountSpec(
        uri=args.uri, mount_dir=args.dir, backend=args.backend, read_only=not args.read_write,
        cache_dir=args.cache_dir, cache_size_mb=args.cache_size_mb, metadata_ttl_s=args.metadata_ttl,
        endpoint_url=args.endpoint_url, region=args.region, uid=args.uid, gid=args.gid,
        allow_other=args.allow_other, mount_timeout_s=args.timeout, memory_mb=args.memory_mb, warm=args.warm,
        whole_files=args.whole_files,
        objects=args.objects,
        extra_args={args.backend: tuple(args.extra_arg)} if args.extra_arg and args.backend != "auto" else {},
    )
    if args.extra_arg and args.backend == "auto":
        raise MountctlError("--extra-arg needs an explicit --backend: the arguments differ per program")
    if args.warm not in (None, "off") and not args.cache_dir and not _keeps_pages(spec):
        raise InvalidSpec("--warm reads files into the mount's data cache: add --cache-dir (with no cache, only "
                          "mountctl's own mount-s3 on a read-only mount keeps what a warm reads, in the page cache)")
    return spec


def _keeps_pages(spec: MountSpec) -> bool:
    """The program this spec mounts with keeps the kernel's page cache across opens (``Backend.keeps_pages``)."""
    from .mounts.backends import choose_backend

    try:
        return choose_backend(spec.backend).keeps_pages(spec)
    except MountctlError:
        return False  # no such program: the mount itself says so


def configure(argv: list[str]) -> argparse.Namespace:
    """The command's dry run: its arguments parsed and checked as far as they can be without acting (no mount, no
    server, no request).  A usage error exits 1 (``SystemExit``); a wrong value raises ``MountctlError``."""
    args = _parser().parse_args(argv)
    if args.command == "mount":
        _mount_spec(args)
    elif args.command == "local-s3" and args.action == "start":
        _far_profile(args)
    return args


def _cmd_mount(args: argparse.Namespace) -> int:
    from .mounts.backends import get_backend
    from .mounts.warm import WARM_AUTO, read_listing, warm_for
    from .shared import acquire

    spec = _mount_spec(args)
    if args.warm not in (None, "off"):
        read_listing(spec.warm or "all")  # a list that cannot be read fails here, not in the supervisor's log
    if spec.objects:
        from .mounts.object_list import read_object_list

        read_object_list(spec.objects)  # likewise for a list of objects
    handle = acquire(spec, pinned=True, watchdog=not args.no_watchdog)
    keeps_pages = get_backend(handle.backend).keeps_pages(spec)
    warm = warm_for(spec.warm, handle.backend, bool(spec.cache_dir), keeps_pages)
    into = "its cache" if spec.cache_dir or not keeps_pages else "the page cache"
    warming = ("" if not warm else f"; warming {into} in the background, if all of it fits (--no-warm: off)"
               if warm == WARM_AUTO else f"; warming {into} in the background")
    listed = f"; its listed objects are in {spec.data_dir}" if spec.objects else ""
    print(f"mounted {spec.uri} at {spec.mount_dir} with {handle.backend} (pid {handle.pid}){warming}{listed}; "
          f"unmount with: mountctl unmount {shlex.quote(spec.mount_dir)}")
    return 0


def _cmd_unmount(args: argparse.Namespace) -> int:
    from .mounts.fusectl import unmount
    from .mounts.mounttable import find_mount
    from .mounts.spec import canonical_dir
    from .shared import request_unmount

    path = canonical_dir(args.dir)
    if request_unmount(path, wait_s=args.timeout):
        print(f"unmounted {path}")
        return 0
    if find_mount(path) is not None:
        result = unmount(path)
        if not result.ok:
            raise MountctlError(f"{path} is not managed by mountctl and could not be unmounted: {result.message}")
        print(f"unmounted {path} (it was not managed by mountctl)")
        return 0
    raise MountctlError(f"nothing is mounted at {path}; see `mountctl status` for managed mounts")


def _cmd_status(args: argparse.Namespace) -> int:
    from .observability import status

    rows = status(args.timeout)
    if args.json:
        print(json.dumps({"mounts": rows}, indent=2))
        return 0
    if not rows:
        print("no managed mounts")
        return 0
    for row in rows:
        since = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(row["since"])) if row["since"] else "-"
        health = row["health"]
        latency = f" {health['latency_s'] * 1000:.0f}ms" if health.get("latency_s") else ""
        cache = f"{row['cache']['cache_size_mb']}MiB" if row.get("cache") else "none"
        program = f" ({row['program_version']})" if row.get("backend") else ""
        print(f"{row['dir']}  {row['uri']}  backend={row['backend']}{program} pid={row['pid']} state={row['state']} "
              f"health={health['state']}{latency} since={since} restarts={row['restarts']} holders={row['holders']} "
              f"cache={cache}" + (f" warm={row['warm']['state']}" if row.get("warm") else "")
              + (f"\n    warm: {row['warm']['detail']}" if row.get("warm") else "")
              + (f"\n    memory: {row['memory']['note']}" if row["memory"].get("note") else "")
              + (f"\n    last error: {row['last_error']}" if row["last_error"] else ""))
    return 0


def _cmd_exporter(args: argparse.Namespace) -> int:
    import signal
    import threading

    from .observability.exporter import Exporter, parse_listen

    host, port = parse_listen(args.listen)
    try:
        exporter = Exporter(host, port, timeout_s=args.timeout, interval_s=args.interval)
    except OSError as exc:
        raise MountctlError(f"the exporter cannot listen on {host}:{port}: {exc.strerror or exc}; "
                            "choose another --listen address") from None
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    with exporter:
        bound_host, bound_port = exporter.address
        print(f"serving http://{bound_host}:{bound_port}/metrics, /healthz and /readyz; stop with Ctrl-C",
              file=sys.stderr, flush=True)
        stop.wait()
    return 0


def _cmd_doctor(args: argparse.Namespace) -> int:
    from .doctor import run_checks

    checks = run_checks(args.uri)
    if args.json:
        print(json.dumps({"ok": all(c["ok"] for c in checks), "checks": checks}, indent=2))
    else:
        for check in checks:
            mark = "ok  " if check["ok"] else ("--  " if check.get("optional") else "FAIL")
            print(f"[{mark}] {check['name']}: {check['detail']}")
            if not check["ok"] and check.get("fix"):
                print(f"       fix: {check['fix']}")
    return 0 if all(c["ok"] or c.get("optional") for c in checks) else 1


def _cmd_cleanup(args: argparse.Namespace) -> int:
    from .doctor import cleanup
    from .local_s3.orphans import stop_orphans

    report = cleanup()
    cleared = report.cleared + stop_orphans()
    if args.json:
        print(json.dumps({"cleared": cleared, "left": report.left}, indent=2))
    else:
        for line in cleared:
            print(f"cleared {line}")
        for line in report.left:
            print(f"left alone {line}")
        if not cleared and not report.left:
            print("nothing to clean up")
    return 0


def _cmd_local_s3(args: argparse.Namespace) -> int:
    from .local_s3.server import DEFAULT_BUCKET, LocalS3

    server = LocalS3()
    if args.action == "start":
        far = _far_profile(args)
        was_running = server.status().running
        status = server.start(buckets=tuple(args.bucket or [DEFAULT_BUCKET]), timeout_s=args.timeout)
        if far is not None:
            status = server.start_far(far, timeout_s=args.timeout, outlive_owner=True)
        elif args.profile == "local":
            server.stop_far()
            status = server.status()
        verb = "already running" if was_running else "started"
        print(f"local S3 {verb} at {status.endpoint_url} (pid {status.pid}, {_profile_line(status)}); "
              "use it with: eval \"$(mountctl local-s3 env)\"", file=sys.stderr)
        return 0
    if args.action == "stop":
        from .local_s3.owners import read_owners

        holders = ", ".join(str(owner["pid"]) for owner in read_owners(server.dir).live)
        stopped = server.stop()
        print(("local S3 stopped" + (f" (runs with pid {holders} were still using it)" if holders else ""))
              if stopped else "local S3 was not running", file=sys.stderr)
        return 0
    if args.action == "status":
        status = server.status()
        if getattr(args, "json", False):
            print(json.dumps(status.to_dict(), indent=2))
        elif status.running:
            print(f"running at {status.endpoint_url} (pid {status.pid}, {_profile_line(status)}), "
                  f"state in {status.home}")
        else:
            print(f"not running (state in {status.home}); start it with `mountctl local-s3 start`")
        return 0 if status.running else 3
    for name, value in server.env().items():  # env
        print(f"export {name}={shlex.quote(value)}")
    return 0


def _far_profile(args: argparse.Namespace) -> FarProfile | None:
    """The far profile the start asks for, or None; a far option without ``--profile far`` is a mistake."""
    from .local_s3.far_proxy import FarProfile

    given = {name: value for name, value in (("latency_ms", args.latency_ms), ("rate_mb_s", args.rate_mb_s),
                                             ("slowdown_pct", args.slowdown_pct)) if value is not None}
    if args.profile != "far":
        if given:
            raise InvalidSpec("--latency-ms, --rate-mb-s and --slowdown-pct shape the far profile: add --profile far")
        return None
    return FarProfile(**given)


def _profile_line(status: LocalS3Status) -> str:
    if status.far is None:
        return "profile local"
    return (f"profile far: {status.far.latency_ms:g} ms per request, {status.far.rate_mb_s:g} MB/s per connection, "
            f"in front of {status.server_endpoint_url}")


_COMMANDS = {"mount": _cmd_mount, "unmount": _cmd_unmount, "status": _cmd_status, "doctor": _cmd_doctor,
             "cleanup": _cmd_cleanup, "local-s3": _cmd_local_s3, "exporter": _cmd_exporter}


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="mountctl: %(message)s")
    try:
        return _COMMANDS[args.command](args)
    except MountctlError as exc:
        print(f"mountctl: error: {redact(str(exc))}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
