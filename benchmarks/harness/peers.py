"""Peer cells: LitData's and MosaicML Streaming's own ``StreamingDataset`` read the bench dataset, beside the mount.

Each cell runs in a child process (``python -m benchmarks.harness.peers``)
whose environment comes from ``peer_data.peer_env``: the libraries read the
endpoint and keys from the environment, and a child keeps them, the
libraries' shared memory and their threads out of the bench process.  The
child opens the peer's dataset with a cache in a fresh directory, reads
epochs 1 and 2 through a plain DataLoader with the mountctl loader cells'
batch size, worker count and decode (``shards.decode``), and checks every
epoch: the sample count and the order-independent checksum of what it read
must equal the conversion's ``peer.json``.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from typing import Any

from benchmarks.harness import CHECKOUT
from benchmarks.harness.config import SweepConfig
from benchmarks.harness.peer_cleanup import remove_streaming_segments
from benchmarks.harness.peer_data import (
    PEERS,
    SampleChecksum,
    fresh_connections_after_fork,
    litdata_storage_options,
    peer_env,
    peer_uri,
    sample_digest,
)
from benchmarks.harness.sweep_run import EPOCHS, DatasetCells, Planned, StoreCells, SweepRun
from mountctl import S3Settings, redact, resolve
from mountctl.pytorch.errors import DatasetError

__all__ = ["PEERS", "PEER_MODES", "CHILD_TIMEOUT_S", "open_peer_dataset", "peer_epochs", "peer_cell_count",
           "peer_train_cell_count", "prepare_peer_data", "peer_cells", "peer_train_cells", "peer_comparison",
           "peer_markdown", "TARGET"]

# loader: read + decode; bytes: each sample's bytes, nothing decoded; train: ResNet-50 on the decoded batches
PEER_MODES = ("loader", "bytes", "train")
CHILD_TIMEOUT_S = 1800.0  # a bound on one cell's child (both epochs): a wedged library fails the cell


# -- the child: each library's own StreamingDataset ------------------------------------------


def _open_litdata(uri: str, cache: str, settings: S3Settings, *, batch_size: int, seed: int) -> Any:
    from litdata import StreamingDataset
    from litdata.streaming import downloader

    if (settings.endpoint_url or "").startswith("http://"):
        # Its chunk prefetch (obstore) refuses plain HTTP and takes no option for it: without this
        # every chunk GET fails against a local endpoint (over HTTPS nothing changes).
        downloader._OBSTORE_CLIENT_OPTIONS["allow_http"] = "true"
    return StreamingDataset(input_dir=uri, cache_dir=cache, shuffle=True, seed=seed, drop_last=False,
                            storage_options=litdata_storage_options(settings))


def _open_streaming(uri: str, cache: str, settings: S3Settings, *, batch_size: int, seed: int) -> Any:
    from streaming import StreamingDataset

    # batch_size lets it split samples over workers batch by batch, as its docs ask of a DataLoader user.
    dataset = StreamingDataset(remote=uri, local=cache, shuffle=True, shuffle_seed=seed, batch_size=batch_size)
    # Forked workers would share the parent's S3 connection (a 60 s stall, corrupt shards): peer_data says why.
    return fresh_connections_after_fork(dataset)


_OPENERS: dict[str, Callable[..., Any]] = {"litdata": _open_litdata, "streaming": _open_streaming}


def open_peer_dataset(peer: str, uri: str, cache: str, settings: S3Settings, *, batch_size: int, seed: int = 0
                      ) -> Any:
    """``peer``'s own ``StreamingDataset`` over its copy at ``uri``, caching in ``cache``.

    Call it where ``peer_env(settings)`` is the environment (the child does): the libraries
    read keys, and Streaming its endpoint, from there.
    """
    return _OPENERS[peer](uri, cache, settings, batch_size=batch_size, seed=seed)


def _samples(inner: Any, *, image_size: int, decode: bool) -> Iterator[tuple[Any, int, int, int, float]]:
    """(decoded image or byte count, label, index, digest, when this reader started) per sample."""
    from mountctl.pytorch.data.datasets.shards import RawSample
    from mountctl.pytorch.data.datasets.shards import decode as decode_sample

    started = time.perf_counter()  # CLOCK_MONOTONIC: comparable between processes on Linux
    for sample in inner:
        index, label, data = int(sample["index"]), int(sample["cls"]), bytes(sample["jpg"])
        digest = sample_digest(index, label, data)
        if decode:
            image, _, _ = decode_sample(RawSample(str(index), index, data, label, "peer"), image_size)
            yield image, label, index, digest, started
        else:
            yield len(data), label, index, digest, started


def _collate(rows: list[tuple[Any, int, int, int, float]]) -> dict[str, Any]:
    import torch

    first = rows[0][0]
    payload = torch.stack([r[0] for r in rows]) if isinstance(first, torch.Tensor) else [r[0] for r in rows]
    # "epoch" is what the trainer's ThroughputMonitor records as the batch's plan; a peer plans its own epochs.
    return {"images": payload, "labels": torch.tensor([r[1] for r in rows], dtype=torch.long),
            "index": tuple(r[2] for r in rows), "digests": tuple(r[3] for r in rows),
            "started": min(r[4] for r in rows), "epoch": 0}


def _dataset(inner: Any, image_size: int, decode: bool) -> Any:
    from torch.utils.data import IterableDataset

    class PeerSamples(IterableDataset):
        def __iter__(self) -> Iterator[tuple[Any, int, int, int, float]]:
            return _samples(inner, image_size=image_size, decode=decode)

    return PeerSamples()


def _cpu_seconds() -> float:
    """CPU of this process and of its reaped children (the DataLoader workers of finished epochs).

    Exact where the sampling monitor can miss workers that live less than its interval.
    """
    times = os.times()
    return times.user + times.system + times.children_user + times.children_system


def _cache_mb(path: str) -> float:
    total = sum(os.path.getsize(os.path.join(root, name)) for root, _, names in os.walk(path) for name in names)
    return round(total / 1e6, 1)


def read_epochs(request: dict[str, Any], settings: S3Settings) -> list[dict[str, Any]]:
    """Epochs 1..``epochs`` of the peer's dataset in this process, each checked; one row per epoch."""
    import warnings

    from torch.utils.data import DataLoader

    from benchmarks.harness.cells import BATCH_TIMEOUT_S
    from benchmarks.harness.monitor import ResourceMonitor
    from mountctl.pytorch.training.rates import epoch_figures

    warnings.filterwarnings("ignore", message=r".*suggested max number of worker.*")
    peer, workers, mode = request["peer"], int(request["num_workers"]), request["mode"]
    cache = request["cache"]  # made empty by the parent for this cell: epoch 1 starts cold
    rows = []
    try:
        inner = open_peer_dataset(peer, request["uri"], cache, settings, batch_size=request["batch_size"],
                                  seed=request["seed"])
        if mode == "train":
            return _train(request, inner, cache)
        for epoch in range(1, int(request["epochs"]) + 1):
            if hasattr(inner, "set_epoch"):
                inner.set_epoch(epoch)  # LitData: the epoch's shuffle (Streaming counts epochs itself)
            extra: dict[str, Any] = {"timeout": BATCH_TIMEOUT_S, "prefetch_factor": 2} if workers else {}
            loader: DataLoader[Any] = DataLoader(
                _dataset(inner, request["image_size"], mode == "loader"), batch_size=request["batch_size"],
                num_workers=workers, collate_fn=_collate, **extra)
            checksum, seen, started = SampleChecksum(), set(), float("inf")
            cpu_before = _cpu_seconds()
            with ResourceMonitor() as monitor:
                marks, sizes = [time.perf_counter()], []
                for batch in loader:
                    marks.append(time.perf_counter())
                    sizes.append(len(batch["index"]))
                    seen.update(batch["index"])
                    started = min(started, batch["started"])
                    for digest in batch["digests"]:
                        checksum.add_digest(digest)
            if not sizes:
                raise DatasetError(f"{peer} yielded no batches in epoch {epoch} from {request['uri']}: its copy is "
                                   "empty or unreadable; re-run the bench to convert the dataset again")
            # The share divides by the monitor's own seconds (never 0), not by the figure rounded for the row:
            # a cached epoch of a tiny dataset lasts under 0.05 s, which rounds to 0.0.
            usage = monitor.usage
            rows.append({"epoch": epoch, **_rates(request, marks, sizes, started, epoch_figures),
                         **_checked(request, checksum, len(seen)), "cache_mb": _cache_mb(cache), **usage.to_dict(),
                         "process_cpu_pct": round(100 * (_cpu_seconds() - cpu_before) / usage.seconds, 1)})
    finally:
        shutil.rmtree(cache, ignore_errors=True)
    return rows


def _train(request: dict[str, Any], inner: Any, cache: str) -> list[dict[str, Any]]:
    """ResNet-50 for ``epochs`` epochs on the peer's batches, with the ceiling cell's model and Trainer settings."""
    import lightning
    from torch.utils.data import DataLoader

    from benchmarks.harness.cells import BATCH_TIMEOUT_S
    from benchmarks.harness.monitor import ResourceMonitor
    from mountctl.pytorch.notices import quiet_known_notices
    from mountctl.pytorch.training.model import ResNetClassifier
    from mountctl.pytorch.training.throughput import ThroughputMonitor

    quiet_known_notices()
    import logging

    logging.getLogger("lightning.pytorch").setLevel(logging.WARNING)
    checksums: list[SampleChecksum] = []

    class Checked(lightning.Callback):
        def on_train_epoch_start(self, trainer: Any, module: Any) -> None:
            checksums.append(SampleChecksum())
            if hasattr(inner, "set_epoch"):
                inner.set_epoch(trainer.current_epoch + 1)

        def on_train_batch_end(self, trainer: Any, module: Any, outputs: Any, batch: Any, index: int) -> None:
            for digest in batch["digests"]:
                checksums[-1].add_digest(digest)

    workers, batch_size = int(request["num_workers"]), int(request["batch_size"])
    extra: dict[str, Any] = {"timeout": BATCH_TIMEOUT_S, "prefetch_factor": 2} if workers else {}
    loader: DataLoader[Any] = DataLoader(_dataset(inner, request["image_size"], True), batch_size=batch_size,
                                         num_workers=workers, collate_fn=_collate, **extra)
    throughput = ThroughputMonitor(int(request["num_images"]), warmup_batches=int(request["warmup_batches"]))
    trainer = lightning.Trainer(accelerator=request["accelerator"], devices=1, precision=request["precision"],
                                max_epochs=int(request["epochs"]), callbacks=[throughput, Checked()], logger=False,
                                enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                                num_sanity_val_steps=0)
    model = ResNetClassifier(int(request["num_classes"]), lr=0.1 * batch_size / 256)
    with ResourceMonitor() as monitor:
        trainer.fit(model, train_dataloaders=loader)
    rows = []
    for number, (epoch, checksum) in enumerate(zip(throughput.epochs, checksums, strict=True), start=1):
        rows.append({"epoch": number, "first_batch_s": epoch["first_batch_s"],
                     "epoch_samples_per_s": epoch["epoch_images_per_s"] or 0.0,
                     "samples_per_s": epoch["images_per_s"] or 0.0, "images": epoch["images"],
                     "batches": epoch["batches"], "warmup_batches": epoch["warmup_batches"],
                     "precision": request["precision"], "decode": "cpu", "device": request["accelerator"],
                     **_checked(request, checksum, epoch["distinct_images"]), "cache_mb": _cache_mb(cache),
                     **monitor.usage.to_dict()})
    return rows


def _rates(request: dict[str, Any], marks: list[float], sizes: list[int], started: float, rate: Any
           ) -> dict[str, Any]:
    images = sum(sizes)
    if request["mode"] == "bytes":  # as the mount's bytes cells: from the first reader's start to the last byte
        seconds = marks[-1] - started
        return {"mb_per_s": round(request["total_bytes"] / seconds / 1e6, 2), "seconds": round(seconds, 3),
                "readers": request["num_workers"], "images": images}
    per_sample_mb = request["total_bytes"] / request["num_images"] / 1e6
    return dict(rate(marks, sizes, request["warmup_batches"], mb_per_sample=per_sample_mb))


def _checked(request: dict[str, Any], checksum: SampleChecksum, distinct: int) -> dict[str, Any]:
    """Every sample once, with the bytes and label it was converted with; else the cell fails."""
    expected = int(request["num_images"])
    if checksum.count != expected or distinct != expected or checksum.value != request["checksum"]:
        raise DatasetError(f"{request['peer']} delivered {checksum.count} samples ({distinct} distinct) with "
                           f"checksum {checksum.value}; {request['uri']}peer.json says {expected} with "
                           f"{request['checksum']}: re-run the bench to convert the dataset again")
    return {"samples_checked": checksum.count, "checksum": checksum.value}


def main() -> int:
    """Child entry point: a JSON request on stdin, a JSON answer (rows or an error) as stdout's last line."""
    request = json.loads(sys.stdin.read())
    try:
        answer: dict[str, Any] = {"rows": read_epochs(request, resolve())}
    except Exception as exc:  # noqa: BLE001  the parent records any failure of the library as the cell's status
        answer = {"error": f"{type(exc).__name__}: {exc}"}
    print("\n" + json.dumps(answer), flush=True)
    return 0


# -- the parent: one child per cell ----------------------------------------------------------


def peer_epochs(settings: S3Settings, uri: str, marker: dict[str, Any], *, peer: str, mode: str, num_workers: int,
                batch_size: int, image_size: int, warmup_batches: int, total_bytes: int, seed: int = 0,
                epochs: int = 2, timeout_s: float = CHILD_TIMEOUT_S, **train: Any) -> list[dict[str, Any]]:
    """Rows of epochs 1..``epochs`` of ``peer`` reading ``uri``'s converted copy (``marker``: its peer.json).

    ``mode="train"`` also takes ``accelerator``, ``precision`` and ``num_classes``.
    """
    if mode not in PEER_MODES:
        raise ValueError(f"peer mode must be one of {PEER_MODES}, not {mode!r}")
    # The marker names where its copy is (beside make's data, or under --peer-data).
    request = {"peer": peer, "uri": marker.get("uri") or peer_uri(uri, peer), "mode": mode, "num_workers": num_workers,
               "batch_size": batch_size, "image_size": image_size, "warmup_batches": warmup_batches, "seed": seed,
               "epochs": epochs, "num_images": marker["num_images"], "checksum": marker["checksum"],
               "total_bytes": total_bytes, **train}
    # The cell's cache (a whole copy of the dataset) and the library's lock files live in one directory
    # that the parent owns, so that a child killed at its timeout leaves nothing behind.
    workdir = tempfile.mkdtemp(prefix=f"mountctl-{peer}-cell-")
    request["cache"] = os.path.join(workdir, "cache")
    os.mkdir(os.path.join(workdir, "tmp"))
    env = {**peer_env(settings), "TMPDIR": os.path.join(workdir, "tmp")}
    try:
        out, err, returncode = _run_child(request, env, peer, timeout_s)
    finally:
        remove_streaming_segments(request["cache"])
        shutil.rmtree(workdir, ignore_errors=True)
    last = out.strip().splitlines()[-1] if out.strip() else ""
    try:
        answer = json.loads(last)
    except ValueError:
        tail = redact(" ".join(err.strip().splitlines()[-3:]))
        raise DatasetError(f"the {peer} cell's child exited with {returncode} without an answer: "
                           f"{tail or 'no output'}") from None
    if "error" in answer:
        raise DatasetError(redact(f"{peer}: {answer['error']}"))
    return list(answer["rows"])


def _run_child(request: dict[str, Any], env: dict[str, str], peer: str, timeout_s: float) -> tuple[str, str, int]:
    child = subprocess.Popen([sys.executable, "-m", "benchmarks.harness.peers"], env=env, cwd=CHECKOUT,
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             start_new_session=True)  # its own group: a timeout ends the DataLoader workers too
    try:
        out, err = child.communicate(json.dumps(request), timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(child.pid, signal.SIGKILL)
        child.communicate()
        raise DatasetError(f"the {peer} cell did not finish within {timeout_s:.0f} s; its child was killed") from None
    finally:
        if child.poll() is None:  # an exception other than the timeout (e.g. KeyboardInterrupt)
            os.killpg(child.pid, signal.SIGKILL)
            child.wait()
    return out, err, child.returncode


# -- the sweep's hooks ---------------------------------------------------------------------


def _head(peer: str, base: dict[str, Any]) -> dict[str, Any]:
    return {"source": peer, "kind": "peer", "peer": peer, "backend": "-", **base}


def peer_train_cells(run: SweepRun, store: StoreCells) -> None:
    """One ResNet-50 training cell per peer (full runs), as the mount's training cells: same model, sizes, workers."""
    config, train = run.config, store.train
    if train is None:
        return
    if store.gpu_missing:  # the training cells' note says why; a peer's epochs are counted and not run
        run.bar.update(len(train.peers) * len(EPOCHS))
        return
    manifest, uri, markers = train.manifest, train.uri, train.peers
    base = {"dataset": config.train_dataset.label, "num_images": manifest.num_images,
            "num_workers": config.train_workers, "batch_size": config.train_batch_size}
    for peer in markers:
        run.epochs({"cell": "train", **_head(peer, base)},
                   functools.partial(peer_epochs, run.settings, uri, markers[peer], peer=peer, mode="train",
                                     num_workers=config.train_workers, batch_size=config.train_batch_size,
                                     image_size=manifest.image_size, warmup_batches=config.train_warmup_steps,
                                     total_bytes=manifest.total_bytes, seed=config.seed,
                                     accelerator=config.accelerator, precision=config.train_precision,
                                     num_classes=manifest.num_classes))


def peer_cell_count(config: SweepConfig, planned: Planned) -> int:
    """Progress-bar rows of one dataset's peer cells: loader (and bytes) epochs of each peer."""
    per_peer = len(config.num_workers) + (len(config.bytes_readers) if config.bytes_cells else 0)
    return len(config.peers) * per_peer * len(EPOCHS) if config.loader_cells else 0


def peer_train_cell_count(config: SweepConfig, planned: Planned) -> int:
    """The peers' training epochs: full runs only (--quick converts no training copy)."""
    return len(config.peers) * len(EPOCHS) if planned.train and planned.peer_train and not config.quick else 0


def prepare_peer_data(config: Any, settings: S3Settings, uri: str, manifest: Any) -> dict[str, dict[str, Any]]:
    """The dataset step's share: each peer's copy of ``uri``, converted and checked when missing; {peer: peer.json}.

    The copies go under ``--peer-data``, or beside data that ``make`` wrote; for a user's own data with no
    ``--peer-data`` this fails before anything is written (``peer_data_base``).
    """
    from benchmarks.harness.peer_data import ensure_peer_data, peer_data_base

    base = peer_data_base(manifest, uri, config.peer_data, config.peers)
    return {peer: ensure_peer_data(settings, uri, manifest, peer, chunk_bytes=_chunk_bytes(manifest), peer_data=base)
            for peer in config.peers}


def _chunk_bytes(manifest: Any) -> int:
    """Chunks as large as the dataset's shards: the peers fetch objects of the size the mount reads."""
    return max(1 << 16, max(shard.bytes for shard in manifest.shards))


def peer_cells(run: SweepRun, dataset: DatasetCells) -> None:
    """Loader cells (and bytes cells) of each peer on one dataset, epochs 1 and 2 per cell, each in its own child."""
    config, manifest, uri, markers = run.config, dataset.manifest, dataset.uri, dataset.peers
    common = {"batch_size": config.batch_size, "image_size": manifest.image_size,
              "warmup_batches": config.warmup_batches, "total_bytes": manifest.total_bytes, "seed": config.seed}
    for peer in config.peers if config.loader_cells else ():
        for workers in config.num_workers:
            run.epochs({"cell": "loader", "num_workers": workers, **_head(peer, dataset.base)},
                       functools.partial(peer_epochs, run.settings, uri, markers[peer], peer=peer, mode="loader",
                                         num_workers=workers, **common))
        for readers in config.bytes_readers if config.bytes_cells else ():
            run.epochs({"cell": "bytes", "readers": readers, "variant": "own cache", **_head(peer, dataset.base)},
                       functools.partial(peer_epochs, run.settings, uri, markers[peer], peer=peer, mode="bytes",
                                         num_workers=readers, **common))


# -- the report's comparison -------------------------------------------------------------------

TARGET = 1.0  # issues #17, #25: the mount at least as fast as the faster peer, loader cell, whole epochs 1 and 2


def peer_comparison(cells: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per (store, dataset, workers, epoch): the fastest mount's loader cell against the faster peer's."""
    ok = [c for c in cells if c["cell"] == "loader" and c["status"] == "ok"]
    keys = list(dict.fromkeys((c.get("store", "local"), c["dataset"], c["num_workers"], c["epoch"])
                              for c in ok if c.get("kind") == "peer"))
    rows = []
    for store, dataset, workers, epoch in keys:
        same = [c for c in ok if (c.get("store", "local"), c["dataset"], c["num_workers"], c["epoch"])
                == (store, dataset, workers, epoch)]
        mounts = [c for c in same if c.get("kind") == "mountpoint"]
        peers = {c["peer"]: c for c in same if c.get("kind") == "peer"}
        # Whole epoch first (start-up included): the fastest mount and the faster peer over the epoch.
        mount = max(mounts, key=_whole, default=None)
        faster = max(peers.values(), key=_whole)
        ratio = round(_whole(mount) / _whole(faster), 3) if mount and _whole(faster) else None
        rows.append({"store": store, "dataset": dataset, "num_workers": workers, "epoch": epoch,
                     "mount": mount["source"] if mount else None,
                     "mount_first_batch_s": mount.get("first_batch_s") if mount else None,
                     "mount_epoch_samples_per_s": _whole(mount) if mount else None,
                     **{f"{peer}_first_batch_s": peers[peer].get("first_batch_s") if peer in peers else None
                        for peer in PEERS},
                     **{f"{peer}_epoch_samples_per_s": _whole(peers[peer]) if peer in peers else None
                        for peer in PEERS},
                     "faster_peer": faster["peer"], "ratio_to_faster_peer": ratio,
                     "target_met": None if ratio is None else ratio >= TARGET,
                     # After warm-up: what each streams at once started.
                     "mount_samples_per_s": mount["samples_per_s"] if mount else None,
                     **{f"{peer}_samples_per_s": peers[peer]["samples_per_s"] if peer in peers else None
                        for peer in PEERS},
                     "mount_cpu_pct": _cpu(mount), "faster_peer_cpu_pct": _cpu(faster)})
    return rows


def _whole(cell: dict[str, Any] | None) -> float:
    """Samples/s over the whole epoch (a row from before whole-epoch figures: after warm-up)."""
    return float((cell or {}).get("epoch_samples_per_s") or (cell or {}).get("samples_per_s") or 0.0)


def _cpu(cell: dict[str, Any] | None) -> float | None:
    """Loader processes plus the mount daemon: all the CPU a route costs (100 = one core).

    A peer cell's ``process_cpu_pct`` counts its workers exactly (they are reaped within the cell).
    """
    if cell is None:
        return None
    loader = cell.get("process_cpu_pct", cell.get("loader_cpu_pct")) or 0.0
    return round(loader + (cell.get("program_cpu_pct") or 0.0), 1)


def peer_markdown(cells: list[dict[str, Any]], table: Callable[[list[str], list[list[Any]]], str]) -> str:
    rows = peer_comparison(cells)
    if not rows:
        return ""
    return (f"## Peers: the fastest mount against LitData and MosaicML Streaming (loader cells, whole epoch; "
            f"target >= {TARGET} x)\n\n" + table(
                ["store", "dataset", "workers", "epoch", "mount", "mount first batch s",
                 *[f"{peer} first batch s" for peer in PEERS], "mount samples/s", *[f"{peer} samples/s" for peer in PEERS],
                 "faster peer", "x faster peer", "target met", "mount after warm-up samples/s",
                 *[f"{peer} after warm-up samples/s" for peer in PEERS],
                 "mount CPU % (loader + program)", "faster peer CPU %"],
                [[r["store"], r["dataset"], r["num_workers"], r["epoch"], r["mount"], r["mount_first_batch_s"],
                  *[r[f"{peer}_first_batch_s"] for peer in PEERS], r["mount_epoch_samples_per_s"],
                  *[r[f"{peer}_epoch_samples_per_s"] for peer in PEERS], r["faster_peer"], r["ratio_to_faster_peer"],
                  {True: "yes", False: "no", None: "-"}[r["target_met"]], r["mount_samples_per_s"],
                  *[r[f"{peer}_samples_per_s"] for peer in PEERS], r["mount_cpu_pct"],
                  r["faster_peer_cpu_pct"]] for r in rows]))

if __name__ == "__main__":
    sys.exit(main())
