#!/usr/bin/env python3
"""Big prefixes on the far store (issue #25 item 5): `train` to its first batch, the cache plan, LISTs, the exporter.

    PYTHONPATH=$PWD .venv/bin/python benchmarks/lab/big_prefix.py [--shards 10000] [--tree 100000] [--steps 3]

Runs its own embedded S3 (in a private temporary MOUNTCTL_HOME, removed at the end) behind a far proxy that
logs every request (20 ms per request, 50 MB/s per connection), uploads the two datasets of
``benchmarks/lab/index_scale.py`` directly (a prefix of tiny WebDataset shards and a class tree of one object per
sample), indexes both through the proxy, then per route runs ``resnet.py train`` for ``--steps`` steps in a
child process and reports:

- seconds from launching ``train`` to its first batch in hand (Python start-up, imports, the index, the
  start-time check and the mount included), and the trainer's own ``first_batch_s`` (from its epoch's start);
- the cache plan the trainer made (``source.cache_size_mb``: from the index's byte count, no LIST);
- the requests the store saw from the launch to the first batch and over the whole run: LISTs as pages
  (a ``max-keys`` of 2 or less is an existence probe, counted apart), HEADs and GETs, and how many LIST
  passes over the dataset that is (one pass = the pages one paginated LIST of it takes);
- the exporter (``mountctl exporter``) with the dataset mounted: median of ``--scrapes`` scrapes of
  ``/metrics`` and of ``/readyz``, and the LISTs sent meanwhile.

Routes: the mountpoint kind through each installed mount program, s3io, fsspec; on the class tree the same
kinds read map-style (the files layout always is).  The launch-to-first-batch clock is the only thing added
to the trainer: a wrapper notes the wall time of its first ``on_train_batch_start`` on stderr.

Prints one JSON object, with /proc/loadavg before and after (this is a benchmark: the machine may be shared).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from index_scale import (  # noqa: E402  (the dataset builder and indexer runner are index_scale's)
    REPO,
    SHARDS_PREFIX,
    TREE_CLASSES,
    TREE_PREFIX,
    run_indexed,
    small_jpeg,
    upload_scale_data,
)

BUCKET = "scale"
PAGE = 1000  # objects per LIST page (S3's and SeaweedFS's default max-keys)
PROBE_MAX_KEYS = 2  # a LIST asking for this few keys checks that something exists; it is no pass over the data

# ``resnet.py train`` unchanged, plus one clock reading: the wall time of its first batch, on stderr.
_FIRST_BATCH = "first-batch-at "
_FIRST_BATCH_LINE = re.compile(_FIRST_BATCH + r"(\d+\.\d+)")  # another line may end up joined to it
_TRAIN = f"""
import sys, time
from mountctl.pytorch.training import throughput
original, seen = throughput.ThroughputMonitor.on_train_batch_start, []
def first(self, *args, **kwargs):
    if not seen:
        seen.append(1)
        print("{_FIRST_BATCH}%.3f" % time.time(), file=sys.stderr, flush=True)
    return original(self, *args, **kwargs)
throughput.ThroughputMonitor.on_train_batch_start = first
from mountctl.pytorch.cli import main
sys.exit(main(sys.argv[1:]))
"""


@dataclasses.dataclass(frozen=True)
class Route:
    name: str
    kind: str
    backend: str = "auto"

    def argv(self) -> list[str]:
        return ["--source-kind", self.kind] + (["--backend", self.backend] if self.kind == "mountpoint" else [])


def routes(backends: Sequence[str]) -> list[Route]:
    """The mountpoint kind through each program, then the two client libraries."""
    return [Route(f"mount {b}", "mountpoint", b) for b in backends] + [Route("s3io", "s3io"), Route("fsspec", "fsspec")]


# -- the store's request log ------------------------------------------------------------------------------------

def log_lines(path: str) -> list[str]:
    try:
        with open(path) as f:
            return f.read().splitlines()
    except FileNotFoundError:
        return []


def settled_count(path: str, timeout_s: float = 5.0) -> int:
    """Lines logged so far, once nginx has written the last one (it logs a request when its response ends)."""
    count, deadline = -1, time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        now = len(log_lines(path))
        if now == count:
            break
        count = now
        time.sleep(0.3)
    return count


def tally(lines: Sequence[str], bucket: str, prefix: str) -> dict[str, Any]:
    """The requests in ``lines`` (``METHOD URI STATUS BYTES``): LIST pages of the dataset (``prefix`` and below),
    existence probes, other LISTs of the bucket (a mount program's bucket check), HEADs and GETs."""
    pages: dict[str, int] = {}
    examples: list[str] = []
    out = {"list_pages": 0, "list_probes": 0, "bucket_lists": 0, "head": 0, "get": 0, "other": 0}
    for line in lines:
        method, uri = line.split(" ", 2)[:2]
        parts = urlsplit(uri)
        query = parse_qs(parts.query, keep_blank_values=True)
        at_bucket = parts.path.strip("/") == bucket
        if method == "GET" and at_bucket and ("prefix" in query or "list-type" in query or not parts.query):
            if len(examples) < 8 and uri not in examples:
                examples.append(uri)
            listed = unquote(query.get("prefix", [""])[0])
            if int(query.get("max-keys", [PAGE])[0]) <= PROBE_MAX_KEYS:
                out["list_probes"] += 1
            elif listed.startswith(prefix):
                pages[listed] = pages.get(listed, 0) + 1
                out["list_pages"] += 1
            else:
                out["bucket_lists"] += 1
        elif method == "HEAD":
            out["head"] += 1
        elif method == "GET":
            out["get"] += 1
        else:
            out["other"] += 1
    out["list_pages_by_prefix"] = dict(sorted(pages.items(), key=lambda item: -item[1])[:5])
    out["list_prefixes"] = len(pages)
    out["list_examples"] = examples
    return out


def one_pass_pages(objects: int, folders: int = 1) -> int:
    """LIST pages of one pass over a dataset: one paginated LIST per folder of ``objects / folders`` objects."""
    return folders * max(1, math.ceil(objects / folders / PAGE))


# -- one training run -------------------------------------------------------------------------------------------

def train_route(route: Route, uri: str, index: str, env: dict[str, str], requests_log: str, *, steps: int,
                workers: int, batch_size: int, timeout_s: float = 900.0) -> dict[str, Any]:
    """``resnet.py train`` for ``steps`` steps in a child; its summary, time to first batch and requests."""
    argv = [sys.executable, "-c", _TRAIN, "train", uri, "--index", index, *route.argv(), "--max-steps", str(steps),
            "--batch-size", str(batch_size), "--num-workers", str(workers), "--arch", "resnet18",
            "--accelerator", "cpu", "--warmup-batches", "0", "--no-progress"]
    mark = settled_count(requests_log)
    at_first: list[int] = []
    first_at: list[float] = []
    errors: list[str] = []
    with tempfile.TemporaryFile("w+") as stdout:
        launched = time.time()
        child = subprocess.Popen(argv, env=env, cwd=REPO, stdout=stdout, stderr=subprocess.PIPE, text=True)

        def watch_stderr() -> None:
            # The only reader of stderr (communicate() would take lines from it), to its end: a full pipe
            # would stall the child.
            assert child.stderr is not None
            for line in child.stderr:
                found = _FIRST_BATCH_LINE.search(line)
                if found and not first_at:
                    first_at.append(float(found.group(1)))
                    at_first.append(len(log_lines(requests_log)))  # what the store had answered by then
                errors.append(line)

        reader = threading.Thread(target=watch_stderr, daemon=True)
        reader.start()
        try:
            child.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait(timeout=30)
            raise SystemExit(f"{route.name}: train did not finish within {timeout_s:g}s") from None
        finished = time.time()
        reader.join(timeout=30)
        stdout.seek(0)
        out = stdout.read()
    if child.returncode != 0 or not out.strip():
        raise SystemExit(f"{route.name}: train exited with {child.returncode}: {''.join(errors)[-3000:]}")
    summary = json.loads(out.strip().splitlines()[-1])
    lines = log_lines(requests_log)[mark:settled_count(requests_log)]
    start_lines = lines[:at_first[0] - mark] if at_first else lines
    epoch = summary["epochs"][0]
    bucket, prefix = urlsplit(uri).netloc, urlsplit(uri).path.lstrip("/")
    return {"route": route.name, "launch_to_first_batch_s": round(first_at[0] - launched, 2) if first_at else None,
            "trainer_first_batch_s": epoch["first_batch_s"], "run_s": round(finished - launched, 1),
            "steps": summary["global_step"], "images": summary["images"], "workers": summary["num_workers"],
            "cache_plan": {k: summary["source"].get(k) for k in ("backend", "cache_dir", "cache_size_mb")}
            if route.kind == "mountpoint" else None,
            "requests_to_first_batch": tally(start_lines, bucket, prefix),
            "requests_whole_run": tally(lines, bucket, prefix)}


# Mount programs that list a folder of their own accord, once per mount, shared by every rank and worker of the
# node: rclone looks a name up by reading its whole folder (kept for the metadata TTL); mountctl's mount-s3 sends a
# HEAD per lookup and lists a folder once, at the first file found in it, for its read-ahead across files. s3fs
# sends a HEAD only.
FOLDER_READERS = frozenset({"rclone", "mount-s3"})


def allowed_passes(route: Route, layout: str) -> int:
    """LIST passes over the dataset one job may make: the start-time ETag check (shards; a files layout's index
    names every object, so it has none) and, through a folder-reading program, that program's own pass."""
    return int(layout == "shards") + int(route.kind == "mountpoint" and route.backend in FOLDER_READERS)


def hot_path(result: dict[str, Any], pass_pages: int, allowed: int) -> dict[str, Any]:
    """LIST passes over the dataset up to the first batch and over the run (one pass = ``pass_pages`` pages)."""
    start, whole = result["requests_to_first_batch"]["list_pages"], result["requests_whole_run"]["list_pages"]
    return {"one_pass_pages": pass_pages, "allowed_passes": allowed,
            "list_passes_to_first_batch": round(start / pass_pages, 2),
            "list_passes_whole_run": round(whole / pass_pages, 2), "within": whole <= allowed * pass_pages}


# -- the exporter -----------------------------------------------------------------------------------------------

def _get(url: str, timeout_s: float = 10.0) -> tuple[int, str, float]:
    started = time.perf_counter()
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as response:
            return response.status, response.read().decode(), time.perf_counter() - started
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode(), time.perf_counter() - started


def exporter_scrapes(uris: Sequence[str], settings: Any, env: dict[str, str], requests_log: str, *,
                     scrapes: int, home: str) -> dict[str, Any]:
    """Mount each dataset (shared, ``auto``), start ``mountctl exporter``, and time its scrapes."""
    import contextlib

    import mountctl
    from mountctl.local_s3.ports import free_port

    port = free_port()
    base = f"http://127.0.0.1:{port}"
    with contextlib.ExitStack() as stack:
        mounts = [stack.enter_context(mountctl.mount(uri, settings=settings)) for uri in uris]
        log = stack.enter_context(open(os.path.join(home, "exporter.log"), "wb"))
        exporter = subprocess.Popen([sys.executable, "-m", "mountctl", "exporter", "--listen", f"127.0.0.1:{port}"],
                                    env=env, cwd=REPO, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        try:
            deadline = time.monotonic() + 120
            while True:
                try:
                    code, body, _ = _get(base + "/metrics", 5)
                    if code == 200 and all(f'dir="{m.path}"' in body and "mountctl_mount_up{" in body for m in mounts):
                        break
                except OSError:
                    pass
                if time.monotonic() > deadline or exporter.poll() is not None:
                    raise SystemExit(f"the exporter did not show the mounts within 120 s (see {log.name})")
                time.sleep(0.5)
            mark = settled_count(requests_log)
            metrics = [_get(base + "/metrics") for _ in range(scrapes)]
            ready = [_get(base + "/readyz") for _ in range(scrapes)]
            lines = log_lines(requests_log)[mark:settled_count(requests_log)]
        finally:
            exporter.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                exporter.wait(timeout=10)
            exporter.kill()  # nothing to do once it has exited
            exporter.wait(timeout=10)
    return {"mounts": [{"uri": uri, "backend": m.backend} for m, uri in zip(mounts, uris, strict=True)],
            "scrapes": scrapes,
            "metrics_median_ms": round(statistics.median(t for _, _, t in metrics) * 1000, 1),
            "metrics_max_ms": round(max(t for _, _, t in metrics) * 1000, 1),
            "metrics_codes": sorted({c for c, _, _ in metrics}),
            "readyz_median_ms": round(statistics.median(t for _, _, t in ready) * 1000, 1),
            "readyz_codes": sorted({c for c, _, _ in ready}),
            "requests_during_scrapes": tally(lines, BUCKET, "")}


# -- the run ----------------------------------------------------------------------------------------------------

def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shards", type=int, default=10_000, help="tiny shards (2 samples each) in one prefix")
    parser.add_argument("--tree", type=int, default=100_000, help=f"objects in a tree of {TREE_CLASSES} classes")
    parser.add_argument("--steps", type=int, default=3, help="training steps per route (default 3)")
    parser.add_argument("--workers", type=int, default=2, help="DataLoader workers per route (default 2)")
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--jobs", type=int, default=8, help="the indexer's shards at once")
    parser.add_argument("--scrapes", type=int, default=20)
    parser.add_argument("--routes", default="", help="comma-separated route names to run (default: all)")
    args = parser.parse_args()
    load_before = open("/proc/loadavg").read().split()[:3]
    home = tempfile.mkdtemp(prefix="big-prefix-home-")
    os.environ["MOUNTCTL_HOME"] = home
    import mountctl
    from mountctl.local_s3.far_proxy import FarProfile, FarProxy
    from mountctl.local_s3.server import LocalS3
    from mountctl.pytorch.data.index.manifest import from_json_text
    from mountctl.s3 import client as s3_client

    server = LocalS3(os.path.join(home, "s3"))
    proxy: FarProxy | None = None
    try:
        server.start(buckets=(BUCKET,))
        direct = server.settings(direct=True)
        proxy = FarProxy(direct.endpoint_url or "", os.path.join(home, "far"), FarProfile(), log_requests=True)
        far = dataclasses.replace(direct, endpoint_url=proxy.start())
        env = far.child_env({**os.environ, "PYTHONPATH": REPO, "OMP_WAIT_POLICY": "PASSIVE"})
        started = time.monotonic()
        upload_scale_data(s3_client(direct), BUCKET, shards=args.shards, tree=args.tree, image=small_jpeg())
        results: dict[str, Any] = {"far_profile": proxy.profile.to_dict(), "shards": args.shards,
                                   "tree_objects": args.tree, "steps": args.steps, "workers": args.workers,
                                   "batch_size": args.batch_size, "upload_s": round(time.monotonic() - started, 1)}
        datasets = {"shards": (f"s3://{BUCKET}/{SHARDS_PREFIX}", one_pass_pages(args.shards)),
                    "tree": (f"s3://{BUCKET}/{TREE_PREFIX}", one_pass_pages(args.tree, TREE_CLASSES))}
        wanted = {name.strip() for name in args.routes.split(",") if name.strip()}
        for name, (uri, pass_pages) in datasets.items():
            index = os.path.join(home, f"{name}.wids.json")
            indexed = run_indexed(env, uri=uri, read="stream", jobs=args.jobs, index_out=index, image_size=64)
            rows = []
            for route in routes(mountctl.installed_backends()):
                if wanted and route.name not in wanted:
                    continue
                row = train_route(route, uri, index, env, proxy.requests_path, steps=args.steps,
                                  workers=args.workers, batch_size=args.batch_size)
                rows.append({**row, **hot_path(row, pass_pages, allowed_passes(route, name))})
                print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
            with open(index, "rb") as f:
                manifest, _ = from_json_text(f.read(), index)
            results[name] = {"uri": uri, "index_s": indexed["seconds"], "samples": indexed["samples"],
                             "dataset_mb": round(manifest.total_bytes / (1 << 20), 1), "routes": rows}
        results["exporter"] = exporter_scrapes([uri for uri, _ in datasets.values()], far, env, proxy.requests_path,
                                               scrapes=args.scrapes, home=home)
        results["loadavg_before"] = load_before
        results["loadavg_after"] = open("/proc/loadavg").read().split()[:3]
        print(json.dumps(results, indent=1))
    finally:
        if proxy is not None:
            proxy.stop()
        server.stop()
        shutil.rmtree(home, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
