"""``resnet.py train``: ResNet-50 on a Lightning Trainer, reading shards through one source kind.

``train(TrainConfig(...))`` checks everything it can before the first step
(endpoint, manifest, shard sizes, checkpoint location), opens the source for
the whole run (the mountpoint kind mounts, shared by the ranks of the node),
trains, and prints one JSON summary line on rank 0.
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import asdict, dataclass, field
from typing import Any, TextIO

from mountctl import InvalidSpec, S3Settings, port_free, resolve
from mountctl.pytorch.data.decode.device_decode import resolve_decode
from mountctl.pytorch.data.index.location import parse_data_uri
from mountctl.pytorch.data.index.manifest import load_dataset_description
from mountctl.pytorch.data.sources import MountpointOptions, check_source_choice, open_source
from mountctl.pytorch.notices import quiet_known_notices
from mountctl.pytorch.worker_tmp import worker_tempdir

__all__ = ["TrainConfig", "train", "default_precision", "precision_rule", "cpu_flags", "default_num_workers", "ARCHITECTURES",
           "check_writable_file"]

# With --log-dir, a metrics.csv row every this many steps (Lightning's default of 50 leaves short runs empty).
_LOG_EVERY_N_STEPS = 10
ARCHITECTURES = ("resnet18", "resnet34", "resnet50", "resnet101", "resnet152")  # torchvision names


def default_num_workers() -> int:
    return min(8, os.cpu_count() or 1)


# CPU flags (as /proc/cpuinfo spells them) that mean native bf16 arithmetic.  Without them autocast
# to bf16 is emulated and trains slower than fp32 (measured in issue #9, on an AVX-512 Xeon without
# AVX512_BF16).  torch.ops.mkldnn._is_mkldnn_bf16_supported() is true on any AVX-512 CPU, so it
# cannot decide this.
_NATIVE_BF16_FLAGS = ("avx512_bf16", "amx_bf16")


def cpu_flags(cpuinfo: str) -> frozenset[str]:
    """The feature flags of the first CPU in a /proc/cpuinfo text (empty where it has none)."""
    for line in cpuinfo.splitlines():
        name, _, value = line.partition(":")
        if name.strip() in ("flags", "Features"):
            return frozenset(value.split())
    return frozenset()


def precision_rule(*, cuda: bool, flags: frozenset[str], cuda_bf16: bool = False) -> str:
    """The default precision for a device: a pure function, so the rule is testable on given flags.

    GPU: 16-mixed, or bf16-mixed where the GPU supports bf16 natively (Ampere and newer; same speed
    as fp16 there and no loss scaling).  CPU: bf16-mixed only with native bf16 (AVX512_BF16 or
    AMX_BF16 in the flags), else 32-true.
    """
    if cuda:
        return "bf16-mixed" if cuda_bf16 else "16-mixed"
    return "bf16-mixed" if any(flag in flags for flag in _NATIVE_BF16_FLAGS) else "32-true"


def default_precision(accelerator: str = "auto") -> str:
    """16-bit mixed on a GPU (bf16 where supported); on a CPU bf16-mixed where it has native bf16, else 32-true."""
    import torch

    cuda = accelerator in ("auto", "gpu", "cuda") and torch.cuda.is_available()
    try:
        with open("/proc/cpuinfo") as f:
            flags = cpu_flags(f.read())
    except OSError:  # not Linux: no native bf16 known, fp32 is never the slow choice
        flags = frozenset()
    return precision_rule(cuda=cuda, flags=flags, cuda_bf16=cuda and torch.cuda.is_bf16_supported())


def check_writable_file(path: str, flag: str) -> None:
    """Fail before training when ``path`` cannot be appended to; create nothing and leave nothing.

    ``os.access`` says yes to root on a read-only directory, so the file is really opened: an existing
    one for appending (unchanged), a new one exclusively and removed again.
    """
    where = os.path.abspath(path)
    parent = os.path.dirname(where)
    if not os.path.isdir(parent):
        what = "is not a directory" if os.path.exists(parent) else "does not exist"
        raise InvalidSpec(f"{flag} {path}: its directory {parent} {what}; create it or choose another path")
    if os.path.isdir(where):
        raise InvalidSpec(f"{flag} {path} is a directory; give a file name in it, e.g. {os.path.join(path, 'x.log')}")
    created = False
    try:
        try:
            with open(where, "x", encoding="utf-8"):
                created = True
        except FileExistsError:  # there already (or another rank's check made it a moment ago): left as it is
            with open(where, "a", encoding="utf-8"):
                pass
    except OSError as exc:
        raise InvalidSpec(f"{flag} {path} cannot be written ({exc.strerror}); choose a writable path") from None
    if created:
        os.unlink(where)


def _check_accelerator(accelerator: str) -> None:
    """``--accelerator gpu`` on a machine without one: our one line, not Lightning's traceback."""
    if accelerator in ("gpu", "cuda"):
        import torch

        if not torch.cuda.is_available():
            raise InvalidSpec(f"--accelerator {accelerator}: no CUDA GPU is visible to this process; use "
                              "--accelerator cpu (or auto), or check CUDA_VISIBLE_DEVICES and the driver")


def _launching_rank() -> bool:
    """The process that launches training (and becomes rank 0): the ranks it spawns find rank 0's port taken."""
    return all(os.environ.get(name, "0") == "0" for name in ("LOCAL_RANK", "NODE_RANK", "RANK"))


@dataclass(frozen=True)
class TrainConfig:
    uri: str
    source_kind: str = "mountpoint"
    batch_size: int = 256
    max_epochs: int | None = None  # None: 1, or until max_steps when that is set
    max_steps: int = -1
    num_workers: int | None = None  # None: default_num_workers()
    precision: str | None = None  # None: default_precision()
    devices: str = "auto"
    num_nodes: int = 1  # machines; under torchrun or SLURM, each runs `devices` ranks
    strategy: str = "auto"
    accelerator: str = "auto"
    checkpoint_dir: str | None = None
    resume: bool = False
    seed: int = 0
    lr: float | None = None  # None: 0.1 x batch_size / 256, the linear scaling rule for ResNet-50 on SGD
    shuffle_buffer: int = 1000
    warmup_batches: int = 5
    progress: bool = True
    arch: str = "resnet50"  # --arch: the published example trains ResNet-50; smaller ones make quick tests
    log_dir: str | None = None  # DIR/version_N/: metrics.csv and TensorBoard events (loss, img/s); None: no logger
    decode: str = "auto"  # where JPEGs are decoded: cpu (workers), gpu (the training device), auto
    checkpoint_every_n_steps: int = 0  # 0: last.ckpt only at epoch ends and when training stops
    sample_log: str | None = None  # FILE (FILE.rank<N> per rank when several): "key epoch global_step rank" lines
    random_access: bool = False  # indexed shards read map-style (one ranged read per sample); files layout always is
    readahead_threads: int = 16  # map-style: objects fetched in parallel per DataLoader worker (0: one at a time)
    # the mountpoint kind's own: --backend, --mount-dir, the cache, the read-ahead, --from-index
    mountpoint: MountpointOptions = field(default_factory=MountpointOptions)
    data_wait_threshold: float = 0.2  # above this share of step time waiting for data, one line says what to try
    metrics_port: int | None = None  # rank 0 serves data_wait_fraction on 127.0.0.1:PORT/metrics (Prometheus)
    index: str | None = None  # --index PATH|s3://...: the dataset's index where it is not beside the data

    def __post_init__(self) -> None:
        target = parse_data_uri(self.uri)  # a prefix, or shards picked by a brace pattern
        object.__setattr__(self, "uri", self.uri if target.names is not None else target.uri)
        check_source_choice(self.source_kind, self.mountpoint)
        if self.batch_size < 1:
            raise InvalidSpec(f"--batch-size must be at least 1, not {self.batch_size}")
        if self.num_workers is not None and self.num_workers < 0:
            raise InvalidSpec(f"--num-workers cannot be negative ({self.num_workers})")
        if self.max_epochs is not None and self.max_epochs < 1:
            raise InvalidSpec(f"--max-epochs must be at least 1, not {self.max_epochs}")
        if self.max_steps == 0 or self.max_steps < -1:
            raise InvalidSpec(f"--max-steps must be positive (or -1 for no limit), not {self.max_steps}")
        if self.resume and not self.checkpoint_dir:
            raise InvalidSpec("--resume needs --checkpoint-dir: the place the earlier run saved last.ckpt")
        if self.num_nodes < 1:
            raise InvalidSpec(f"--num-nodes must be at least 1, not {self.num_nodes}")
        if self.checkpoint_every_n_steps < 0:
            raise InvalidSpec(f"--checkpoint-every-n-steps cannot be negative ({self.checkpoint_every_n_steps})")
        if self.checkpoint_every_n_steps and not self.checkpoint_dir:
            raise InvalidSpec("--checkpoint-every-n-steps needs --checkpoint-dir: the place to save last.ckpt")
        if self.lr is not None and self.lr <= 0:
            raise InvalidSpec(f"--lr must be positive, not {self.lr}")
        if self.arch not in ARCHITECTURES:
            raise InvalidSpec(f"unknown architecture {self.arch!r}: choose one of {', '.join(ARCHITECTURES)}")
        _check_accelerator(self.accelerator)
        if self.decode != "auto":  # auto needs torch to know (train() resolves it once the dataset is checked)
            resolve_decode(self.decode, self.accelerator)  # --decode gpu without CUDA fails here
        if self.shuffle_buffer < 0 or self.warmup_batches < 0:
            raise InvalidSpec("--shuffle-buffer and --warmup-batches cannot be negative")
        if not 0 < self.data_wait_threshold <= 1:
            raise InvalidSpec(f"--data-wait-threshold must be in (0, 1], not {self.data_wait_threshold}")
        if self.metrics_port is not None and not 0 < self.metrics_port < 65536:
            raise InvalidSpec(f"--metrics-port must be a TCP port (1-65535), not {self.metrics_port}")
        if self.metrics_port is not None and _launching_rank() and not port_free(self.metrics_port):
            # Checked before the mount and the dataset are set up, not when rank 0 binds it at the first step.
            raise InvalidSpec(f"--metrics-port {self.metrics_port} is in use on 127.0.0.1: choose a free port "
                              f"(see `ss -ltnp 'sport = :{self.metrics_port}'`)")
        # Both fail here, before S3 is asked anything: a wrong spelling, a log file that cannot be written.
        if self.checkpoint_dir:
            from mountctl.pytorch.training.checkpoint import CheckpointTarget

            CheckpointTarget.parse(self.checkpoint_dir)
        if self.sample_log:
            check_writable_file(self.sample_log, "--sample-log")

    @property
    def learning_rate(self) -> float:
        return self.lr if self.lr is not None else 0.1 * self.batch_size / 256

    @property
    def epochs_limit(self) -> int:
        if self.max_epochs is not None:
            return self.max_epochs
        return -1 if self.max_steps > 0 else 1


def _rank_report(trainer: Any, source: Any) -> list[dict[str, int | None]]:
    """Every rank's process id and mount program id: ranks sharing one mount report the same one."""
    import torch

    mount_pid = source.describe().get("mount_pid") or -1
    mine = torch.tensor([os.getpid(), mount_pid], dtype=torch.long, device=trainer.strategy.root_device)
    rows = trainer.strategy.all_gather(mine).reshape(-1, 2).tolist()
    return [{"pid": pid, "mount_pid": None if mpid < 0 else mpid} for pid, mpid in rows]


def _summary(config: TrainConfig, manifest: Any, trainer: Any, source: Any, monitor: Any, **facts: Any
             ) -> dict[str, Any]:
    """The run as one JSON-able dict: what ran, how fast, and the exactly-once accounting per epoch."""
    return {
        "uri": config.uri,
        "source_kind": config.source_kind,
        "source": source.describe(),
        "dataset_images": manifest.num_images,
        "image_size": manifest.image_size,
        "batch_size": config.batch_size,
        "num_workers": facts["num_workers"],
        "world_size": trainer.world_size,
        "precision": facts["precision"],
        "decode": facts["decode"],
        "accelerator": trainer.strategy.root_device.type,
        "epochs": monitor.epochs,
        "global_step": trainer.global_step,
        "images": monitor.overall.get("images"),
        "seconds": monitor.overall.get("seconds"),
        "images_per_s": monitor.overall.get("images_per_s"),
        "resumed_from": facts["resumed_from"],
        "resumed_from_step": facts["resumed_from_step"],  # the steps the checkpoint had completed
        "checkpoint": facts["checkpoint"],
        "metrics_csv": facts["metrics_csv"],
        "ranks": _rank_report(trainer, source),  # a collective: every rank calls it
        "config": {k: v for k, v in asdict(config).items() if k not in ("uri", "progress")},
    }


def _datamodule(config: TrainConfig, manifest: Any, uri: str, source: Any, num_workers: int, pin_memory: bool,
                decode: str) -> Any:
    """Map-style for the files layout (and indexed shards with ``random_access``), else the shard stream."""
    from mountctl.pytorch.data.datasets.datamodule import MapDataModule, ShardDataModule

    if manifest.layout == "files" or config.random_access:
        return MapDataModule(manifest, source, uri, batch_size=config.batch_size, num_workers=num_workers,
                             seed=config.seed, pin_memory=pin_memory, readahead_threads=config.readahead_threads)
    return ShardDataModule(manifest, source, batch_size=config.batch_size, num_workers=num_workers,
                           seed=config.seed, shuffle_buffer=config.shuffle_buffer, pin_memory=pin_memory,
                           decode=decode)


def _loggers(log_dir: str | None) -> list[Any]:
    """``--log-dir``: Lightning's CSVLogger and a TensorBoardLogger, both in ``DIR/version_N``.

    Every metric logged with ``self.log`` (loss, img/s, and any callback's, such as a
    data-wait fraction) reaches both: nothing here names the metrics.
    """
    if not log_dir:
        return []
    from lightning.pytorch.loggers import CSVLogger, TensorBoardLogger

    csv_logger = CSVLogger(log_dir, name="")
    return [csv_logger, TensorBoardLogger(log_dir, name="", version=csv_logger.version, default_hp_metric=False)]


def train(config: TrainConfig, *, settings: S3Settings | None = None, out: TextIO | None = None) -> dict[str, Any]:
    """Train as configured; return the summary (and print it as one JSON line on rank 0)."""
    settings = settings or resolve()
    dataset = load_dataset_description(settings, config.uri, config.index)
    dataset.check_present(settings)
    manifest = dataset.manifest
    # Lightning loads from here on (these two import it): a bad endpoint or dataset has failed in a second.
    from mountctl.pytorch.training.checkpoint import CheckpointTarget
    from mountctl.pytorch.training.data_wait import DataWaitMonitor

    target = CheckpointTarget.parse(config.checkpoint_dir) if config.checkpoint_dir else None
    if target is not None:
        target.prepare(settings)
    resume_from = target.resume_path(settings) if (target is not None and config.resume) else None
    precision = config.precision or default_precision(config.accelerator)
    num_workers = default_num_workers() if config.num_workers is None else config.num_workers
    decode = resolve_decode(config.decode, config.accelerator)
    if num_workers:  # the workers' decoder and tar walk import while the source mounts and the model is built
        from mountctl.pytorch.data.datasets.worker_imports import start_worker_imports

        start_worker_imports()
    import lightning
    import torch

    from mountctl.pytorch.training.model import ResNetClassifier
    from mountctl.pytorch.training.sample_log import SampleLog
    from mountctl.pytorch.training.save_last import SaveLastCheckpoint
    from mountctl.pytorch.training.throughput import ThroughputMonitor

    quiet_known_notices()
    lightning.seed_everything(config.seed, verbose=False)

    # worker_tempdir: the DataLoader workers' pymp-* directories are one, and removed even when a run is cut short.
    with worker_tempdir(), open_source(config.source_kind, dataset.uri, settings, mountpoint=config.mountpoint,
                                       dataset_bytes=manifest.total_bytes, readers=max(1, num_workers),
                                       manifest=manifest, whole_files=not config.random_access,
                                       per_file=manifest.layout == "files") as source:
        monitor = ThroughputMonitor(manifest.num_images, warmup_batches=config.warmup_batches)
        data_wait = DataWaitMonitor(config.source_kind, threshold=config.data_wait_threshold,
                                    warmup_batches=config.warmup_batches, metrics_port=config.metrics_port)
        callbacks: list[Any] = [monitor, data_wait]
        sample_log = SampleLog(config.sample_log) if config.sample_log else None
        if sample_log is not None:
            callbacks.append(sample_log)
        saver = SaveLastCheckpoint(target, every_n_steps=config.checkpoint_every_n_steps,
                                   sample_log=sample_log) if target is not None else None
        if saver is not None:
            callbacks.append(saver)
        plugin = target.plugin(settings) if target is not None else None
        loggers = _loggers(config.log_dir)
        trainer = lightning.Trainer(
            accelerator=config.accelerator, devices=config.devices, num_nodes=config.num_nodes,
            strategy=config.strategy,
            precision=precision,  # type: ignore[arg-type]  # one of PRECISIONS, checked by the CLI
            max_epochs=config.epochs_limit, max_steps=config.max_steps, callbacks=callbacks,
            plugins=[plugin] if plugin is not None else None, logger=loggers or False, enable_checkpointing=False,
            use_distributed_sampler=False, enable_progress_bar=config.progress, enable_model_summary=False,
            num_sanity_val_steps=0, log_every_n_steps=_LOG_EVERY_N_STEPS,
            reload_dataloaders_every_n_epochs=1)  # an epoch resumed mid-way has its own length
        model = ResNetClassifier(manifest.num_classes, lr=config.learning_rate, arch=config.arch)
        if decode == "gpu":  # images arrive channels_last from the decoder: keep the convolutions in it
            model = model.to(memory_format=torch.channels_last)
        data = _datamodule(config, manifest, dataset.uri, source, num_workers, trainer.strategy.root_device.type == "cuda",
                           decode)
        if num_workers:
            from mountctl.pytorch.data.datasets.worker_imports import import_worker_modules

            import_worker_modules()  # done before anything forks (Lightning's launcher may)
        trainer.fit(model, datamodule=data, ckpt_path=resume_from, weights_only=True)
        summary = _summary(config, manifest, trainer, source, monitor, num_workers=num_workers,
                           precision=precision, decode=decode, resumed_from=resume_from,
                           resumed_from_step=saver.started_at_step if resume_from and saver is not None else None,
                           checkpoint=target.last if target is not None and saver is not None and saver.saves else None,
                           metrics_csv=os.path.join(loggers[0].log_dir, "metrics.csv") if loggers else None)
        summary.update(data_wait.summary())
    if trainer.is_global_zero:
        print(json.dumps(summary), file=out or sys.stdout, flush=True)
    return summary
