"""``resnet.py bench`` and ``resnet.py demo``: their arguments and what they run; ``resnet.py`` hooks them in
beside the library's own commands (``add_commands``), so the wheel carries no benchmark.

With ``--source-kind`` the command keeps its earlier meaning (one kind's loader
alone, one JSON line); without it, it runs the side-by-side sweep.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
from typing import Any

from benchmarks.harness.config import ACCELERATORS, PRESETS, SUITES
from benchmarks.harness.stores import STORE_CHOICES
from mountctl import BACKEND_NAMES, InvalidSpec
from mountctl.pytorch.data.decode.device_decode import DECODE_CHOICES
from mountctl.pytorch.data.sources import SOURCE_KINDS
from mountctl.pytorch.data.sources.mountpoint import MountpointOptions, add_mountpoint_arguments

__all__ = ["add_commands", "add_bench_arguments", "bench_config", "run_bench", "DEFAULT_URI"]

DEFAULT_URI = "s3://mountctl/bench/"  # on the embedded local S3, as benchmarks/bench.sh uses it


def _counts(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a comma-separated list of numbers") from None


def _words(text: str) -> tuple[str, ...]:
    return tuple(part.strip() for part in text.split(",") if part.strip())


def add_bench_arguments(bench: argparse.ArgumentParser) -> None:
    bench.add_argument("uri", nargs="?", default=None,
                       help="s3://bucket/prefix/: the sweep makes (or reuses) its datasets under it "
                       f"(default: {DEFAULT_URI} on the embedded local S3, started if it is not running); "
                       "a prefix holding your own indexed data (index.wids.json, or --index) is benched as it is "
                       "(docs/own-data.md); with --source-kind, a dataset written by `make`")
    bench.add_argument("--quick", action="store_true", help="a first look: one dataset, 2 workers, the far store")
    bench.add_argument("--preset", choices=list(PRESETS), default=None, help="sweep preset (--quick = quick)")
    bench.add_argument("--num-workers", type=_counts, default=None, help="worker counts, e.g. 1,2,4")
    bench.add_argument("--shard-sizes", type=_words, default=None, help="e.g. 16MB,100MB")
    bench.add_argument("--dataset-sizes", type=_counts, default=None, help="images per dataset, e.g. 2000,8000")
    bench.add_argument("--image-size", type=int, default=None, help="loader datasets' image side (default 224)")
    bench.add_argument("--batch-size", type=int, default=None)
    bench.add_argument("--kinds", type=_words, default=None, help=f"source kinds (default {','.join(SOURCE_KINDS)})")
    bench.add_argument("--backends", type=_words, default=None, help="mount programs (default: every installed)")
    bench.add_argument("--train-steps", type=int, default=None, help="measured ResNet-50 steps per source")
    bench.add_argument("--no-train", action="store_true", help="loader cells only")
    bench.add_argument("--accelerator", choices=ACCELERATORS, default="cpu",
                       help="gpu: training cells in 16-mixed on the GPU, plus the GPU-only ceiling")
    bench.add_argument("--decode", choices=DECODE_CHOICES, default="auto",
                       help="training cells: where JPEGs are decoded (as `resnet.py train --decode`)")
    bench.add_argument("--no-bytes", action="store_true", help="no bytes-path or random-read cells")
    bench.add_argument("--bytes-only", action="store_true",
                       help="only the limits, bytes-path and random-read cells (no loader or training cells)")
    bench.add_argument("--bytes-readers", type=_counts, default=None,
                       help="parallel readers of the bytes-path cells (default 1,4)")
    bench.add_argument("--peers", type=_words, default=None,
                       help="peer libraries read the same samples in their own formats (default litdata,streaming; "
                       "'' for none)")
    bench.add_argument("--peer-data", default=None, metavar="s3://BUCKET/PREFIX/",
                       help="where the peers' copies are written (default: beside datasets `make` wrote; required "
                       "on your own data, which nothing is written into or beside)")
    bench.add_argument("--index", default=None, metavar="PATH|s3://...",
                       help="your own data's index where it is not beside the data (as `resnet.py train --index`)")
    bench.add_argument("--suite", choices=SUITES, default="all",
                       help="all (default): every cell; checkpoint: only checkpoint save/load on every route; "
                       "node: 8 rank processes x 8 readers on one shared mount per program (docs/scale.md); mlperf: "
                       "MLPerf Storage's DLIO workloads per route, in accelerators kept at AU >= 90 %% (docs/mlperf.md; "
                       "needs scripts/setup_dlio.sh; --quick or --preset tiny for a shorter run)")
    bench.add_argument("--node-object-mb", type=int, default=16,
                       help="--suite node: size of each of its 64 objects, MiB (default 16)")
    bench.add_argument("--node-memory-mb", type=int, default=512,
                       help="--suite node: the mount's memory bound, MiB (default 512)")
    bench.add_argument("--store", choices=STORE_CHOICES, default=None,
                       help="local: the endpoint itself; far: the same bucket through a far-store proxy (S3's "
                       "latency and per-connection rate); both (default; --quick: far): every cell in each. An "
                       "endpoint that is not on this machine is recorded as store \"remote\" and no proxy is started")
    bench.add_argument("--far-latency-ms", type=float, default=None,
                       help="far store: delay added to each request (default: the proxy's profile)")
    bench.add_argument("--far-rate-mb-s", type=float, default=None,
                       help="far store: MB/s per connection (default: the proxy's profile)")
    bench.add_argument("--out", default="bench-results", help="where the JSON, Markdown and PNG go")
    bench.add_argument("--no-progress", action="store_true")
    bench.add_argument("--seed", type=int, default=0)
    single = bench.add_argument_group("one source kind's loader alone (the earlier `bench`)")
    single.add_argument("--source-kind", choices=list(SOURCE_KINDS), default=None)
    single.add_argument("--epochs", type=int, default=1)
    single.add_argument("--warmup-batches", type=int, default=5)
    single.add_argument("--backend", choices=BACKEND_NAMES, default="auto")
    single.add_argument("--mount-dir", default=None)
    add_mountpoint_arguments(single)


def bench_config(args: argparse.Namespace) -> Any:
    """What ``bench`` will run, built from its arguments and checked, with nothing started (the command's dry run):
    a wrong argument fails here, before the embedded local S3 or any proxy starts.

    ``--store`` left out is both stores, or the far store with ``--quick``, in every suite (``default_store``).
    """
    from benchmarks.harness.config import default_store, preset
    from benchmarks.harness.stores import far_profile

    far_profile(args.far_latency_ms, args.far_rate_mb_s)  # a bad latency or rate fails here, in every suite
    if args.from_index and args.source_kind is None:
        raise InvalidSpec("--from-index applies to one source kind's loader (--source-kind mountpoint); the sweep "
                          "measures mount-s3 mounted from the index as a route of its own (mountpoint/mount-s3+index)"
                          ": drop --from-index")
    if args.suite == "mlperf":
        from benchmarks.harness.mlperf import MlperfConfig

        return MlperfConfig(uri=args.uri or DEFAULT_URI, scale=args.preset or ("quick" if args.quick else "full"),
                            backends=args.backends or (), store=args.store or default_store(args.quick),
                            far_latency_ms=args.far_latency_ms, far_rate_mb_s=args.far_rate_mb_s, out=args.out)
    if args.source_kind is not None:
        from benchmarks.harness.loader import BenchConfig

        if args.uri is None:
            raise InvalidSpec("with --source-kind, give the URI of a dataset written by `resnet.py make`")
        workers = args.num_workers or (2,)
        if len(workers) != 1:
            raise InvalidSpec("with --source-kind, give one --num-workers count")
        return BenchConfig(
            uri=args.uri, source_kind=args.source_kind, batch_size=args.batch_size or 256, num_workers=workers[0],
            epochs=args.epochs, warmup_batches=args.warmup_batches, seed=args.seed,
            mountpoint=MountpointOptions.from_args(args))
    if args.suite == "node":
        from benchmarks.harness.node_scale import NodeScaleConfig

        if args.node_object_mb < 1:
            raise InvalidSpec(f"--node-object-mb must be at least 1, not {args.node_object_mb}")
        return NodeScaleConfig(
            uri=args.uri or DEFAULT_URI, object_mb=args.node_object_mb, memory_mb=args.node_memory_mb,
            backends=args.backends or (), store=args.store or default_store(args.quick),
            far_latency_ms=args.far_latency_ms, far_rate_mb_s=args.far_rate_mb_s)
    overrides: dict[str, Any] = {
        "uri": args.uri or DEFAULT_URI, "num_workers": args.num_workers, "shard_sizes": args.shard_sizes,
        "dataset_sizes": args.dataset_sizes, "image_size": args.image_size, "batch_size": args.batch_size,
        "loader_kinds": args.kinds, "backends": args.backends, "train_steps": args.train_steps,
        "accelerator": args.accelerator, "decode": args.decode, "bytes_readers": args.bytes_readers,
        "bytes_cells": False if args.no_bytes else None, "loader_cells": False if args.bytes_only else None,
        "train": False if (args.no_train or args.bytes_only) else None, "out": args.out,
        "progress": not args.no_progress, "seed": args.seed, "suite": args.suite, "store": args.store,
        "far_latency_ms": args.far_latency_ms, "far_rate_mb_s": args.far_rate_mb_s, "peers": args.peers,
        "peer_data": args.peer_data, "index": args.index}
    return preset(args.preset or ("quick" if args.quick else "full"), **overrides)


def run_bench(args: argparse.Namespace, config: Any) -> int:
    """Run what ``bench_config(args)`` built.

    SIGTERM (a scheduler, ``kill``, ``timeout``) takes Ctrl-C's way out once the run holds anything (a mount,
    the embedded S3): every ``with`` and ``finally`` stops what it started, then one line and exit 143."""
    try:
        return _run_bench(args, config)
    except KeyboardInterrupt as exc:
        kept = _keep_partial(exc, config)
        if kept:
            raise KeyboardInterrupt(kept) from None  # resnet.py prints "interrupted; <kept>" in one line
        raise
    except SystemExit as exc:
        if exc.code in (128 + signal.SIGTERM, 128 + signal.SIGHUP):  # mountctl's way out on those signals
            kept = _keep_partial(exc, config)
            print(f"resnet.py bench: stopped by {signal.Signals(exc.code - 128).name}" + (f"; {kept}" if kept else ""),
                  file=sys.stderr, flush=True)
        raise


def _keep_partial(stop: BaseException, config: Any) -> str:
    """Write the cells a stopped sweep had measured (``sweep.run_sweep`` hands them over on the exception), marked
    as interrupted; what to say about them, or '' when nothing was measured yet."""
    partial = getattr(stop, "partial_result", None)
    if partial is None:
        return ""
    from benchmarks.harness.report import write_report

    try:
        paths = write_report(partial, config.out)
    except Exception as exc:  # the stop itself is the news: a report that cannot be written is said, not raised
        return f"the {len(partial['cells'])} cells measured before the stop could not be written: {exc}"
    return f"kept the {len(partial['cells'])} cells measured before the stop in {paths['json']}"


def _run_bench(args: argparse.Namespace, config: Any) -> int:
    from benchmarks.harness.loader import BenchConfig, bench_loader
    from benchmarks.harness.mlperf import MlperfConfig, run_mlperf_command
    from benchmarks.harness.node_scale import NodeScaleConfig
    from mountctl import uri_or_embedded

    if isinstance(config, MlperfConfig):
        return run_mlperf_command(config, args.uri, DEFAULT_URI, progress=not args.no_progress)
    if isinstance(config, BenchConfig):
        print(json.dumps(bench_loader(config)), flush=True)
        return 0
    if isinstance(config, NodeScaleConfig):
        return _node(config, args)
    from benchmarks.harness.report import markdown, write_report
    from benchmarks.harness.sweep import run_sweep

    with uri_or_embedded(args.uri, DEFAULT_URI):
        result = run_sweep(config)
    paths = write_report(result, config.out)
    print(markdown(result))
    print("wrote " + ", ".join(paths.values()), flush=True)
    return 0


def _node(config: Any, args: argparse.Namespace) -> int:
    from benchmarks.harness.node_scale import node_markdown, run_node_scale, write_node_report
    from mountctl import uri_or_embedded

    with uri_or_embedded(args.uri, DEFAULT_URI):
        result = run_node_scale(config)
    print(node_markdown(result))
    print("wrote " + write_node_report(result, args.out), flush=True)
    return 0


def _demo_config(args: argparse.Namespace) -> Any:
    from benchmarks.harness.demo import DemoConfig

    return DemoConfig(uri=args.uri or DemoConfig.uri, num_images=args.num_images, image_size=args.image_size,
                      batch_size=args.batch_size, max_epochs=args.max_epochs, num_workers=args.num_workers,
                      kinds=tuple(args.kinds), store=args.store, far_latency_ms=args.far_latency_ms,
                      far_rate_mb_s=args.far_rate_mb_s)


def _demo(args: argparse.Namespace, config: Any) -> int:
    from benchmarks.harness.demo import DemoConfig, run_demo
    from mountctl import uri_or_embedded

    with uri_or_embedded(args.uri, DemoConfig.uri):
        rows = run_demo(config)
    return 0 if all(row["status"] == 0 and row["summary"] for row in rows) else 1


def add_commands(commands: Any) -> None:
    """``bench`` and ``demo`` on ``resnet.py``'s subcommands (``mountctl.pytorch.cli.build_parser``'s hook)."""
    bench = commands.add_parser("bench", help="every source kind side by side with the local-disk and raw-GET "
                                "limits: loader and ResNet-50 training throughput, JSON + Markdown + PNG")
    add_bench_arguments(bench)
    bench.set_defaults(func=run_bench, configure=bench_config)

    from benchmarks.harness.demo import DemoConfig

    demo = commands.add_parser("demo", help="make a small dataset, train with each source kind, compare images/s")
    demo.add_argument("uri", nargs="?", default=None,
                      help="s3://bucket/prefix/ for the demo's dataset (default: s3://mountctl/demo-shards/ "
                      "on the embedded local S3, started if it is not running)")
    demo.add_argument("--num-images", type=int, default=DemoConfig.num_images)  # the defaults are DemoConfig's
    demo.add_argument("--image-size", type=int, default=DemoConfig.image_size)
    demo.add_argument("--batch-size", type=int, default=DemoConfig.batch_size)
    demo.add_argument("--max-epochs", type=int, default=DemoConfig.max_epochs,
                      help="default 2: epoch 1 and epoch 2 shown apart")
    demo.add_argument("--num-workers", type=int, default=DemoConfig.num_workers)
    demo.add_argument("--kinds", nargs="+", choices=list(SOURCE_KINDS), default=list(SOURCE_KINDS))
    demo.add_argument("--store", choices=("local", "far"), default="far",
                      help="far (default): train and bench read through a proxy with S3's latency and rate, so the "
                      "table shows what a user on S3 sees; local: the endpoint itself. A store not on this machine "
                      "is read as it is")
    demo.add_argument("--far-latency-ms", type=float, default=None, help="far store: delay per request")
    demo.add_argument("--far-rate-mb-s", type=float, default=None, help="far store: MB/s per connection")
    demo.set_defaults(func=_demo, configure=_demo_config)
