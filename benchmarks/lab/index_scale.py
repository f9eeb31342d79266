#!/usr/bin/env python3
"""Indexing at scale on the far store (issue #24, item 6): a 10,000-shard prefix and a 100,000-object class tree.

    PYTHONPATH=$PWD .venv/bin/python benchmarks/lab/index_scale.py [--shards 10000] [--tree 100000] [--jobs 8]

Runs its own embedded S3 (in a private temporary MOUNTCTL_HOME, removed at the end) behind the far proxy
(20 ms per request, 50 MB/s per connection: S3's shape), uploads the data directly (not through the proxy),
then times the indexer through the proxy, each run in a child process (its summary has its own peak RSS):

- the tiny-shard prefix read by streaming and by ranged header reads, side by side, and with `--read auto`;
- a few shards of large images, both ways: where ranged header reads should win;
- the class tree (one paginated LIST);
- the load time of the 10,000-shard index (median of 5 loads).

Prints one JSON object (figures, and /proc/loadavg before and after: this is a benchmark).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import io
import json
import os
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Iterable

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _tar(samples: list[tuple[str, bytes, int]]) -> bytes:
    """A shard as ``ShardWriter`` lays it out: KEY.jpg then KEY.cls per sample."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        for key, image, label in samples:
            for name, data in ((f"{key}.jpg", image), (f"{key}.cls", str(label).encode())):
                info = tarfile.TarInfo(name)
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    return out.getvalue()


def _upload(client, bucket: str, items: Iterable[tuple[str, bytes]], threads: int = 16) -> None:
    with concurrent.futures.ThreadPoolExecutor(threads) as pool:
        list(pool.map(lambda item: client.put_object(Bucket=bucket, Key=item[0], Body=item[1]), items))


def small_jpeg() -> bytes:
    """A real JPEG of 32 x 32 px (about 1 KiB), so that a trainer can decode the same data the indexer reads."""
    from PIL import Image

    out = io.BytesIO()
    Image.frombytes("RGB", (32, 32), bytes(range(256)) * 12).save(out, format="JPEG", quality=90)
    return out.getvalue()


SHARDS_PREFIX, TREE_PREFIX, TREE_CLASSES = "tiny/", "tree/", 100


def upload_scale_data(client, bucket: str, *, shards: int, tree: int, image: bytes) -> None:
    """The two big prefixes: ``shards`` tiny shards of 2 samples each, and a ``tree`` of one object per sample in
    ``TREE_CLASSES`` class folders (ImageFolder's layout).  The count is the load: every object is small."""
    _upload(client, bucket, ((f"{SHARDS_PREFIX}train-{n:06d}.tar", _tar([(f"s{n}-{k}", image, k) for k in range(2)]))
                             for n in range(shards)))
    _upload(client, bucket, ((f"{TREE_PREFIX}c{n % TREE_CLASSES:03d}/img{n:07d}.jpg", image) for n in range(tree)))


# The indexer alone: `resnet.py`'s parser also builds the bench's arguments, which import torch (~0.5 GB of RSS
# before a byte is indexed), and that is not what indexing needs.
_INDEX = ("import json, sys; from mountctl import resolve; "
          "from mountctl.pytorch.data.index.indexer import IndexConfig, index_data; "
          "print(json.dumps(index_data(IndexConfig(**json.loads(sys.argv[1])), resolve(), progress=None)))")


def run_indexed(env: dict[str, str], **config: object) -> dict:
    """One indexing run in a child of its own; its summary carries its peak RSS (VmHWM of its own memory)."""
    argv = [sys.executable, "-c", _INDEX, json.dumps(config)]
    done = subprocess.run(argv, capture_output=True, env=env, cwd=REPO, timeout=3600, check=False)
    if done.returncode != 0:
        raise SystemExit(f"index {config} failed: {done.stderr.decode()[-2000:]}")
    return json.loads(done.stdout.decode().strip().splitlines()[-1])


def _keep(summary: dict) -> dict:
    keys = ("shards", "files", "samples", "seconds", "objects_per_s", "bytes_read_per_shard", "requests", "read",
            "measured", "peak_rss_mb", "index_bytes")
    return {k: summary[k] for k in keys if k in summary}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shards", type=int, default=10_000)
    parser.add_argument("--tree", type=int, default=100_000)
    parser.add_argument("--jobs", type=int, default=8)
    args = parser.parse_args()
    load_before = open("/proc/loadavg").read().split()[:3]
    home = tempfile.mkdtemp(prefix="index-scale-home-")
    os.environ["MOUNTCTL_HOME"] = home
    from mountctl.local_s3.far_proxy import FarProfile
    from mountctl.local_s3.server import LocalS3
    from mountctl.pytorch.data.index.manifest import from_json_text
    from mountctl.s3 import client as s3_client

    server = LocalS3(home)
    try:
        server.start(buckets=("scale",))
        profile = FarProfile()
        server.start_far(profile)
        direct, far = s3_client(server.settings(direct=True)), server.settings()
        env = {**os.environ, "PYTHONPATH": REPO, "AWS_ENDPOINT_URL": far.endpoint_url or "",
               "AWS_ACCESS_KEY_ID": far.access_key_id or "", "AWS_SECRET_ACCESS_KEY": far.secret_access_key or "",
               "AWS_REGION": far.region or "us-east-1"}
        env.pop("AWS_ENDPOINT_URL_S3", None)
        image = small_jpeg()  # the shards are tiny on purpose: the count is the load
        started = time.monotonic()
        upload_scale_data(direct, "scale", shards=args.shards, tree=args.tree, image=image)
        big = os.urandom(4 << 20)
        _upload(direct, "scale", [(f"big/train-{n:06d}.tar", _tar([(f"b{n}-{k}", big, k) for k in range(4)]))
                                  for n in range(4)], threads=4)
        uploaded_s = time.monotonic() - started
        results: dict = {"far_profile": profile.to_dict(), "jobs": args.jobs, "upload_s": round(uploaded_s, 1)}
        for name, uri in (("tiny_shards", f"s3://scale/{SHARDS_PREFIX}"), ("large_image_shards", "s3://scale/big/")):
            results[name] = {mode: _keep(run_indexed(env, uri=uri, read=mode, jobs=args.jobs,
                                                      index_out=os.path.join(home, f"{name}-{mode}.json")))
                             for mode in ("stream", "headers", "auto")}
        results["class_tree"] = _keep(run_indexed(env, uri=f"s3://scale/{TREE_PREFIX}",
                                                   index_out=os.path.join(home, "tree.json")))
        text = open(os.path.join(home, "tiny_shards-auto.json"), "rb").read()
        loads = []
        for _ in range(5):
            begun = time.perf_counter()
            manifest, _ = from_json_text(text, "index")
            loads.append(time.perf_counter() - begun)
        results["index_load_s_median"] = round(statistics.median(loads), 3)
        results["index_load_shards"] = len(manifest.shards)
        results["index_mb"] = round(len(text) / 1e6, 2)
        results["loadavg_before"] = load_before
        results["loadavg_after"] = open("/proc/loadavg").read().split()[:3]
        print(json.dumps(results, indent=1))
    finally:
        server.stop()
        shutil.rmtree(home, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
