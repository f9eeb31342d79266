"""``run_sweep``: every cell of a benchmark run, side by side on the same shards, in one process.

For each dataset: copy the shards to local disk, measure the raw GET limit,
then open each source once (mount start-up time is the mount's own cost),
time its first sample and read an epoch at every worker count.  Then train
ResNet-50 per source kind and, on the same model and Trainer, the ceiling.
Ratios to the limits are filled in at the end from cells of the same run.
All of it runs once per store (``stores.py``): through the endpoint itself and
through a far-store proxy before it; every cell records its ``store``, and
ratios compare cells of the same store.
"""

from __future__ import annotations

import contextlib
import functools
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from datetime import datetime, timezone
from typing import Any

from benchmarks.harness.bytes_path import bytes_cell, bytes_routes, cache_note, opened_route, random_cell
from benchmarks.harness.cells import (
    INDEX_ROUTE,
    READ_AHEAD_ROUTE,
    ceiling_cell,
    first_sample_cell,
    loader_cell,
    route_options,
    train_cell,
)
from benchmarks.harness.checkpoint_cells import (
    add_checkpoint_ratios,
    checkpoint_cell_count,
    run_checkpoint_cells,
)
from benchmarks.harness.config import QUICK_EXPECTED, DatasetSpec, SweepConfig
from benchmarks.harness.facts import machine_facts, run_facts, versions
from benchmarks.harness.limits import LocalDiskSource, copy_shards, raw_get
from benchmarks.harness.map_cells import add_map_ratios, map_cell_count, map_cells
from benchmarks.harness.monitor import ResourceMonitor
from benchmarks.harness.own_data import LEFT_OUT, OwnDataset, find_own_dataset, own_data_config
from benchmarks.harness.peer_data import check_peers_installed
from benchmarks.harness.peers import peer_cell_count, peer_cells, peer_train_cells, prepare_peer_data
from benchmarks.harness.stores import plan_stores
from mountctl import MountctlError, S3Settings, installed_backends, resolve
from mountctl.pytorch.data.manifest import Manifest, load_manifest
from mountctl.pytorch.data.sources import open_source
from mountctl.pytorch.data.synthetic import MakeConfig, make_dataset, parse_size

__all__ = ["run_sweep", "source_plan"]

LOCAL = "local-disk"
CELL_ERRORS = (MountctlError, OSError, RuntimeError, ValueError)  # a failed cell is recorded; the run goes on
EPOCHS = (1, 2)  # every cell that reads the dataset reads it twice: epoch 2 is where a cache shows


def source_plan(config: SweepConfig) -> list[tuple[str, str, str]]:
    """(label, kind, backend) of every S3 source: mountpoint once per installed mount program, and mount-s3
    twice more: mounted from the index (``mount-s3+index``) and with the plan's read-ahead across shards
    (``mount-s3-read-ahead``), so that each lever is measured beside the default in the same run."""
    backends = config.backends or installed_backends()
    plan = []
    for kind in config.loader_kinds:
        if kind == "mountpoint":
            plan += [(f"mountpoint/{b}", kind, b) for b in backends]
            if "mount-s3" in backends:
                plan += [(f"mountpoint/mount-s3{variant}", kind, f"mount-s3{variant}")
                         for variant in (INDEX_ROUTE, READ_AHEAD_ROUTE)]
        else:
            plan.append((kind, kind, "auto"))
    return plan


def _ensure_dataset(config: SweepConfig, settings: S3Settings, spec: DatasetSpec) -> Manifest:
    """The dataset under the bench prefix, made only where shards are missing (same recipe: reused)."""
    uri = spec.uri(config.uri)
    make_dataset(MakeConfig(uri=uri, num_images=spec.num_images, image_size=spec.image_size, num_classes=1000,
                            shard_size=parse_size(spec.shard_size), seed=config.seed),
                 settings=settings, progress=config.progress)
    return load_manifest(settings, uri)


@contextlib.contextmanager
def _opened(kind: str, uri: str, settings: S3Settings, backend: str, local: LocalDiskSource
            ) -> Iterator[tuple[Any, float]]:
    """(source, seconds it took to open): for a mount, its start-up time."""
    if kind == LOCAL:
        yield local, 0.0
        return
    started = time.perf_counter()
    with open_source(kind, uri, settings, **route_options(uri, settings, backend, whole_files=True)) as source:
        yield source, time.perf_counter() - started


class _Run:
    def __init__(self, config: SweepConfig, settings: S3Settings, bar: Any) -> None:
        self.config = config
        self.origin = settings  # the endpoint itself: datasets are made (and copied to disk) through it
        self.settings = settings  # the store being measured (a far-store proxy's endpoint for "far")
        self.store = "local"
        self.bar = bar
        self.cells: list[dict[str, Any]] = []
        # peers.py: each dataset's peer.json per peer (by dataset label), and the training dataset's.
        self.peer_markers: dict[str, dict[str, dict[str, Any]]] = {}
        self.peer_train: dict[str, dict[str, Any]] = {}

    def cell(self, base: dict[str, Any], measure: Callable[[], dict[str, Any]]) -> dict[str, Any]:
        self.bar.set_postfix_str(f"{base['cell']} {base.get('source', '')} {base.get('dataset', '')} "
                                 f"w={base.get('num_workers', '-')}", refresh=True)
        try:
            row = {**base, "status": "ok", **measure()}
        except CELL_ERRORS as exc:
            row = {**base, "status": f"failed: {exc}"}
        self.cells.append(row)
        self.bar.update()
        return row

    def epochs(self, base: dict[str, Any], measure: Callable[[], list[dict[str, Any]]]) -> None:
        """One measurement that yields a row per epoch (a failure fails both epochs' rows)."""
        self.bar.set_postfix_str(f"{base['cell']} {base.get('source', '')} {base.get('dataset', '')}", refresh=True)
        try:
            rows = [{**base, "status": "ok", **row} for row in measure()]
        except CELL_ERRORS as exc:
            rows = [{**base, "epoch": epoch, "status": f"failed: {exc}"} for epoch in EPOCHS]
        self.cells.extend(rows)
        self.bar.update(len(EPOCHS))


def _dataset_cells(run: _Run, spec: DatasetSpec | OwnDataset, manifest: Manifest, scratch: str) -> None:
    config, settings = run.config, run.settings
    uri = spec.uri(config.uri)
    base = {"dataset": spec.label, "num_images": manifest.num_images, "shard_size": spec.shard_size,
            "shards": len(manifest.shards), "bytes": manifest.total_bytes}
    local = copy_shards(run.origin, uri, manifest, f"{scratch}/{spec.label}")

    def get() -> dict[str, Any]:
        got = raw_get(settings, uri, manifest, threads=config.get_threads, part_size=parse_size(config.get_part_size))
        mb_per_s = got["bytes"] / got["seconds"] / 1e6
        return {"mb_per_s": round(mb_per_s, 2), "seconds": round(got["seconds"], 3), "requests": got["requests"],
                "samples_per_s": round(manifest.num_images / got["seconds"], 2), "threads": config.get_threads}

    run.cell({"cell": "raw-get", "source": "boto3 GET", **base}, get)
    opened: list[tuple[dict[str, Any], Any, int | None]] = []
    with contextlib.ExitStack() as stack:
        for label, kind, backend in [(LOCAL, LOCAL, "-"), *source_plan(config)] if config.loader_cells else []:
            head = {"source": label, "kind": kind, "backend": backend, **base}
            try:
                source, open_s = stack.enter_context(_opened(kind, uri, settings, backend, local))
            except CELL_ERRORS as exc:  # the source did not open (e.g. the mount failed): its cells say so
                _source_failed(run, head, f"failed: {exc}")
                continue
            daemon = source.describe().get("mount_pid")
            shared = next((h["source"] for h, _, pid in opened if daemon is not None and pid == daemon), None)
            if shared is not None:  # each route is measured cold: one that joined another's mount would not be
                _source_failed(run, head, f"failed: it shares {shared}'s mount (pid {daemon}), whose cache that "
                                          f"route fills: give it a request of its own (cells.route_options)")
                continue

            def first_sample(s: Any = source, t: float = open_s, pid: int | None = daemon) -> dict[str, Any]:
                with ResourceMonitor(pid) as monitor:
                    first = first_sample_cell(manifest, s)
                return {"open_s": round(t, 3), **first, **monitor.usage.to_dict()}

            first = run.cell({"cell": "first-sample", **head}, first_sample)
            if first["status"] == "ok" and kind == "mountpoint":
                first["mount_startup_s"] = first["open_s"]
            opened.append((head, source, daemon))
        # Sources take turns at each worker count, so a change in the machine's load while the
        # sweep runs spreads over all of them instead of landing on one.
        # Epoch 2 right after epoch 1 on the same source: what a node-local cache gives back.
        for workers in config.num_workers:
            for head, source, daemon in opened:
                for epoch in EPOCHS:
                    run.cell({"cell": "loader", "num_workers": workers, "epoch": epoch, **head},
                             functools.partial(loader_cell, manifest, source, num_workers=workers,
                                               batch_size=config.batch_size, warmup_batches=config.warmup_batches,
                                               shuffle_buffer=config.shuffle_buffer, program_pid=daemon,
                                               seed=config.seed, epoch=epoch - 1))
    if config.bytes_cells:
        _bytes_cells(run, manifest, uri, base, local)
    peer_cells(run, manifest, uri, base, run.peer_markers.get(spec.label, {}))


def _source_failed(run: _Run, head: dict[str, Any], status: str) -> None:
    """A source that cannot be measured: its first-sample cell and every loader cell say why."""
    run.cells.append({"cell": "first-sample", **head, "status": status})
    run.cells += [{"cell": "loader", "num_workers": w, "epoch": e, **head, "status": status}
                  for w in run.config.num_workers for e in EPOCHS]
    run.bar.update(1 + len(run.config.num_workers) * len(EPOCHS))


def _bytes_cells(run: _Run, manifest: Manifest, uri: str, base: dict[str, Any], local: LocalDiskSource) -> None:
    """Bytes path (epochs 1 and 2 per reader count) and random reads, each route opened afresh.

    A fresh mount per reader count and per random-read cell, so epoch 1 starts without
    what an earlier cell left in the mount program's memory.
    """
    config, settings = run.config, run.settings
    routes = bytes_routes(config.loader_kinds, config.backends or installed_backends())
    for readers in config.bytes_readers:
        for route in routes:
            def measure(route: Any = route, readers: int = readers) -> list[dict[str, Any]]:
                with opened_route(route, uri, settings, local, whole_files=True) as source:
                    daemon = source.describe().get("mount_pid")
                    return [{"epoch": epoch, **bytes_cell(manifest, source, readers=readers, program_pid=daemon)}
                            for epoch in EPOCHS]

            run.epochs({"cell": "bytes", "readers": readers, **route.head(), **cache_note(route), **base}, measure)
    for route in routes:
        def measure_random(route: Any = route) -> dict[str, Any]:
            with opened_route(route, uri, settings, local) as source:
                return random_cell(manifest, source, uri, settings, reads=config.random_reads, seed=config.seed,
                                   program_pid=source.describe().get("mount_pid"))

        run.cell({"cell": "random", **route.head(), **cache_note(route), **base}, measure_random)


def _train_cells(run: _Run, manifest: Manifest, uri: str) -> None:
    config, settings = run.config, run.settings
    base = {"dataset": config.train_dataset.label, "num_images": manifest.num_images,
            "num_workers": config.train_workers, "batch_size": config.train_batch_size}
    run.cell({"cell": "ceiling", "source": "synthetic on device", **base},
             lambda: ceiling_cell(manifest, batch_size=config.train_batch_size, steps=config.train_steps,
                                  warmup_steps=config.train_warmup_steps, accelerator=config.accelerator,
                                  precision=config.train_precision))
    for label, kind, backend in source_plan(config):
        def measure(kind: str = kind, backend: str = backend) -> list[dict[str, Any]]:
            # Hold the (shared) mount here too, so that its daemon's CPU and memory can be watched.
            with open_source(kind, uri, settings, **route_options(uri, settings, backend, whole_files=True)) as source:
                return train_cell(uri, settings, kind=kind, backend=backend, batch_size=config.train_batch_size,
                                  num_workers=config.train_workers, warmup_steps=config.train_warmup_steps,
                                  accelerator=config.accelerator, precision=config.train_precision,
                                  program_pid=source.describe().get("mount_pid"), seed=config.seed,
                                  epochs=len(EPOCHS), decode=config.decode)

        run.epochs({"cell": "train", "source": label, "kind": kind, "backend": backend, **base}, measure)


def _ratio(row: dict[str, Any], limit: dict[str, Any] | None, field: str) -> float | None:
    return round(row[field] / limit[field], 3) if limit and limit.get(field) else None


def _add_ratios(cells: list[dict[str, Any]]) -> None:
    """Each cell against the limit measured in the same run: same dataset, same worker count."""
    def find(cell: str, **match: Any) -> dict[str, Any] | None:
        return next((c for c in cells if c["cell"] == cell and c["status"] == "ok"
                     and all(c.get(k) == v for k, v in match.items())), None)

    for row in cells:
        if row["status"] != "ok":
            continue
        store = row.get("store")
        if row["cell"] == "loader":
            local = find("loader", source=LOCAL, dataset=row["dataset"], num_workers=row["num_workers"],
                         epoch=row["epoch"], store=store)
            get = find("raw-get", dataset=row["dataset"], store=store)
            # Whole epoch first: the ratios that lead; after warm-up beside them.
            row["ratio_to_local_disk"] = _ratio(row, local, "epoch_samples_per_s")
            row["ratio_to_local_disk_after_warmup"] = _ratio(row, local, "samples_per_s")
            row["ratio_to_raw_get"] = round(row["epoch_mb_per_s"] / get["mb_per_s"], 3) if get else None
        elif row["cell"] == "bytes":
            get = find("raw-get", dataset=row["dataset"], store=store)
            row["ratio_to_raw_get"] = round(row["mb_per_s"] / get["mb_per_s"], 3) if get else None
        elif row["cell"] == "random":
            ranged = find("random", kind="s3io", dataset=row["dataset"], store=store)
            row["ratio_to_s3io_range"] = round(row["mb_per_s"] / ranged["mb_per_s"], 3) if ranged else None
        elif row["cell"] == "train":
            ceiling = find("ceiling", store=store)  # synthetic batches already on the device: the same in every epoch
            row["ratio_to_ceiling"] = _ratio(row, ceiling, "epoch_samples_per_s")
            row["ratio_to_ceiling_after_warmup"] = _ratio(row, ceiling, "samples_per_s")


def _store_cells(run: _Run, manifests: list[tuple[DatasetSpec | OwnDataset, Manifest]], train_manifest: Manifest | None,
                 gpu_missing: bool, scratch: str) -> None:
    """Every cell once, through ``run.settings`` (one store)."""
    config = run.config
    for spec, manifest in manifests:
        _dataset_cells(run, spec, manifest, scratch)
    if manifests and config.map_cells:  # map-style cells: the files layout, and random access into the first dataset
        first, first_manifest = manifests[0]
        map_cells(run, first_manifest, first.uri(config.uri), first.label,
                  LocalDiskSource(f"{scratch}/{first.label}"), source_plan(config), scratch)
    if train_manifest is not None and gpu_missing:
        for cell in ("ceiling", "train"):
            run.cells.append({"cell": cell, "status": "not run: --accelerator gpu but no CUDA device"})
        run.bar.update((1 + len(source_plan(config)) * len(EPOCHS)) + len(run.peer_train) * len(EPOCHS))
    elif train_manifest is not None:
        _train_cells(run, train_manifest, config.train_dataset.uri(config.uri))
        peer_train_cells(run, train_manifest, config.train_dataset.uri(config.uri), run.peer_train)
    if config.runs_checkpoints:
        run_checkpoint_cells(run, config.uri, f"{scratch}/checkpoints", CELL_ERRORS)


def _store_config(config: SweepConfig, store: str, stores: int) -> SweepConfig:
    """What one store runs: everything, except on the far store beside the local one with ``far_cells="loader"``."""
    if store != "far" or stores < 2 or config.far_cells == "all":
        return config
    return replace(config, bytes_cells=False, map_cells=False, train=False, checkpoints=False)


def _cell_total(config: SweepConfig, datasets: int, train: bool, peer_train: bool) -> int:
    """Progress-bar rows of one store's cells."""
    sources = len(source_plan(config))
    routes = len(bytes_routes(config.loader_kinds, config.backends or installed_backends()))
    per_dataset = 1 + ((sources + 1) * (1 + len(config.num_workers) * len(EPOCHS)) if config.loader_cells else 0)
    per_dataset += routes * (len(config.bytes_readers) * len(EPOCHS) + 1) if config.bytes_cells else 0
    total = datasets * per_dataset + ((1 + sources * len(EPOCHS)) if train else 0)
    total += map_cell_count(config, sources) if datasets and config.map_cells else 0
    total += checkpoint_cell_count(config) if config.runs_checkpoints else 0
    return total + peer_cell_count(config, datasets, train and peer_train)


def run_sweep(config: SweepConfig, *, settings: S3Settings | None = None) -> dict[str, Any]:
    """Measure every cell in each store; return the run as one JSON-able dict (see ``report.py`` to write it)."""
    from tqdm import tqdm

    plan = plan_stores(config.store, settings or resolve(), config.far_latency_ms, config.far_rate_mb_s)
    settings, stores = plan.origin, plan.stores
    started = time.perf_counter()
    loaders = config.suite != "checkpoint"  # --suite checkpoint: the checkpoint cells alone
    # The URI may name one dataset (a user's, indexed): bench it as it is, and write nothing into it.
    own = find_own_dataset(config, settings) if loaders else None
    if own is not None:
        config = own_data_config(config)
        if config.progress:
            print(f"bench: {own[0].data_uri} is one dataset: {LEFT_OUT} are left out", file=sys.stderr, flush=True)
    gpu_missing = config.accelerator == "gpu" and machine_facts()["gpu"] is None
    result: dict[str, Any] = {"started": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                              "config": {k: v for k, v in config.__dict__.items()}, "machine": machine_facts(),
                              "versions": versions(), "endpoint": settings.endpoint_url or "AWS S3",
                              "stores": {store: {} for store in stores}, "run": run_facts()}
    if loaders and config.peers:
        check_peers_installed(config.peers)  # before anything is measured: a missing peer is a setup error
    # Made once, through the endpoint itself; every store reads the same bytes.
    manifests: list[tuple[DatasetSpec | OwnDataset, Manifest]] = (
        [own] if own is not None else
        [(spec, _ensure_dataset(config, settings, spec)) for spec in config.datasets] if loaders else [])
    train_manifest = _ensure_dataset(config, settings, config.train_dataset) if config.train and loaders else None
    # Part of the dataset step (also through the endpoint itself): each peer's copy of the same samples,
    # converted and checked where missing; one training cell per peer in a full run (--quick leaves them out).
    peer_markers = {spec.label: prepare_peer_data(config, settings, spec.uri(config.uri), manifest)
                    for spec, manifest in manifests}
    peer_train = {} if train_manifest is None or config.quick else prepare_peer_data(
        config, settings, config.train_dataset.uri(config.uri), train_manifest)
    store_configs = {store: _store_config(config, store, len(stores)) for store in stores}
    total = sum(_cell_total(c, len(manifests), train_manifest is not None and c.train, bool(peer_train))
                for c in store_configs.values())
    if config.progress:  # as setup does: what the wait will be, before it starts
        expected = f"; expect {QUICK_EXPECTED}" if config.quick and config.store == "far" else ""
        print(f"bench: {total} cells through the {' and '.join(stores)} store{'s' * (len(stores) > 1)}"
              f"{expected}", file=sys.stderr, flush=True)
    scratch = tempfile.mkdtemp(prefix="mountctl-bench-")
    with tqdm(total=total, unit="cell", desc="bench", disable=not config.progress) as bar:
        run = _Run(config, settings, bar)
        run.peer_markers, run.peer_train = peer_markers, peer_train
        store = stores[0]
        try:
            for store in stores:
                first, began = len(run.cells), time.perf_counter()
                # The far store's proxy runs for its cells alone, and is stopped also on an error or Ctrl-C.
                with plan.settings(store, f"{scratch}/far-proxy") as store_s3:
                    run.settings, run.store, run.config = store_s3, store, store_configs[store]
                    result["stores"][store] = {"endpoint": store_s3.endpoint_url or "AWS S3",
                                               **(plan.profile.to_dict() if store == "far" else {})}
                    if run.config is not config:
                        result["stores"][store]["cells"] = config.far_cells
                    _store_cells(run, manifests, train_manifest if run.config.train else None, gpu_missing, scratch)
                for row in run.cells[first:]:
                    row.setdefault("store", store)
                result["stores"][store]["seconds"] = round(time.perf_counter() - began, 1)
        except (KeyboardInterrupt, SystemExit) as stop:
            # Ctrl-C or SIGTERM: what was started is stopped by the ``with`` blocks above; the cells measured so far
            # ride on the exception to ``command``, which writes them, marked as interrupted, before it exits.
            if run.cells:
                for row in run.cells:  # the store under way names its cells too: the report's tables are by store
                    row.setdefault("store", store)
                result["interrupted"] = True
                stop.partial_result = _finish(result, run.cells, config, total, started)  # type: ignore[union-attr]
            raise
        finally:
            run.config = config
            shutil.rmtree(scratch, ignore_errors=True)
    if config.accelerator != "gpu":
        run.cells.append({"cell": "gpu", "status": "not run: --accelerator cpu (no GPU on this machine)"
                          if result["machine"]["gpu"] is None else "not run: --accelerator cpu"})
    return _finish(result, run.cells, config, total, started)


def _finish(result: dict[str, Any], cells: list[dict[str, Any]], config: SweepConfig, total: int,
            started: float) -> dict[str, Any]:
    """The run's cells with their ratios to the limits, and the run's closing facts."""
    _add_ratios(cells)
    add_map_ratios(cells)
    add_checkpoint_ratios(cells)
    result["cells"] = cells
    result["cells_planned"] = total
    result["seconds"] = round(time.perf_counter() - started, 1)
    result["machine"]["load_average_end"] = [round(x, 2) for x in os.getloadavg()]
    return result
