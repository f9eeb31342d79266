"""``resnet.py bench --suite mlperf``: MLPerf Storage's engine, DLIO, reading through each route.

DLIO (``dlio-benchmark`` 2.0.0, in ``.venv-dlio``: ``scripts/setup_dlio.sh``) emulates N
accelerators as MPI ranks that sleep for a batch's compute time, and reports accelerator
utilisation (AU: the share of time not spent waiting for data).  A storage system passes a
workload while AU >= 90 %; its result is how many accelerators it keeps there.  DLIO's own
workload configs run unmodified: only Hydra overrides scale them to this machine.

Routes: the dataset on local disk (the reference), and the same objects through a mountctl
mount per installed program, with its cache.  DLIO 2.0.0 cannot read S3 itself on its
PyTorch path (``S3Storage`` hands listing to the framework, and ``TorchFramework`` lists
nothing; its readers ``np.load``/``PIL.Image.open`` paths), so that route is recorded as
not possible rather than measured.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from benchmarks.harness.dlio import dlio_venv, read_summary, run_dlio
from benchmarks.harness.limits import LOCAL
from benchmarks.harness.stores import check_store_choice, far_profile, plan_stores
from mountctl import InvalidSpec, S3Settings, installed_backends, parse_s3_uri, resolve

__all__ = ["MlperfWorkload", "MlperfConfig", "SCALES", "dlio_overrides", "accelerators_kept", "search_accelerators",
           "kept_table", "mount_routes", "run_mlperf", "run_mlperf_command", "AU_TARGET"]

AU_TARGET = 90.0  # MLPerf Storage's pass mark, % (DLIO's `metric.au` in every shipped workload)
S3_DIRECT = "s3 (DLIO)"
NOT_POSSIBLE = ("not possible: DLIO 2.0.0's PyTorch path cannot read S3 (its S3Storage leaves listing to "
                "TorchFramework, which lists nothing, and its readers open local paths)")


@dataclass(frozen=True)
class MlperfWorkload:
    """One of DLIO's shipped workloads and the overrides that scale it to this machine.

    ``batch_size`` and ``computation_time`` are what an accelerator asks for: unet3d keeps
    the H100 config's own (7 samples per 0.323 s); the image workload keeps its H100
    compute time per batch with a batch two cores can decode.
    """

    name: str
    config: str  # DLIO's workload config, as shipped
    files: int
    record_bytes: int
    batch_size: int
    computation_time: float
    read_threads: int = 2
    epochs: int = 2
    extra: tuple[str, ...] = ()  # e.g. the PyTorch reader for a workload shipped for TensorFlow

    def __post_init__(self) -> None:
        if min(self.files, self.record_bytes, self.batch_size, self.epochs) < 1 or self.read_threads < 0:
            raise InvalidSpec(f"an MLPerf workload needs files, records, a batch and epochs >= 1, not {self}")
        if self.computation_time < 0:
            raise InvalidSpec(f"computation_time cannot be negative, not {self.computation_time}")

    @property
    def dataset_bytes(self) -> int:
        return self.files * self.record_bytes

    @property
    def label(self) -> str:
        """The dataset's prefix: its recipe, so that a later run reuses it."""
        return f"{self.name}-n{self.files}-r{self.record_bytes}"

    @property
    def samples_per_s_asked(self) -> float:
        """What one accelerator consumes when it never waits."""
        return self.batch_size / self.computation_time if self.computation_time else float("inf")


_PYTORCH_IMAGES = ("++workload.framework=pytorch", "++workload.reader.data_loader=pytorch",
                   "++workload.dataset.format=jpeg")


def _scale(files: int, unet_bytes: int, image_files: int, epochs: int, read_threads: int
           ) -> tuple[MlperfWorkload, ...]:
    return (
        MlperfWorkload("unet3d", "unet3d_h100", files, unet_bytes, batch_size=7, computation_time=0.323,
                       read_threads=read_threads, epochs=epochs),
        # resnet50_h100 asks 400 images per 0.224 s (1,786/s per accelerator): beyond two cores' JPEG decode
        # (local disk, the reference, reads far fewer here: BENCHMARKS.md, "DLIO"), so the batch is scaled to
        # 16 at the same compute time: 71 images/s per accelerator.
        MlperfWorkload("resnet50-jpeg", "resnet50_h100", image_files, 114_688, batch_size=16, computation_time=0.224,
                       read_threads=read_threads, epochs=epochs, extra=_PYTORCH_IMAGES),
    )


# full: the scale on this machine; quick: a first look in minutes; tiny: for tests (one epoch, a few files).
SCALES: dict[str, tuple[MlperfWorkload, ...]] = {
    "full": _scale(files=896, unet_bytes=1 << 20, image_files=1792, epochs=2, read_threads=2),
    "quick": _scale(files=224, unet_bytes=512 << 10, image_files=448, epochs=2, read_threads=2),
    "tiny": _scale(files=14, unet_bytes=64 << 10, image_files=64, epochs=1, read_threads=1),
}


@dataclass(frozen=True)
class MlperfConfig:
    uri: str  # s3://bucket/prefix/ under which the suite keeps its datasets
    scale: str = "full"
    workloads: tuple[str, ...] = ("unet3d", "resnet50-jpeg")
    backends: tuple[str, ...] = ()  # (): every installed mount program
    warm: bool = True  # each program also with ``warm="all"``: its cache read ahead of DLIO, no change to DLIO
    accelerators: tuple[int, ...] = ()  # (): 1, 2, 4 ... up to two ranks per core (ranks mostly sleep)
    store: str = "far"
    far_latency_ms: float | None = None
    far_rate_mb_s: float | None = None
    out: str = "bench-results"
    run_timeout_s: float = 900.0

    def __post_init__(self) -> None:
        if self.scale not in SCALES:
            raise InvalidSpec(f"unknown MLPerf scale {self.scale!r}: choose one of {', '.join(SCALES)}")
        known = [w.name for w in SCALES[self.scale]]
        if not self.workloads or not set(self.workloads) <= set(known):
            raise InvalidSpec(f"MLPerf workloads are {', '.join(known)}, not {self.workloads}")
        if self.accelerators and min(self.accelerators) < 1:
            raise InvalidSpec(f"accelerator counts must be >= 1, not {self.accelerators}")
        check_store_choice(self.store)
        far_profile(self.far_latency_ms, self.far_rate_mb_s)
        location = str(parse_s3_uri(self.uri))
        object.__setattr__(self, "uri", location if location.endswith("/") else location + "/")

    @property
    def chosen(self) -> tuple[MlperfWorkload, ...]:
        return tuple(w for w in SCALES[self.scale] if w.name in self.workloads)

    @property
    def counts(self) -> tuple[int, ...]:
        """Accelerator counts to try: the full search up to two ranks per core, or for ``quick`` 2 only (the
        count local disk keeps at 90 % here, where the targets compare routes; the search took most of a 24-minute
        quick run, and 1 and 2 still took 14 minutes)."""
        if self.accelerators:
            return tuple(sorted(set(self.accelerators)))
        if self.scale == "quick":
            return (2,)
        most = 2 * (os.cpu_count() or 1)
        return tuple(n for n in (1, 2, 4, 8, 16, 32, 64) if n <= most)


def dlio_overrides(workload: MlperfWorkload, data_folder: str, output_folder: str, *, generate: bool = False
                   ) -> list[str]:
    """DLIO's command line after ``workload=<config>``: Hydra overrides only, DLIO's config left as shipped."""
    w = "++workload."
    record = workload.record_bytes
    args = [f"workload={workload.config}", *workload.extra,
            f"{w}dataset.data_folder={data_folder}", f"{w}dataset.num_files_train={workload.files}",
            f"{w}dataset.num_samples_per_file=1", f"{w}dataset.record_length={record}",
            f"{w}dataset.record_length_stdev=0", f"{w}dataset.record_length_resize={record}",
            f"{w}reader.batch_size={workload.batch_size}", f"{w}reader.read_threads={workload.read_threads}",
            f"{w}train.computation_time={workload.computation_time}", f"{w}train.epochs={workload.epochs}",
            f"{w}workflow.checkpoint=False", f"{w}workflow.evaluation=False",
            f"{w}output.folder={output_folder}", f"hydra.run.dir={output_folder}/hydra"]
    if generate:
        args += [f"{w}workflow.generate_data=True", f"{w}workflow.train=False"]
    return args


def accelerators_kept(runs: list[dict[str, Any]], target: float = AU_TARGET) -> int:
    """The most accelerators among ``runs`` at AU >= target, below the first count that failed (0: none)."""
    kept = 0
    for run in sorted(runs, key=lambda r: r["accelerators"]):
        if run.get("status") != "ok" or run["au_pct"] < target:
            break
        kept = run["accelerators"]
    return kept


def search_accelerators(counts: tuple[int, ...], run_one: Callable[[int], dict[str, Any]],
                        target: float = AU_TARGET) -> list[dict[str, Any]]:
    """Run ``counts`` in ascending order and stop after the first that fails the target (more would fail too)."""
    runs: list[dict[str, Any]] = []
    for count in sorted(counts):
        run = run_one(count)
        runs.append(run)
        if run.get("status") != "ok" or run["au_pct"] < target:
            break
    return runs


def generate_dataset(venv: Path, workload: MlperfWorkload, folder: str, timeout_s: float) -> None:
    """DLIO writes the dataset itself (np.savez seeks: on local disk, never into a write-once mount)."""
    args = dlio_overrides(workload, folder, f"{folder}.generate", generate=True)
    run_dlio(venv, 1, args, f"{folder}.generate", timeout_s)
    shutil.rmtree(f"{folder}.generate", ignore_errors=True)
    os.makedirs(os.path.join(folder, "valid"), exist_ok=True)  # DLIO lists it even with evaluation off


def _files_under(folder: str) -> dict[str, str]:
    found = {}
    for root, _, names in os.walk(folder):
        for name in names:
            path = os.path.join(root, name)
            found[os.path.relpath(path, folder)] = path
    return found


def upload_dataset(settings: S3Settings, folder: str, uri: str) -> None:
    """Copy the generated files under ``uri`` (the origin: made once, read by every store), plus DATA/valid/."""
    from mountctl import s3

    location, client = parse_s3_uri(uri), s3.client(settings)
    files = _files_under(folder)
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda item: client.upload_file(item[1], location.bucket, location.prefix + item[0]),
                      files.items()))
    # An empty "valid/" marker: a mount shows the directory that DLIO lists.
    client.put_object(Bucket=location.bucket, Key=location.prefix + "valid/", Body=b"")


def _dataset_present(settings: S3Settings, uri: str, workload: MlperfWorkload) -> bool:
    from mountctl import s3

    location = parse_s3_uri(uri)
    sizes = s3.list_object_sizes(s3.short_client(settings), location.bucket, location.prefix + "train/")
    return len(sizes) == workload.files


@contextlib.contextmanager
def _route_dir(route: str, local: str, uri: str, settings: S3Settings, workload: MlperfWorkload
               ) -> Iterator[str]:
    """The directory DLIO reads for ``route``: the local copy, or a fresh mount (cold cache) of the objects.

    ``mount/<program>+warm``: the mount reads every file into its cache in the background from the moment it
    is mounted, while DLIO starts at once (what ``mountctl mount --warm`` does for a user's loader; mount-s3 does
    it by itself when the dataset fits its cache, and ``+no-warm`` turns that off).
    """
    if route == LOCAL:
        yield local
        return
    import mountctl

    backend, _, variant = route.split("/", 1)[1].partition("+")
    options: dict[str, Any] = dict(mountctl.cache_options(workload.dataset_bytes))
    if variant == "warm" and "cache_dir" in options:
        options["warm"] = "all"
    if variant == "no-warm":  # mount-s3's automatic warm turned off: the default of the round before it
        options["warm"] = "off"
    if variant == "index":
        from mountctl.pytorch.data.index.index_mount import object_list_under

        # The objects listed once, before DLIO starts: each open of the run is answered from the list.
        options["objects"] = object_list_under(settings, uri)
    with mountctl.mount(uri, backend=backend, settings=settings, shared=False, **options) as mounted:
        if variant != "index":
            yield mounted.path
            return
        # A list holds no empty directory (mount-s3 drops directory markers) and DLIO lists valid/ even with
        # evaluation off: it reads a local folder whose train/ is the mount's.
        with tempfile.TemporaryDirectory(prefix="mountctl-mlperf-index-") as folder:
            os.symlink(os.path.join(mounted.path, "train"), os.path.join(folder, "train"))
            os.mkdir(os.path.join(folder, "valid"))
            yield folder


def _measure(venv: Path, workload: MlperfWorkload, route: str, store: str, ranks: int, local: str, uri: str,
             settings: S3Settings, scratch: str, timeout_s: float) -> dict[str, Any]:
    row: dict[str, Any] = {"workload": workload.name, "route": route, "store": store, "accelerators": ranks}
    out = os.path.join(scratch, "runs", f"{workload.name}-{route.replace('/', '-')}-{store}-{ranks}")
    began = time.perf_counter()
    try:
        with _route_dir(route, local, uri, settings, workload) as data:
            run_dlio(venv, ranks, dlio_overrides(workload, data, out), out, timeout_s)
        row.update(read_summary(os.path.join(out, "summary.json")), status="ok")
    except Exception as exc:  # one failed run is a row of the report, not the end of the suite
        row["status"] = f"failed: {exc}"
    row["seconds"] = round(time.perf_counter() - began, 1)
    return row


def mount_routes(backends: tuple[str, ...], warm: bool, *, quick: bool = False) -> list[str]:
    """Each program's mount with its defaults, and with ``warm`` beside it the other choice: rclone and s3fs
    warmed (``+warm``, not in a ``quick`` run: a user's choice, where the quick run keeps to the defaults),
    mount-s3, which warms by itself when the dataset fits its cache, without that warm (``+no-warm``); and
    mount-s3 once more mounted from a list of the objects (``mount/mount-s3+index``: no LIST or HEAD while DLIO
    runs)."""
    chosen = backends or installed_backends()
    routes = []
    for b in chosen:
        routes.append(f"mount/{b}")
        if warm and b == "mount-s3":
            routes.append(f"mount/{b}+no-warm")
        elif warm and not quick:
            routes.append(f"mount/{b}+warm")
    return routes + (["mount/mount-s3+index"] if "mount-s3" in chosen else [])


def run_mlperf(config: MlperfConfig, *, settings: S3Settings | None = None,
               progress: Callable[[str], None] = print) -> dict[str, Any]:
    """Every workload on every route and store; returns the run as one JSON-able dict."""
    from benchmarks.harness.facts import machine_facts, run_facts, versions

    venv = dlio_venv()  # before anything is made: a missing DLIO is a setup error
    plan = plan_stores(config.store, settings or resolve(), config.far_latency_ms, config.far_rate_mb_s)
    stores = sorted(plan.stores, key=lambda s: s != "far")  # far first, loopback second
    result: dict[str, Any] = {
        "suite": "mlperf", "started": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "config": asdict(config), "machine": machine_facts(), "versions": versions(), "au_target_pct": AU_TARGET,
        "workloads": [{**asdict(w), "samples_per_s_asked": round(w.samples_per_s_asked, 1)} for w in config.chosen],
        "stores": {}, "runs": [], "run": run_facts()}
    began = time.perf_counter()
    scratch = tempfile.mkdtemp(prefix="mountctl-mlperf-")

    def search(workload: MlperfWorkload, route: str, store: str, local: str, uri: str, store_s3: S3Settings
               ) -> None:
        runs = search_accelerators(config.counts, lambda n: _measure(
            venv, workload, route, store, n, local, uri, store_s3, scratch, config.run_timeout_s))
        result["runs"] += runs
        progress(f"mlperf: {workload.name} {route} ({store}): {accelerators_kept(runs)} accelerators at AU >= "
                 f"{AU_TARGET:g} % (tried {', '.join(str(r['accelerators']) for r in runs)})")

    try:
        for workload in config.chosen:
            local, uri = os.path.join(scratch, workload.label), config.uri + workload.label + "/"
            progress(f"mlperf: {workload.name}: DLIO generates {workload.files} files on local disk")
            generate_dataset(venv, workload, local, config.run_timeout_s)
            if not _dataset_present(plan.origin, uri, workload):
                upload_dataset(plan.origin, local, uri)
            # Local disk does not depend on the store: measured once, the reference for every store.
            search(workload, LOCAL, "-", local, uri, plan.origin)
            for store in stores:
                with plan.settings(store, os.path.join(scratch, "far-proxy")) as store_s3:
                    result["stores"][store] = {"endpoint": store_s3.endpoint_url or "AWS S3",
                                               **(plan.profile.to_dict() if store == "far" else {})}
                    for route in mount_routes(config.backends, config.warm, quick=config.scale == "quick"):
                        search(workload, route, store, local, uri, store_s3)
                result["runs"].append({"workload": workload.name, "route": S3_DIRECT, "store": store,
                                       "status": NOT_POSSIBLE})
            shutil.rmtree(local, ignore_errors=True)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    result["kept"] = kept_table(result["runs"])
    result["seconds"] = round(time.perf_counter() - began, 1)
    result["machine"]["load_average_end"] = [round(x, 2) for x in os.getloadavg()]
    return result


def kept_table(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per workload, route and store: accelerators kept at AU >= 90 %, and the ratio to local disk's count."""
    groups: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
    for run in runs:
        if "accelerators" in run:
            groups.setdefault((run["workload"], run["route"], run["store"]), []).append(run)
    local = {w: accelerators_kept(rs) for (w, r, _), rs in groups.items() if r == LOCAL}
    rows = []
    for (workload, route, store), group in groups.items():
        kept = accelerators_kept(group)
        at_kept = next((r for r in group if r["accelerators"] == kept), None)
        reference = local.get(workload)
        rows.append({"workload": workload, "route": route, "store": store, "accelerators_kept": kept,
                     "au_pct_by_accelerators": {r["accelerators"]: r.get("au_pct", r["status"]) for r in group},
                     "au_pct": at_kept["au_pct"] if at_kept else None,
                     "samples_per_s": at_kept["samples_per_s"] if at_kept else None,
                     "x_local_disk": round(kept / reference, 3) if reference else None})
    return rows


def run_mlperf_command(config: MlperfConfig, uri: str | None, default_uri: str, *, progress: bool = True) -> int:
    """``resnet.py bench --suite mlperf``: the suite, its JSON and Markdown under ``--out``, the tables printed.
    ``config`` is built and checked before this starts anything (``benchmark/command.py``)."""
    from benchmarks.harness.report import mlperf_markdown, write_report
    from mountctl import uri_or_embedded

    dlio_venv()  # a missing DLIO is a setup error: said before the embedded S3 starts, not after
    with uri_or_embedded(uri, default_uri):
        result = run_mlperf(config, progress=print if progress else (lambda _: None))
    paths = write_report(result, config.out, "mlperf")
    print(mlperf_markdown(result))
    print("wrote " + ", ".join(paths.values()), flush=True)
    return 0
