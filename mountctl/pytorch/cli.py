"""The library's part of the ``resnet.py`` command line (make, index, train): ResNet-50 on WebDataset shards in
S3, read through a mount, s3torchconnector or s3fs. ``resnet.py`` adds the harness's bench and demo.

    python resnet.py make s3://BUCKET/shard-data/ --num-images 50000
    python resnet.py train s3://BUCKET/shard-data/ --source-kind mountpoint --batch-size 256 --max-epochs 3
    python resnet.py bench s3://BUCKET/bench/ --quick
    python resnet.py bench --quick
    python resnet.py bench s3://BUCKET/shard-data/ --source-kind s3io
    python resnet.py demo

The endpoint and credentials come from the standard AWS environment; for the
embedded local S3 run ``eval "$(mountctl local-s3 env)"`` first.  ``bench`` and
``demo`` without a URI use the embedded local S3 by themselves (starting it if
it is not running, and stopping it again if they started it).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from typing import Any

from mountctl import BACKEND_NAMES, ArgumentParser, MountctlError
from mountctl.pytorch.data.decode.device_decode import DECODE_CHOICES
from mountctl.pytorch.data.sources import SOURCE_KINDS  # light: the kinds import their libraries on use
from mountctl.pytorch.data.sources.mountpoint import add_mountpoint_arguments
from mountctl.pytorch.training.trainer import ARCHITECTURES  # light: torch loads inside train()

DESCRIPTION = ("ResNet-50 on WebDataset shards in S3, read through a mountctl mount (mountpoint), "
               "s3torchconnector (s3io) or s3fs (fsspec).")
PRECISIONS = ("32", "32-true", "16-mixed", "bf16-mixed", "16-true", "bf16-true", "64", "64-true")


def _make_config(args: argparse.Namespace) -> Any:
    from mountctl.pytorch.data.synthetic import MakeConfig, parse_size

    return MakeConfig(uri=args.uri, num_images=args.num_images, image_size=args.image_size,
                      num_classes=args.num_classes, shard_size=parse_size(args.shard_size), seed=args.seed,
                      jobs=args.jobs, layout=args.layout)


def _make(args: argparse.Namespace, config: Any) -> int:
    from mountctl.pytorch.data.synthetic import make_dataset

    result = make_dataset(config, progress=not args.no_progress)
    print(json.dumps(result.summary(config.uri)), flush=True)
    return 0


def _train_config(args: argparse.Namespace) -> Any:
    from mountctl.pytorch.data.sources.mountpoint import MountpointOptions
    from mountctl.pytorch.training.trainer import TrainConfig

    return TrainConfig(
        uri=args.uri, source_kind=args.source_kind, batch_size=args.batch_size, max_epochs=args.max_epochs,
        max_steps=args.max_steps, num_workers=args.num_workers, precision=args.precision,
        devices=args.devices, strategy=args.strategy, accelerator=args.accelerator,
        checkpoint_dir=args.checkpoint_dir, resume=args.resume, seed=args.seed, lr=args.lr,
        shuffle_buffer=args.shuffle_buffer, warmup_batches=args.warmup_batches, progress=not args.no_progress,
        log_dir=args.log_dir, decode=args.decode, checkpoint_every_n_steps=args.checkpoint_every_n_steps,
        sample_log=args.sample_log, num_nodes=args.num_nodes, arch=args.arch, random_access=args.random_access,
        data_wait_threshold=args.data_wait_threshold, metrics_port=args.metrics_port, index=args.index,
        mountpoint=MountpointOptions.from_args(args))


def _train(args: argparse.Namespace, config: Any) -> int:
    from mountctl.pytorch.training.trainer import train

    train(config)
    return 0


def _index_config(args: argparse.Namespace) -> Any:
    from mountctl.pytorch.data.index.indexer import IndexConfig

    return IndexConfig(uri=args.uri, index_out=args.index_out, label_field=args.label_field, read=args.read,
                       jobs=args.jobs, image_size=args.image_size)


def _index(args: argparse.Namespace, config: Any) -> int:
    from mountctl import resolve
    from mountctl.pytorch.data.index.indexer import index_data

    print(json.dumps(index_data(config, resolve(), progress=None if args.no_progress else sys.stderr)), flush=True)
    return 0


_Parser = ArgumentParser  # the core's: a usage error is one line and exits 1, like every other error


def build_parser(extra_commands: Callable[[Any], None] | None = None) -> argparse.ArgumentParser:
    parser = _Parser(prog="resnet.py", description=DESCRIPTION, epilog=__doc__.split("\n\n", 1)[1],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)

    make = commands.add_parser("make", help="write synthetic ImageNet-style WebDataset shards to S3")
    make.add_argument("uri", help="s3://bucket/prefix/ to write shards and manifest.json under")
    make.add_argument("--num-images", type=int, required=True)
    make.add_argument("--image-size", type=int, default=224, help="square side in pixels (default 224)")
    make.add_argument("--num-classes", type=int, default=1000)
    make.add_argument("--shard-size", default="100MB", help="target shard size, e.g. 100MB or 64MiB")
    make.add_argument("--seed", type=int, default=0)
    make.add_argument("--jobs", type=int, default=0, help="shards built and uploaded at once (default: CPU cores)")
    make.add_argument("--no-progress", action="store_true", help="no progress bar")
    make.add_argument("--layout", choices=("shards", "files"), default="shards",
                      help="shards: WebDataset tar shards (default); files: one JPEG object per sample, "
                      "ImageFolder layout PREFIX/train/<class>/<key>.jpg")
    make.set_defaults(func=_make, configure=_make_config)

    index = commands.add_parser("index", help="index your own data once (WebDataset shards or a class-per-folder "
                                "tree) so train can account for every sample; reads the data, never writes to it")
    index.add_argument("uri", help="s3://bucket/prefix/ holding .tar shards (or s3://bucket/prefix/train-{000000.."
                       "000099}.tar) or <class>/<image> folders; a prefix with make's manifest.json gains its tar index")
    index.add_argument("--index-out", default=None, metavar="PATH|s3://...",
                       help="where the index goes (default: index.wids.json beside the data); use it when the "
                       "data's prefix is read-only, then train with --index")
    index.add_argument("--label-field", default=None, metavar="F",
                       help="the field of each sample's .json that holds its class number (default: .cls, else .txt)")
    index.add_argument("--read", choices=("auto", "stream", "headers"), default="auto",
                       help="stream each shard, or read only its tar headers by ranged GETs; auto (default) times "
                       "the first shard and picks the cheaper")
    index.add_argument("--jobs", type=int, default=8, help="shards read at once (default 8)")
    index.add_argument("--image-size", type=int, default=224, help="the side training resizes and crops to")
    index.add_argument("--no-progress", action="store_true", help="no progress line")
    index.set_defaults(func=_index, configure=_index_config)

    train = commands.add_parser("train", help="train ResNet-50 on a dataset written by `make` or indexed by `index`")
    train.add_argument("uri", help="s3://bucket/prefix/ holding shards or class folders and their index, or "
                       "s3://bucket/prefix/train-{000000..000099}.tar (webdataset's brace pattern)")
    train.add_argument("--index", default=None, metavar="PATH|s3://...",
                       help="the dataset's index where it is not beside the data (what `index --index-out` wrote)")
    train.add_argument("--source-kind", choices=list(SOURCE_KINDS), default="mountpoint",
                       help="mountpoint: a shared mountctl mount; s3io: s3torchconnector; fsspec: s3fs")
    train.add_argument("--batch-size", type=int, default=256)
    train.add_argument("--max-epochs", type=int, default=None, help="default 1, or unlimited with --max-steps")
    train.add_argument("--max-steps", type=int, default=-1)
    train.add_argument("--num-workers", type=int, default=None, help="DataLoader workers per rank (default: "
                       "CPU cores, at most 8)")
    train.add_argument("--precision", choices=PRECISIONS, default=None,
                       help="default 16-mixed on GPU; bf16-mixed on CPUs with native bf16, else 32-true")
    train.add_argument("--backend", choices=BACKEND_NAMES, default="auto", help="mount program (mountpoint kind)")
    train.add_argument("--mount-dir", default=None, help="where to mount (mountpoint kind; default: managed)")
    train.add_argument("--devices", default="auto")
    train.add_argument("--num-nodes", type=int, default=1, help="machines, each running --devices ranks (under "
                       "torchrun or SLURM; see docs/several-machines.md)")
    train.add_argument("--strategy", default="auto", help="e.g. ddp")
    train.add_argument("--arch", choices=list(ARCHITECTURES), default="resnet50",
                       help="torchvision ResNet (default resnet50; resnet18 for quick runs)")
    train.add_argument("--accelerator", default="auto", help="cpu, gpu or auto")
    train.add_argument("--checkpoint-dir", default=None, help="where last.ckpt goes: s3://bucket/prefix/ "
                       "(s3torchconnector), fsspec+s3://bucket/prefix/ (s3fs), mount[+PROGRAM]://bucket/prefix/ (a "
                       "read-write mountctl mount for the run) or a path")
    train.add_argument("--checkpoint-every-n-steps", type=int, default=0, metavar="N",
                       help="also write last.ckpt every N steps; 0 (the default) is off: only at epoch ends and "
                       "at the end")
    train.add_argument("--resume", action="store_true", help="continue from last.ckpt in --checkpoint-dir, in "
                       "mid-epoch at the first sample its steps had not trained (any number of ranks and workers)")
    train.add_argument("--sample-log", default=None, metavar="FILE",
                       help="append 'key epoch global_step rank' per trained sample (FILE.rank<N> per rank when "
                       "several); flushed at each checkpoint")
    train.add_argument("--seed", type=int, default=0)
    train.add_argument("--lr", type=float, default=None, help="default 0.1 x batch size / 256")
    train.add_argument("--shuffle-buffer", type=int, default=1000, help="each shard's samples are permuted within "
                       "windows of this many (the most a reader holds); --resume needs the same value")
    train.add_argument("--warmup-batches", type=int, default=5, help="batches per epoch left out of images/s")
    train.add_argument("--no-progress", action="store_true", help="no progress bar")
    train.add_argument("--log-dir", default=None, help="write loss and img/s every 10 steps to "
                       "DIR/version_N/metrics.csv and a TensorBoard event file beside it; default: no metrics files")
    train.add_argument("--decode", choices=DECODE_CHOICES, default="auto",
                       help="where JPEGs are decoded: cpu (DataLoader workers), gpu (workers yield bytes, the "
                       "training GPU decodes with nvJPEG), auto (gpu when training on CUDA, else cpu)")
    train.add_argument("--data-wait-threshold", type=float, default=0.2, metavar="F",
                       help="say so (one line) when an epoch spends more than this share of its step time waiting "
                       "for data (default 0.2); the share is data_wait_fraction in the summary and metrics.csv")
    train.add_argument("--metrics-port", type=int, default=None, metavar="N",
                       help="rank 0 serves data_wait_fraction for Prometheus on 127.0.0.1:N/metrics while it trains")
    train.add_argument("--random-access", action="store_true", help="indexed shards: read map-style, one ranged "
                       "read per sample, for a global shuffle (the files layout is always read map-style)")
    add_mountpoint_arguments(train)
    train.set_defaults(func=_train, configure=_train_config)

    if extra_commands is not None:  # resnet.py adds the harness's bench and demo (benchmarks/, not in the wheel)
        extra_commands(commands)
    return parser


def _message(exc: BaseException) -> str:
    """The error's own message; a DataLoader worker's error arrives wrapped in its traceback."""
    text = str(exc)
    if "Original Traceback" in text:
        last = [line for line in text.splitlines() if line.strip()][-1]
        return last.split(": ", 1)[1] if last.startswith(type(exc).__module__) else last
    return text


def configure(argv: list[str], extra_commands: Callable[[Any], None] | None = None
              ) -> tuple[argparse.Namespace, Any]:
    """The command's dry run: its arguments parsed and what it would run built and checked, with nothing started
    (no server, no S3 request, no mount).  A usage error exits 1 (``SystemExit``); a wrong value raises
    ``MountctlError``.  ``main`` does this first, so a bad argument never waits for a server to start."""
    args = build_parser(extra_commands).parse_args(argv)
    return args, args.configure(args)


def main(argv: list[str] | None = None, extra_commands: Callable[[Any], None] | None = None) -> int:
    args = build_parser(extra_commands).parse_args(argv)
    try:
        return args.func(args, args.configure(args))
    except MountctlError as exc:
        print(f"resnet.py {args.command}: error: {_message(exc)}", file=sys.stderr)
        return 1
    except KeyboardInterrupt as exc:  # a command may say what was kept and how to go on
        print(f"resnet.py {args.command}: interrupted" + (f"; {exc}" if str(exc) else ""), file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
