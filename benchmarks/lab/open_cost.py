#!/usr/bin/env python3
"""Where an open's time goes: S3 requests and ms per open+read+close of small objects, per mount program.

    PYTHONPATH=$PWD .venv/bin/python benchmarks/lab/open_cost.py --files 100 --backend rclone --backend s3fs

Starts its own SeaweedFS and a far-store proxy (20 ms, 50 MB/s) that logs every request, uploads
``--files`` objects of ``--size`` bytes, then for each program mounts the prefix with its cache on,
lists the directory once (as ImageFolder does) and reads every file twice (epochs 1 and 2),
one file at a time.  Prints requests per open by method and ms per open for each pass.
``--before`` also runs each program without the per-open flags (as before issue #25), side by side.
``--backend mount-s3+index`` mounts the same objects from a list of them (mountctl's mount-s3 ``--manifest``,
listed once before the mount): its listing and opens are answered from the list.

    PYTHONPATH=$PWD .venv/bin/python benchmarks/lab/open_cost.py --files 100 --backend mount-s3 --backend mount-s3+index
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import os
import time

from scratch_server import scratch_server

from mountctl import Mount, MountSpec, backends
from mountctl.local_s3.far_proxy import FarProfile, FarProxy
from mountctl.pytorch.data.index.index_mount import object_list_under
from mountctl.shared import ObjectsView

SHOW = 0


def _requests(proxy: FarProxy, since: int) -> tuple[collections.Counter[str], int]:
    time.sleep(0.2)  # nginx writes a request's line once its response is sent
    with open(proxy.requests_path) as f:
        lines = f.read().splitlines()
    for line in lines[since:since + SHOW]:
        print("   ", line)
    counts: collections.Counter[str] = collections.Counter()
    for line in lines[since:]:
        method, uri = line.split(" ", 2)[:2]
        counts["LIST" if method == "GET" and ("list-type" in uri or "?prefix" in uri or "&prefix" in uri)
               else method] += 1
    return counts, len(lines)


_NOW = {"rclone_open_flags": backends.rclone_open_flags, "s3fs_open_options": backends.s3fs_open_options}


def _per_open_flags(on: bool) -> None:
    """The per-open flags of backends.py, or none (what mountctl passed before issue #25)."""
    for name, function in _NOW.items():
        setattr(backends, name, function if on else (lambda spec: []))


def _read_all(root: str, names: list[str]) -> float:
    started = time.perf_counter()
    for name in names:
        with open(os.path.join(root, name), "rb") as f:
            while f.read(1 << 20):
                pass
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=100)
    parser.add_argument("--size", type=int, default=128 * 1024)
    parser.add_argument("--backend", action="append", default=[])
    parser.add_argument("--latency-ms", type=float, default=20.0)
    parser.add_argument("--warm", action="store_true", help="warm the cache (mountctl.mounts.warm) before epoch 1")
    parser.add_argument("--extra-arg", action="append", default=[], help="BACKEND=ARG, passed as is")
    parser.add_argument("--before", action="store_true", help="also run without the per-open flags")
    parser.add_argument("--show", type=int, default=0, help="print the first N requests of each pass")
    args = parser.parse_args()
    global SHOW
    SHOW = args.show
    with scratch_server("open-cost-") as (home, _, direct, s3):
        bucket = "mountctl"
        names = [f"img{i:05d}.jpg" for i in range(args.files)]
        for name in names:
            s3.put_object(Bucket=bucket, Key=f"opencost/{name}", Body=os.urandom(args.size))
        with FarProxy(direct.endpoint_url or "", os.path.join(home, "far"),
                      FarProfile(latency_ms=args.latency_ms), log_requests=True) as endpoint:
            proxy = FarProxy(direct.endpoint_url or "", os.path.join(home, "far"))
            settings = dataclasses.replace(direct, endpoint_url=endpoint)
            variants = [(b, v) for b in args.backend or ["rclone", "s3fs"]
                        for v in (("before", "now") if args.before else ("now",))]
            for backend, variant in variants:
                _per_open_flags(variant == "now")
                program = backend.removesuffix("+index")
                extra = tuple(a.split("=", 1)[1] for a in args.extra_arg if a.startswith(program + "="))
                uri = f"s3://{bucket}/opencost/"
                objects = object_list_under(direct, uri) if backend.endswith("+index") else None
                spec = MountSpec(uri=uri, mount_dir=os.path.join(home, "mnt"), objects=objects,
                                 backend=program, cache_dir=os.path.join(home, "cache"), cache_size_mb=1024,
                                 warm="off",  # requests counted are the program's own, and --warm's when asked
                                 extra_args={program: extra} if extra else {})
                with Mount(spec, settings=settings) as mounted:
                    mount = ObjectsView(mounted) if objects else mounted
                    _, seen = _requests(proxy, 0)
                    if args.warm:
                        from mountctl.mounts.warm import warm

                        started = time.perf_counter()
                        report = warm(mount.path, names)
                        counts, seen = _requests(proxy, seen)
                        print(f"{backend} {variant} warm: {time.perf_counter() - started:.2f}s {report} {dict(counts)}")
                    listed = sorted(os.listdir(mount.path))
                    assert listed == names, listed[:5]
                    counts, seen = _requests(proxy, seen)
                    print(f"{backend} {variant} listing: {dict(counts)}")
                    for epoch in (1, 2):
                        seconds = _read_all(mount.path, names)
                        counts, seen = _requests(proxy, seen)
                        per_open = {k: round(v / len(names), 2) for k, v in sorted(counts.items())}
                        print(f"{backend} {variant} epoch {epoch}: {seconds * 1000 / len(names):.1f} ms per open, "
                              f"requests per open {per_open}")
                    if os.environ.get("OPEN_COST_KEEP_LOG"):
                        import glob
                        import shutil
                        for log in glob.glob(os.path.join(os.environ["MOUNTCTL_HOME"], "run", "*", "logs", "*")):
                            shutil.copy(log, os.environ["OPEN_COST_KEEP_LOG"] + "." + os.path.basename(log))
    print("load average:", open("/proc/loadavg").read().strip())


if __name__ == "__main__":
    main()
