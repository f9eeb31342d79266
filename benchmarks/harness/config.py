"""What one benchmark run measures: the sweep, as a frozen, validated dataclass, and its presets."""

from __future__ import annotations

from dataclasses import dataclass, replace

from benchmarks.harness.stores import check_store_choice, far_profile
from mountctl import InvalidSpec, parse_s3_uri
from mountctl.pytorch.data.decode.device_decode import DECODE_CHOICES
from mountctl.pytorch.data.sources import SOURCE_KINDS
from mountctl.pytorch.data.synthetic import parse_size

__all__ = ["DatasetSpec", "SweepConfig", "PRESETS", "ACCELERATORS", "SUITES", "QUICK_EXPECTED", "default_store"]

ACCELERATORS = ("cpu", "gpu")
PEERS = ("litdata", "streaming")  # the import name of each peer library (peer_data.py, peers.py)
# checkpoint: only the checkpoint cells (benchmark/checkpoint_cells.py); node: only the 64 readers on one mount
# (benchmark/node_scale.py), run before any sweep is configured; mlperf: DLIO's workloads (benchmark/mlperf.py)
SUITES = ("all", "checkpoint", "node", "mlperf")
FAR_CELLS = ("all", "loader")  # SweepConfig.far_cells


@dataclass(frozen=True)
class DatasetSpec:
    """One synthetic dataset of the sweep; its prefix names its recipe so a later run reuses it."""

    num_images: int
    shard_size: str  # as written on the command line, e.g. "16MB"
    image_size: int

    def __post_init__(self) -> None:
        parse_size(self.shard_size)  # raises InvalidSpec for a bad size
        if self.num_images < 1 or self.image_size < 8:
            raise InvalidSpec(f"a bench dataset needs images (>= 1) of at least 8 px, not {self}")

    @property
    def label(self) -> str:
        return f"img{self.image_size}-{self.shard_size}-n{self.num_images}"

    def uri(self, base: str) -> str:
        return base + self.label + "/"


@dataclass(frozen=True)
class SweepConfig:
    uri: str  # s3://bucket/prefix/ under which the bench keeps its datasets
    num_workers: tuple[int, ...] = (1, 2, 4)
    shard_sizes: tuple[str, ...] = ("16MB", "100MB")
    dataset_sizes: tuple[int, ...] = (2000, 8000)
    image_size: int = 224
    batch_size: int = 64
    loader_kinds: tuple[str, ...] = tuple(SOURCE_KINDS)
    backends: tuple[str, ...] = ()  # () : every installed mount program
    warmup_batches: int = 3
    shuffle_buffer: int = 256  # per worker; small, so reading is measured and not done during warm-up
    get_threads: int = 8
    # The bytes path (tar walk, no decode) and 64 KiB random reads, per route, epochs 1 and 2.
    bytes_cells: bool = True
    loader_cells: bool = True  # False (--bytes-only): no first-sample or loader cells
    bytes_readers: tuple[int, ...] = (1, 4)
    random_reads: int = 400
    get_part_size: str = "8MB"
    # Training: ResNet-50, few steps; on a CPU small images so that a step takes a second, not ten.
    train: bool = True
    train_image_size: int = 64
    train_batch_size: int = 32
    train_steps: int = 8
    train_warmup_steps: int = 3
    train_workers: int = 2
    accelerator: str = "cpu"
    decode: str = "auto"  # training cells: where JPEGs are decoded (auto: on the GPU when training on one)
    out: str = "bench-results"
    quick: bool = False
    progress: bool = True
    seed: int = 0
    suite: str = "all"
    # Checkpoint cells (checkpoint_cells.py): a torchvision model's state with its optimizer ("" for none)
    # and a synthetic state of this many MiB.
    checkpoint_model: str = "resnet50"
    checkpoint_mb: int = 1024
    # Map-style cells (map_cells.py: a files layout and random access) and checkpoint cells: off in --quick.
    map_cells: bool = True
    checkpoints: bool = True
    # The standard-loader cells (standard_cells.py: torchvision ImageFolder, shuffle, with and without
    # ReadAheadSampler): in --quick too, so that a standard loader through a mount is never left unmeasured.
    standard_cells: bool = True
    standard_images: int | None = None  # images in its class tree; None: 3,000, or 400 with --quick
    # Peer libraries read the same samples in their own formats (peers.py): loader and bytes cells per dataset.
    peers: tuple[str, ...] = PEERS
    # Which stores every cell reads through (stores.py): the endpoint itself, a far-store proxy before it,
    # or both; the far profile's latency and rate (None: the proxy's defaults).
    store: str = "both"
    # What the far store runs when both stores do: "all" (every cell, side by side) or "loader" (the raw GET,
    # first-sample and loader cells only: the tests' tiny sweep, where the far store's other cells cost about
    # half the sweep's CPU and show nothing that the local store's do not).
    far_cells: str = "all"
    far_latency_ms: float | None = None
    far_rate_mb_s: float | None = None
    # A user's own dataset (own_data.py): its index where it is not beside the data (--index), and where the
    # peers' copies go (--peer-data; required for a user's data, which nothing is written into or beside).
    index: str | None = None
    peer_data: str | None = None

    def __post_init__(self) -> None:
        check_store_choice(self.store)
        far_profile(self.far_latency_ms, self.far_rate_mb_s)  # a bad latency or rate fails here
        if self.far_cells not in FAR_CELLS:
            raise InvalidSpec(f"far_cells must be one of {', '.join(FAR_CELLS)}, not {self.far_cells!r}")
        if self.suite not in SUITES:
            raise InvalidSpec(f"--suite must be one of {', '.join(SUITES)}, not {self.suite!r}")
        location = parse_s3_uri(self.uri)
        uri = str(location)
        object.__setattr__(self, "uri", uri if uri.endswith("/") else uri + "/")
        if not self.num_workers or min(self.num_workers) < 0:
            raise InvalidSpec(f"--num-workers needs one or more counts >= 0, not {self.num_workers}")
        if not self.shard_sizes or not self.dataset_sizes:
            raise InvalidSpec("the sweep needs at least one shard size and one dataset size")
        for size in self.shard_sizes:
            parse_size(size)
        unknown = [k for k in self.loader_kinds if k not in SOURCE_KINDS]
        if unknown:
            raise InvalidSpec(f"unknown source kinds {unknown}: choose from {', '.join(SOURCE_KINDS)}")
        if self.accelerator not in ACCELERATORS:
            raise InvalidSpec(f"--accelerator must be one of {', '.join(ACCELERATORS)}, not {self.accelerator!r}")
        if min(self.batch_size, self.train_batch_size, self.train_steps, self.get_threads) < 1:
            raise InvalidSpec("batch sizes, training steps and GET threads must be at least 1")
        if self.train_warmup_steps < 0 or self.warmup_batches < 0 or self.shuffle_buffer < 0:
            raise InvalidSpec("warm-up steps and batches cannot be negative")
        parse_size(self.get_part_size)
        if not self.bytes_readers or min(self.bytes_readers) < 1 or self.random_reads < 1:
            raise InvalidSpec("the bytes cells need reader counts >= 1 and at least one random read")
        if not set(self.peers) <= set(PEERS):
            raise InvalidSpec(f"--peers takes {', '.join(PEERS)} (comma-separated, or '' for none), not {self.peers}")
        if self.peer_data is not None:
            object.__setattr__(self, "peer_data", str(parse_s3_uri(self.peer_data)))  # a bad URI fails here
        twice = sorted({peer for peer in self.peers if self.peers.count(peer) > 1})
        if twice:
            raise InvalidSpec(f"--peers names {', '.join(twice)} more than once: each peer runs its cells once")
        if self.standard_images is not None and self.standard_images < 10:
            raise InvalidSpec(f"the standard-loader cell needs at least 10 images (one per class), not "
                              f"{self.standard_images}")
        if self.decode not in DECODE_CHOICES:
            raise InvalidSpec(f"--decode must be one of {', '.join(DECODE_CHOICES)}, not {self.decode!r}")

    @property
    def datasets(self) -> tuple[DatasetSpec, ...]:
        return tuple(DatasetSpec(n, s, self.image_size) for s in self.shard_sizes for n in self.dataset_sizes)

    @property
    def runs_checkpoints(self) -> bool:
        """The checkpoint cells run: in a preset that has them, and always with ``--suite checkpoint``."""
        return self.checkpoints or self.suite == "checkpoint"

    @property
    def train_dataset(self) -> DatasetSpec:
        # One epoch is exactly the warm-up plus the measured steps.
        images = self.train_batch_size * (self.train_steps + self.train_warmup_steps)
        return DatasetSpec(images, "16MB", self.train_image_size)

    @property
    def train_precision(self) -> str:
        from mountctl.pytorch.training.trainer import default_precision

        # The published example's setting on a GPU; on a CPU the trainer's own default.
        return "16-mixed" if self.accelerator == "gpu" else default_precision("cpu")


# --quick: a first look that costs what one should (issue #26.13: with both stores and every cell kind it cost
# far more).  The far store only (the store shaped like S3; --store both adds the endpoint itself), one
# dataset, the default worker count: the raw-GET limit, every source kind's first-sample and loader cells, the
# bytes and random-read cells, the peers' loader and bytes cells, the standard-loader cells and training; no
# map-style or checkpoint cells (--preset full has them; --suite checkpoint runs the checkpoint cells alone).
# How long a run takes: the start times of the three runs behind BENCHMARKS.md's "Loader and training" section.
QUICK_EXPECTED = "about 6 minutes on two idle CPU cores once its datasets exist (more on a fresh clone or a busy machine)"
PRESETS: dict[str, dict[str, object]] = {
    "full": {},
    # 4 MB shards: 2,000 images make about 8 shards per reader, so cross-file read-ahead can show (16 MB shards
    # gave two per reader, and half of every epoch was a cold first shard).
    "quick": {"num_workers": (2,), "shard_sizes": ("4MB",), "dataset_sizes": (2000,), "train_steps": 4,
              "train_warmup_steps": 2, "train_batch_size": 16, "random_reads": 100, "checkpoint_model": "resnet18",
              "checkpoint_mb": 256, "quick": True, "store": "far", "map_cells": False, "checkpoints": False},
    # For tests: a few tiny images; every cell still runs through the real code paths.
    "tiny": {"num_workers": (1,), "shard_sizes": ("64KB",), "dataset_sizes": (96,), "image_size": 32,
             "batch_size": 16, "warmup_batches": 1, "shuffle_buffer": 16, "train_image_size": 32, "train_batch_size": 8,
             "train_steps": 2, "train_warmup_steps": 1, "train_workers": 1, "bytes_readers": (1, 2), "random_reads": 8,
             "checkpoint_model": "", "checkpoint_mb": 4, "quick": True, "far_cells": "loader",
             # the peer and standard-loader cells have their own tests (tests/test_peers.py,
             # tests/test_readahead_sampler_mount.py)
             "peers": (), "standard_cells": False},
}


def default_store(quick: bool) -> str:
    """``--store`` when it is not given, in every suite: both stores, or the far store alone with ``--quick``."""
    return str(PRESETS["quick"]["store"]) if quick else SweepConfig.store


def preset(name: str, **overrides: object) -> SweepConfig:
    """A preset with the caller's choices on top (``None`` values mean "the preset's")."""
    if name not in PRESETS:
        raise InvalidSpec(f"unknown bench preset {name!r}: choose one of {', '.join(PRESETS)}")
    chosen = {k: v for k, v in overrides.items() if v is not None}
    base = SweepConfig(uri=str(chosen.pop("uri")))
    return replace(base, **{**PRESETS[name], **chosen})  # type: ignore[arg-type]  # checked in __post_init__
