"""Which stores a benchmark run measures, and how the report sets them side by side (pure logic)."""

from __future__ import annotations

import pytest

from benchmarks.harness.config import preset
from benchmarks.harness.side_by_side import side_by_side
from benchmarks.harness.stores import is_loopback_endpoint, plan_stores, stores_for
from mountctl import InvalidSpec, S3Settings


def settings(endpoint: str | None) -> S3Settings:
    return S3Settings(endpoint_url=endpoint, region="us-east-1")


@pytest.mark.parametrize("endpoint", ["http://127.0.0.1:8333", "http://localhost:9000", "http://[::1]:8333"])
def test_a_store_on_this_machine_is_measured_local_far_or_both(endpoint):
    assert is_loopback_endpoint(settings(endpoint))
    assert stores_for("both", settings(endpoint)) == ("local", "far")
    assert stores_for("far", settings(endpoint)) == ("far",)
    assert stores_for("local", settings(endpoint)) == ("local",)


@pytest.mark.parametrize("endpoint", [None, "https://s3.eu-west-1.amazonaws.com", "http://10.0.0.5:9000",
                                      "https://minio.example.com"])
def test_a_real_store_is_remote_whatever_store_was_asked_for(endpoint):
    assert not is_loopback_endpoint(settings(endpoint))
    for choice in ("local", "far", "both"):
        assert stores_for(choice, settings(endpoint)) == ("remote",)


def test_a_bad_store_or_far_profile_fails_before_anything_runs():
    with pytest.raises(InvalidSpec, match="--store"):
        stores_for("near", settings("http://127.0.0.1:1"))
    with pytest.raises(InvalidSpec, match="--store"):
        preset("quick", uri="s3://bucket/p/", store="near")
    with pytest.raises(InvalidSpec, match="far profile"):
        preset("quick", uri="s3://bucket/p/", far_rate_mb_s=-5.0)
    with pytest.raises(InvalidSpec, match="far profile"):
        preset("quick", uri="s3://bucket/p/", far_latency_ms=-1.0)
    assert preset("quick", uri="s3://bucket/p/").store == "far"  # the quick look: the store shaped like S3
    assert preset("quick", uri="s3://bucket/p/", store="both").store == "both"
    assert preset("full", uri="s3://bucket/p/").store == "both"


def test_bench_quick_on_the_command_line_reads_the_far_store_unless_told_both():
    from resnet import build_parser

    def store(*argv: str) -> str:
        args = build_parser().parse_args(["bench", *argv])
        return preset("quick" if args.quick else "full", uri="s3://bucket/p/", store=args.store).store

    assert (store("--quick"), store("--quick", "--store", "both"), store()) == ("far", "both", "both")


def test_quick_leaves_out_map_style_and_checkpoint_cells_but_suite_checkpoint_still_runs_them():
    quick, full = preset("quick", uri="s3://bucket/p/"), preset("full", uri="s3://bucket/p/")
    assert not (quick.map_cells or quick.runs_checkpoints)
    assert full.map_cells and full.runs_checkpoints
    assert preset("quick", uri="s3://bucket/p/", suite="checkpoint").runs_checkpoints


def bytes_cell(store: str, epoch: int, mb: float, ratio: float, source: str = "mountpoint/rclone") -> dict:
    return {"cell": "bytes", "store": store, "epoch": epoch, "readers": 4, "source": source, "variant": "default",
            "status": "ok", "mb_per_s": mb, "ratio_to_raw_get": ratio}


def test_side_by_side_puts_each_store_in_its_own_columns_with_its_own_ratios():
    cells = [bytes_cell("local", 1, 400.0, 0.5), bytes_cell("local", 2, 800.0, 1.0),
             bytes_cell("far", 1, 100.0, 0.25), bytes_cell("far", 2, 200.0, 0.5),
             {"cell": "random", "store": "far", "source": "s3io", "variant": "-", "status": "failed: boom"},
             {"cell": "gpu", "status": "not run"}]
    header, rows = side_by_side(cells, ["local", "far"])
    assert header == ["measurement", "route", "unit", "x limit", "local e1", "local e2", "x local e1", "x local e2",
                      "far e1", "far e2", "x far e1", "x far e2"]
    assert rows[0] == ["bytes, 4 readers", "mountpoint/rclone", "MB/s", "raw GET",
                       400.0, 800.0, 0.5, 1.0, 100.0, 200.0, 0.25, 0.5]
    # A store that did not measure a row leaves its columns empty; a failed cell says so.
    assert rows[1] == ["random 64 KiB reads", "s3io", "MB/s", "s3io range",
                       None, None, None, None, "failed", None, "failed", None]
    assert len(rows) == 2


def test_a_plan_reads_far_through_a_proxy_of_its_own_when_none_runs(tmp_path, monkeypatch):
    monkeypatch.setenv("MOUNTCTL_HOME", str(tmp_path))  # no embedded server (nor its far proxy) runs here
    plan = plan_stores("both", settings("http://127.0.0.1:8333"), latency_ms=30.0)
    assert plan.stores == ("local", "far") and plan.origin == settings("http://127.0.0.1:8333")
    assert plan.profile.latency_ms == 30.0 and plan.running_far is None
    remote = plan_stores("far", settings(None))
    assert remote.stores == ("remote",) and remote.origin == settings(None)



def test_the_far_store_runs_every_cell_unless_far_cells_says_loader_and_the_local_store_runs_too():
    from benchmarks.harness.loader_cells import source_plan
    from benchmarks.harness.sweep import _cell_total, _store_config

    quick = preset("quick", uri="s3://bench/p/", backends=("rclone", "s3fs"))
    tiny = preset("tiny", uri="s3://bench/p/", backends=("rclone", "s3fs"))
    assert quick.far_cells == "all" and tiny.far_cells == "loader"
    assert _store_config(quick, "far", 2) is quick and _store_config(tiny, "local", 2) is tiny
    assert _store_config(tiny, "far", 1) is tiny  # a far store measured alone runs everything
    far = _store_config(tiny, "far", 2)
    assert far.loader_cells and not (far.bytes_cells or far.map_cells or far.train or far.runs_checkpoints)
    # Its progress-bar rows: the raw GET, then per source (local disk, s3io, fsspec, two mount programs) the
    # first sample and both loader epochs at each worker count.
    assert len(source_plan(far)) == 4
    assert _cell_total(far, 1, False, False) == 1 + 5 * (1 + len(far.num_workers) * 2)
    assert _cell_total(tiny, 1, True, False) > _cell_total(far, 1, False, False)
    with pytest.raises(InvalidSpec, match="far_cells"):
        preset("tiny", uri="s3://bench/p/", far_cells="some")
