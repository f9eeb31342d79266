"""`resnet.py bench`: one run measures every source kind beside the limits and writes JSON, Markdown and PNG.

The sweep runs on tiny data (the ``tiny`` preset: 32 px images, a few shards,
two ResNet-50 steps) against the real local S3 and real mounts, so it checks
the shape and sanity of the results, not their speed.  It runs in both stores:
the local S3 itself and the same bucket through a real far-store proxy.  One sweep serves
every test here (the session's ``sweep`` fixture in conftest.py); the first test to ask for it
carries its set-up, hence the module's bound of 20 minutes, which a loaded machine needs.
"""

from __future__ import annotations

import contextlib
import json
import socket
import urllib.parse

import psutil
import pytest

from benchmarks.harness import preset
from benchmarks.harness.bytes_path import READ_SIZE, bytes_routes
from benchmarks.harness.limits import LOCAL
from benchmarks.harness.loader_cells import source_plan
from benchmarks.harness.plain_cells import MODES, READERS
from benchmarks.harness.stores import STORES, plan_stores
from benchmarks.harness.sweep_run import EPOCHS
from mountctl import FarProfile, installed_backends
from mountctl.errors import InvalidSpec
from resnet import build_parser

pytestmark = pytest.mark.timeout(1200)


def cells(result: dict, cell: str, status: str | None = "ok") -> list[dict]:
    return [c for c in result["cells"] if c["cell"] == cell and (status is None or c["status"] == status)]


def full_stores(config) -> tuple[str, ...]:
    """The stores that ran every cell: both, or the local one alone where the far one ran its loader cells only
    (``far_cells="loader"``, as the ``tiny`` preset does)."""
    return STORES if config.far_cells == "all" else ("local",)


def test_every_loader_cell_is_measured_against_the_limits_of_the_same_run(sweep):
    config, result, _ = sweep
    sources = [LOCAL] + [label for label, _, _ in source_plan(config)]
    assert any(label.startswith("mountpoint/") for label in sources), "no mount program was benchmarked"
    assert {"mountpoint/mount-s3", "mountpoint/mount-s3+index", "mountpoint/mount-s3-read-ahead"} <= set(sources)  # built by setup: never skipped
    expected = {(st, d.label, w, s, e) for st in STORES for d in config.datasets for w in config.num_workers
                for s in sources for e in EPOCHS}
    loaders = cells(result, "loader", status=None)
    assert {(c["store"], c["dataset"], c["num_workers"], c["source"], c["epoch"]) for c in loaders} == expected
    for cell in loaders:
        assert cell["status"] == "ok", cell
        assert cell["samples_per_s"] > 0 and cell["mb_per_s"] > 0
        assert cell["ratio_to_local_disk"] > 0 and cell["ratio_to_raw_get"] > 0
        assert cell["loader_cpu_pct"] > 0 and cell["loader_peak_rss_mb"] > 0
        if cell["kind"] == "mountpoint":
            assert cell["program_peak_rss_mb"] > 0 and cell["program_cpu_pct"] is not None
    assert all(c["ratio_to_local_disk"] == 1.0 for c in loaders if c["source"] == LOCAL)
    assert {(c["store"], c["dataset"]) for c in cells(result, "raw-get")} == {
        (st, d.label) for st in STORES for d in config.datasets}
    assert all(c["mb_per_s"] > 0 for c in cells(result, "raw-get"))


def test_mounts_report_start_up_and_every_source_its_first_sample(sweep):
    config, result, _ = sweep
    firsts = cells(result, "first-sample")
    assert len(firsts) == len(STORES) * len(config.datasets) * (1 + len(source_plan(config)))
    assert all(c["first_sample_s"] > 0 for c in firsts)
    assert all(c["mount_startup_s"] > 0 for c in firsts if c["kind"] == "mountpoint")


def test_training_runs_per_source_kind_beside_the_ceiling(sweep):
    config, result, _ = sweep
    assert [c["store"] for c in cells(result, "ceiling")] == list(full_stores(config))
    assert all(c["samples_per_s"] > 0 for c in cells(result, "ceiling"))
    trained = cells(result, "train")
    assert {(c["store"], c["source"], c["epoch"]) for c in trained} == {
        (st, label, e) for st in full_stores(config) for label, _, _ in source_plan(config) for e in EPOCHS}
    assert all(c["decode"] == "cpu" for c in trained)
    assert all(c["samples_per_s"] > 0 and c["ratio_to_ceiling"] > 0 for c in trained)
    assert [c["status"] for c in cells(result, "gpu", status=None)] == [
        "not run: --accelerator cpu (no GPU on this machine)"] or result["machine"]["gpu"]


def routes(config) -> set[tuple[str, str]]:
    return {(r.source, r.variant) for r in bytes_routes(config.loader_kinds, config.backends or installed_backends())}


def test_bytes_cells_cover_every_route_both_epochs_and_every_reader_count(sweep):
    config, result, _ = sweep
    assert {"local-disk", "raw GET", "s3io", "fsspec"} <= {source for source, _ in routes(config)}
    assert {variant for source, variant in routes(config) if source.startswith("mountpoint/")} == {
        "default", "no-cache"}
    moved = cells(result, "bytes", status=None)
    assert {(c["store"], c["source"], c["variant"], c["readers"], c["epoch"]) for c in moved} == {
        (st, s, v, r, e) for st in full_stores(config) for s, v in routes(config) for r in config.bytes_readers
        for e in EPOCHS}
    for cell in moved:
        assert cell["status"] == "ok", cell
        # The reader's CPU share is sampled: a cell read from kept pages can end between two samples (seen: 0.0).
        assert cell["mb_per_s"] > 0 and cell["ratio_to_raw_get"] > 0 and cell["loader_cpu_pct"] >= 0
        assert 0 < cell["member_bytes"] < cell["bytes"]  # the tar walk read the members, not the headers
        if cell["kind"] == "mountpoint":
            assert cell["program_cpu_pct"] is not None and cell["program_peak_rss_mb"] > 0


def test_random_reads_cover_every_route_against_s3io_range_reads(sweep):
    config, result, _ = sweep
    random_cells = cells(result, "random", status=None)
    assert {(c["store"], c["source"], c["variant"]) for c in random_cells} == {
        (st, s, v) for st in full_stores(config) for s, v in routes(config)}
    for cell in random_cells:
        assert cell["status"] == "ok", cell
        assert cell["reads"] == config.random_reads and cell["read_size"] == READ_SIZE
        # a page-cached 64 KiB read can take under a microsecond: the median is not negative, the rate positive
        assert cell["mb_per_s"] > 0 and cell["p50_ms"] >= 0 and cell["ratio_to_s3io_range"] > 0
    assert [c["ratio_to_s3io_range"] for c in random_cells if c["kind"] == "s3io"] == [1.0] * len(full_stores(config))


def test_plain_reader_cells_cover_local_disk_and_each_program_both_ways_and_both_passes(sweep):
    config, result, _ = sweep
    programs = config.backends or installed_backends()
    expected = {(st, d.label, LOCAL, "by name", r, e) for st in full_stores(config) for d in config.datasets
                for r in READERS for e in EPOCHS}
    expected |= {(st, d.label, f"mountpoint/{p}", m, r, e) for st in full_stores(config) for d in config.datasets
                 for p in programs for m in MODES for r in READERS for e in EPOCHS}
    plain = cells(result, "plain", status=None)
    assert {(c["store"], c["dataset"], c["source"], c["mode"], c["readers"], c["epoch"]) for c in plain} == expected
    for cell in plain:
        assert cell["status"] == "ok", cell
        assert cell["files"] == cell["shards"] and cell["bytes"] > 0 and cell["mb_per_s"] > 0
        assert cell["ratio_to_raw_get"] > 0 and cell["ratio_to_local_disk"] > 0
        if cell["source"] != LOCAL:
            assert cell["program_peak_rss_mb"] > 0


def test_the_run_is_written_as_json_markdown_and_png(sweep):
    _, result, paths = sweep
    with open(paths["json"], encoding="utf-8") as f:
        saved = json.load(f)
    assert saved["cells"] == result["cells"]
    assert saved["machine"]["cpu_count"] >= 1 and saved["machine"]["cpu_model"]
    assert saved["versions"]["torch"] and "mount program rclone" in saved["versions"]
    with open(paths["md"], encoding="utf-8") as f:
        table = f.read()
    assert "| local-disk |" in table and "x local disk e1" in table and "x local disk e2" in table
    assert "## Bytes path" in table and "| raw GET |" in table and "## Random reads" in table
    with open(paths["png"], "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"


def test_checkpoint_cells_save_and_load_every_route_verified_against_local_disk(sweep):
    config, result, paths = sweep
    done = cells(result, "checkpoint")
    routes = {c["route"] for c in done}
    assert {"local-disk", "s3io", "fsspec", "dcp-s3"} <= routes
    assert {f"mountpoint/{b}" for b in ("mount-s3", "rclone", "s3fs")} <= routes
    for row in done:
        assert row["op"] in ("save", "load") and row["mb_per_s"] > 0 and row["size_mb"] > 0
        assert row["verified"] is True and row["ratio_to_local_disk"] is not None
    assert not [c["status"] for c in cells(result, "checkpoint", status=None) if c["status"] != "ok"]
    with open(paths["md"], encoding="utf-8") as f:
        assert "## Checkpoints: save and load per route" in f.read()


def test_bench_suite_checkpoint_runs_only_the_checkpoint_cells():
    args = build_parser().parse_args(["bench", "s3://bucket/p/", "--suite", "checkpoint", "--quick"])
    config = preset("quick", uri=args.uri, suite=args.suite)
    assert config.suite == "checkpoint" and config.checkpoint_mb == 256
    with pytest.raises(InvalidSpec):
        preset("quick", uri="s3://bucket/p/", suite="everything")


def test_bench_command_accepts_quick_and_gpu():
    args = build_parser().parse_args(["bench", "s3://bucket/p/", "--quick", "--accelerator", "gpu", "--num-workers", "1,4"])
    config = preset("quick", uri=args.uri, accelerator=args.accelerator, num_workers=args.num_workers)
    assert config.quick and config.accelerator == "gpu" and config.num_workers == (1, 4)
    assert config.train_precision == "16-mixed"


def test_bench_command_accepts_bytes_only_reader_counts_and_decode():
    args = build_parser().parse_args(["bench", "--bytes-only", "--bytes-readers", "1,2", "--decode", "cpu"])
    assert args.bytes_only and args.bytes_readers == (1, 2) and args.decode == "cpu"
    config = preset("quick", uri="s3://bucket/p/", loader_cells=False, train=False, bytes_readers=args.bytes_readers)
    assert config.bytes_cells and not config.loader_cells and not config.train and config.bytes_readers == (1, 2)
    with pytest.raises(InvalidSpec, match="reader counts"):
        preset("quick", uri="s3://bucket/p/", bytes_readers=(0,))


def test_bench_and_demo_need_no_uri():
    """Without one they use the embedded local S3 (tests/test_local_s3_files.py checks that part)."""
    assert build_parser().parse_args(["bench", "--quick"]).uri is None
    assert build_parser().parse_args(["demo"]).uri is None


def test_a_bad_sweep_fails_before_anything_runs():
    with pytest.raises(InvalidSpec, match="accelerator"):
        preset("quick", uri="s3://bucket/p/", accelerator="tpu")
    with pytest.raises(InvalidSpec, match="shard size"):
        preset("quick", uri="s3://bucket/p/", shard_sizes=("lots",))


def test_map_cells_read_both_layouts_per_route_beside_local_disk(sweep):
    config, result, paths = sweep
    maps = cells(result, "map", status=None)
    assert maps and all(c["status"] == "ok" for c in maps), [c["status"] for c in maps if c["status"] != "ok"]
    assert {c["layout"] for c in maps} == {"files", "shards-random"}
    assert {c["source"] for c in maps} == {LOCAL, *(label for label, _, _ in source_plan(config))}
    assert {c["readahead_threads"] for c in maps} == {0, 16}
    assert all(c["samples_per_s"] > 0 and c["ratio_to_local_disk"] for c in maps)
    assert all(c["ratio_to_sequential"] for c in maps if c["layout"] == "shards-random")
    with open(paths["md"], encoding="utf-8") as f:
        assert "## Map-style" in f.read()


def test_every_cell_of_both_stores_records_its_store_and_the_far_one_went_through_the_proxy(sweep):
    config, result, _ = sweep
    measured = [c for c in result["cells"] if c["cell"] != "gpu"]
    assert {c.get("store") for c in measured} == set(STORES)
    assert len(measured) == result["cells_planned"]  # what the progress bar and the first line counted
    for kind in ("raw-get", "first-sample", "loader"):
        assert {c["store"] for c in cells(result, kind)} == set(STORES), kind
    for kind in ("bytes", "random", "map", "train", "checkpoint"):
        assert {c["store"] for c in cells(result, kind)} == set(full_stores(config)), kind
    local, far = result["stores"]["local"], result["stores"]["far"]
    assert far["endpoint"] != local["endpoint"] == result["endpoint"] and far["latency_ms"] == 5.0
    assert far["rate_mb_s"] > 0


def test_the_far_proxy_is_stopped_and_leaves_nothing_behind(sweep):
    _, result, _ = sweep
    proxy = urllib.parse.urlsplit(result["stores"]["far"]["endpoint"])
    with pytest.raises(OSError), socket.create_connection((proxy.hostname, proxy.port), timeout=2):
        pass
    assert result["test_children_left"] == []


def test_every_mount_cell_reports_the_mount_programs_peak_rss(sweep):
    _, result, _ = sweep
    mounted = [c for c in result["cells"] if c["status"] == "ok" and (
        c.get("kind") == "mountpoint" or str(c.get("route", "")).startswith(("mountpoint/", "dcp-mount/")))]
    assert {c["cell"] for c in mounted} >= {"first-sample", "loader", "bytes", "random", "map", "train", "checkpoint"}
    assert all(c["program_peak_rss_mb"] > 0 for c in mounted), [c for c in mounted if not c["program_peak_rss_mb"]]


def test_the_report_puts_both_stores_side_by_side(sweep):
    _, _, paths = sweep
    with open(paths["md"], encoding="utf-8") as f:
        report = f.read()
    section = report.split("## Stores side by side", 1)[1].split("\n## ", 1)[0]
    assert "| local e1 | local e2 | x local e1 | x local e2 | far e1 | far e2 | x far e1 | x far e2 |" in section
    assert "| bytes, 2 readers | mountpoint/rclone (no-cache) | MB/s | raw GET |" in section
    assert "far = a far-store proxy before the same endpoint, 5.0 ms per request" in report
    assert "MB/s per connection (its loader cells only)" in report  # the tiny preset's far_cells="loader"


def test_loader_and_training_figures_lead_with_the_whole_epoch(sweep):
    """Time to the first batch, then the rate over the whole epoch; the rate after warm-up after them."""
    _, result, paths = sweep
    for cell in cells(result, "loader") + cells(result, "train"):
        assert cell["first_batch_s"] > 0 and cell["epoch_samples_per_s"] > 0 and cell["samples_per_s"] > 0, cell
    for cell in cells(result, "bytes"):
        assert cell["startup_s"] >= 0, cell  # the readers' start, outside the bytes cell's clock
    with open(paths["md"], encoding="utf-8") as f:
        report = f.read()
    section = report.split("## Stores side by side", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| loader + decode, 1 worker")
            and "| local-disk |" in line]
    assert [row.split(" | ")[0] for row in rows] == [
        "| loader + decode, 1 worker: time to first batch", "| loader + decode, 1 worker: whole epoch",
        "| loader + decode, 1 worker: after warm-up"]
    for title in ("## Loader", "## Training"):
        header = report.split(title, 1)[1].splitlines()[2]
        assert header.index("first batch e1 s") < header.index("s e1 |") < header.index("after warm-up"), header


def _new_processes_but_proxy_workers(before: set[int]) -> list[str]:
    """Command lines of this process's descendants not in ``before``, leaving out workers of a proxy in ``before``."""
    found = []
    for child in psutil.Process().children(recursive=True):
        with contextlib.suppress(psutil.Error):
            if child.pid in before or child.status() == psutil.STATUS_ZOMBIE:
                continue
            line = " ".join(child.cmdline())
            if not (line.startswith("nginx: worker") and child.ppid() in before):
                found.append(line)
    return found


def test_a_bench_against_the_embedded_far_profile_takes_its_proxy_as_the_far_store(local_s3):
    """`MOUNTCTL_STORE=far benchmarks/bench.sh`: the local store is the server behind the proxy, not a proxy of a proxy."""
    direct = local_s3.settings()
    status = local_s3.start_far(FarProfile(latency_ms=7.0, rate_mb_s=40.0))
    try:
        far = local_s3.settings()
        assert far.endpoint_url == status.endpoint_url != direct.endpoint_url
        plan = plan_stores("both", far)
        assert plan.stores == STORES and plan.origin.endpoint_url == direct.endpoint_url
        assert plan.running_far == far.endpoint_url and plan.profile == FarProfile(latency_ms=7.0, rate_mb_s=40.0)
        before = {p.pid for p in psutil.Process().children(recursive=True)}
        with plan.settings("far", "/nonexistent/unused") as through:
            assert through.endpoint_url == far.endpoint_url
            # No second proxy.  The running proxy's nginx may still be forking its workers: those are not new.
            assert _new_processes_but_proxy_workers(before) == []
        # Another profile asked for: a proxy of its own before the server itself.
        other = plan_stores("far", far, latency_ms=3.0)
        assert other.running_far is None and other.origin.endpoint_url == direct.endpoint_url
    finally:
        local_s3.stop_far()
