#!/usr/bin/env python3
"""Does ``posix_fadvise(WILLNEED)`` warm a FUSE mount as a read does?  The question behind ``ReadAheadSampler``.

    PYTHONPATH=$PWD .venv/bin/python benchmarks/lab/fadvise_warm.py --files 40 --size 100000
    PYTHONPATH=$PWD .venv/bin/python benchmarks/lab/fadvise_warm.py --files 20 --size 2000000

Starts its own SeaweedFS behind the far-store proxy (20 ms per request) and writes three groups of
``--files`` objects of ``--size`` bytes.  On a fresh mount of each program, one group is read through
(``read_ahead.sampler.read_through``, what the sampler does), one gets open + ``POSIX_FADV_WILLNEED`` +
close, and one is left cold; after 3 s for asynchronous reads to land, each file of each group is
opened and read whole, one at a time.  Prints ms per open + read per group: a group as slow as the cold
one was not warmed.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import time

from scratch_server import scratch_server

from mountctl import Mount, MountSpec
from mountctl.local_s3.far_proxy import FarProfile, FarProxy
from mountctl.pytorch.data.read_ahead.sampler import BUFFER_BYTES, SampleFile, read_through

ROUTES = (("mount-s3", True), ("mount-s3", False), ("rclone", True))  # (program, with a data cache)


def _fadvise(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_WILLNEED)
    finally:
        os.close(fd)


def _ms_per_read(paths: list[str], size: int) -> float:
    started = time.perf_counter()
    for path in paths:
        with open(path, "rb") as f:
            if len(f.read()) != size:
                raise RuntimeError(f"{path}: short read")
    return round((time.perf_counter() - started) / len(paths) * 1000, 2)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=40, help="files per group")
    parser.add_argument("--size", type=int, default=100_000, help="bytes per file")
    args = parser.parse_args()
    with scratch_server("fadvise-warm-") as (home, _server, direct, s3):
        for i in range(3 * args.files):
            s3.put_object(Bucket="mountctl", Key=f"fadvise/f{i:05d}", Body=os.urandom(args.size))
        with FarProxy(direct.endpoint_url or "", os.path.join(home, "far"), FarProfile()) as endpoint:
            settings = dataclasses.replace(direct, endpoint_url=endpoint)
            for program, cached in ROUTES:
                directory = os.path.join(home, f"mnt-{program}-{cached}")
                os.makedirs(directory)
                cache = os.path.join(home, f"cache-{program}") if cached else None
                spec = MountSpec(uri="s3://mountctl/fadvise/", mount_dir=directory, backend=program,
                                 cache_dir=cache, warm="off")  # no warm of mountctl's: only the two below
                with Mount(spec, settings=settings) as mount:
                    paths = [os.path.join(mount.path, name) for name in sorted(os.listdir(mount.path))]
                    cold, read, advised = (paths[k * args.files:(k + 1) * args.files] for k in range(3))
                    buffer = bytearray(BUFFER_BYTES)
                    for path in read:
                        read_through(SampleFile(path), buffer)
                    for path in advised:
                        _fadvise(path)
                    time.sleep(3)  # room for the asynchronous read-ahead that WILLNEED starts
                    figures = {label: _ms_per_read(group, args.size)
                               for label, group in (("cold", cold), ("after a read", read), ("after WILLNEED", advised))}
                print(f"{program}{' with a cache' if cached else ', no cache'}: ms per open + read: {figures}",
                      flush=True)
    print("load average:", open("/proc/loadavg").read().strip())


if __name__ == "__main__":
    main()
