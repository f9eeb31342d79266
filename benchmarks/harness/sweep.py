"""``run_sweep``: every cell of a benchmark run, side by side on the same shards, in one process.

For each dataset: copy the shards to local disk, then run each per-dataset step of ``kinds.STEPS`` (the raw GET
limit, each source opened once and read at every worker count, the bytes path, the peers); then each step that
runs once per store (map-style, ImageFolder, ResNet-50 training beside its ceiling, checkpoints).  Each step, and
its count of cells for the progress bar, is in its cell kind's module; this module only makes the datasets, runs
the steps, and fills in the ratios to the limits at the end from cells of the same run.
All of it runs once per store (``stores.py``): through the endpoint itself and
through a far-store proxy before it; every cell records its ``store``, and
ratios compare cells of the same store.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time
from dataclasses import replace
from datetime import datetime, timezone
from typing import Any

from benchmarks.harness.config import QUICK_EXPECTED, DatasetSpec, SweepConfig
from benchmarks.harness.facts import machine_facts, run_facts, versions
from benchmarks.harness.kinds import STEPS, add_ratios
from benchmarks.harness.limits import copy_shards
from benchmarks.harness.own_data import LEFT_OUT, OwnDataset, find_own_dataset, own_data_config
from benchmarks.harness.peer_data import check_peers_installed
from benchmarks.harness.peers import prepare_peer_data
from benchmarks.harness.stores import plan_stores
from benchmarks.harness.sweep_run import DatasetCells, Planned, StoreCells, SweepRun, TrainCells
from mountctl import S3Settings, resolve
from mountctl.pytorch.data.index.manifest import Manifest, load_manifest
from mountctl.pytorch.data.synthetic import MakeConfig, make_dataset, parse_size

__all__ = ["run_sweep"]

Datasets = list[tuple[DatasetSpec | OwnDataset, Manifest]]


def _ensure_dataset(config: SweepConfig, settings: S3Settings, spec: DatasetSpec) -> Manifest:
    """The dataset under the bench prefix, made only where shards are missing (same recipe: reused)."""
    uri = spec.uri(config.uri)
    make_dataset(MakeConfig(uri=uri, num_images=spec.num_images, image_size=spec.image_size, num_classes=1000,
                            shard_size=parse_size(spec.shard_size), seed=config.seed),
                 settings=settings, progress=config.progress)
    return load_manifest(settings, uri)


def _dataset(run: SweepRun, spec: DatasetSpec | OwnDataset, manifest: Manifest, scratch: str,
             peers: dict[str, dict[str, Any]]) -> DatasetCells:
    """One dataset as this store's steps read it, its shards copied to local disk (through the endpoint itself)."""
    uri = spec.uri(run.config.uri)
    base = {"dataset": spec.label, "num_images": manifest.num_images, "shard_size": spec.shard_size,
            "shards": len(manifest.shards), "bytes": manifest.total_bytes}
    local = copy_shards(run.origin, uri, manifest, f"{scratch}/{spec.label}")
    return DatasetCells(spec.label, uri, manifest, base, local, peers)


def _store_cells(run: SweepRun, manifests: Datasets, train: TrainCells | None, gpu_missing: bool, scratch: str,
                 peer_markers: dict[str, dict[str, dict[str, Any]]]) -> None:
    """Every step once through ``run.settings`` (one store): the dataset steps per dataset, then the store's."""
    config = run.config
    planned = Planned(len(manifests), train is not None, bool(train and train.peers))
    datasets = []
    for spec, manifest in manifests:
        dataset = _dataset(run, spec, manifest, scratch, peer_markers.get(spec.label, {}))
        datasets.append(dataset)
        for step in STEPS:
            if step.scope == "dataset" and step.count(config, planned):
                step.run(run, dataset)
    store = StoreCells(datasets, train, gpu_missing, scratch)
    for step in STEPS:
        if step.scope == "store" and step.count(config, planned):
            step.run(run, store)


def _store_config(config: SweepConfig, store: str, stores: int) -> SweepConfig:
    """What one store runs: everything, except on the far store beside the local one with ``far_cells="loader"``."""
    if store != "far" or stores < 2 or config.far_cells == "all":
        return config
    return replace(config, bytes_cells=False, map_cells=False, train=False, checkpoints=False, standard_cells=False)


def _cell_total(config: SweepConfig, datasets: int, train: bool, peer_train: bool) -> int:
    """Progress-bar rows of one store's cells: each step's count (a dataset step's once per dataset)."""
    planned = Planned(datasets, train, peer_train)
    return sum(step.count(config, planned) * (datasets if step.scope == "dataset" else 1) for step in STEPS)


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
    manifests: Datasets = (
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
        run = SweepRun(config, settings, bar)
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
                    train = (TrainCells(config.train_dataset.uri(config.uri), train_manifest, peer_train)
                             if train_manifest is not None and run.config.train else None)
                    _store_cells(run, manifests, train, gpu_missing, scratch, peer_markers)
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
    add_ratios(cells)
    result["cells"] = cells
    result["cells_planned"] = total
    result["seconds"] = round(time.perf_counter() - started, 1)
    result["machine"]["load_average_end"] = [round(x, 2) for x in os.getloadavg()]
    return result
