"""The standard-loader cell's rows: in --quick, its ratios to local disk, its table in the report and BENCHMARKS.md.

The rows are shaped as ``standard_cells`` records them (one per route, sampler and epoch); the figures are made
up, since only their arrangement is under test here. The cell itself runs end to end in the lead's bench run,
and its tree writer in tests/test_readahead_sampler_mount.py.
"""

from __future__ import annotations

from bench_pages import page_part, stored_run

from benchmarks.harness import preset
from benchmarks.harness.report import sections, table
from benchmarks.harness.standard_cells import (
    SAMPLERS,
    add_standard_ratios,
    standard_cell_count,
    standard_markdown,
    tree_label,
)

SOURCES = ("local-disk", "mountpoint/mount-s3", "mountpoint/rclone")
TREE = tree_label(400)


def _rows(store: str = "far") -> list[dict]:
    rows = []
    for s, source in enumerate(SOURCES):
        for k, sampler in enumerate(SAMPLERS):
            for epoch in (1, 2):
                rows.append({"cell": "standard", "source": source, "backend": source.split("/")[-1],
                             "sampler": sampler, "dataset": TREE, "images": 400, "num_workers": 2, "epoch": epoch,
                             "store": store, "status": "ok", "first_batch_s": 0.5 + s,
                             "epoch_samples_per_s": 800.0 / (1 + s) + 100.0 * k + epoch,
                             **({"from_mount_s": 3.0 + s} if epoch == 1 else {}), "program_peak_rss_mb": 50.0})
    return rows


def test_quick_runs_the_standard_cell_and_the_tests_tiny_preset_leaves_it_to_its_own_test():
    assert preset("quick", uri="s3://bucket/p/").standard_cells
    assert preset("full", uri="s3://bucket/p/").standard_cells
    assert not preset("tiny", uri="s3://bucket/p/").standard_cells


def test_it_counts_every_route_sampler_and_epoch():
    config = preset("quick", uri="s3://bucket/p/", backends=("mount-s3", "rclone", "s3fs"))
    assert standard_cell_count(config) == 4 * 2 * 2


def test_each_row_is_against_local_disk_without_the_sampler_in_its_own_store_and_epoch():
    rows = _rows("far") + _rows("local")
    rows[0 + 4]["status"] = "failed: the mount did not start"  # mount-s3, no sampler, epoch 1
    add_standard_ratios(rows)
    by = {(r["store"], r["source"], r["sampler"], r["epoch"]): r for r in rows}
    plain = by[("far", "local-disk", "none", 2)]["epoch_samples_per_s"]
    assert plain == 802.0 and by[("far", "local-disk", "none", 2)]["ratio_to_local_disk"] == 1.0
    assert by[("far", "mountpoint/rclone", "read-ahead", 2)]["ratio_to_local_disk"] == round(
        by[("far", "mountpoint/rclone", "read-ahead", 2)]["epoch_samples_per_s"] / plain, 3)
    assert "ratio_to_local_disk" not in by[("far", "mountpoint/mount-s3", "none", 1)]  # failed: no figure


def test_the_table_puts_both_epochs_of_each_route_and_sampler_on_one_row():
    rows = _rows()
    add_standard_ratios(rows)
    rows[4]["status"] = "failed: the mount did not start"
    text = standard_markdown(rows, table)
    lines = [line for line in text.splitlines() if line.startswith("| ")]
    assert lines[0].startswith("| store | tree | source | sampler | first batch e1 s | first batch e2 s | images/s e1")
    assert len(lines) == 2 + len(SOURCES) * len(SAMPLERS)
    assert "| far | " + TREE + " | mountpoint/rclone | read-ahead | 2.500 | 2.500 | 367.7 | 368.7 | 0.459 | 0.460 |" \
        in text
    failed = "failed: the mount did not start"
    assert f"| mountpoint/mount-s3 | none | {failed} | 1.500 | {failed} | 402.0 | {failed} | 0.501 |" in text
    assert standard_markdown([], table) == ""


def test_the_report_and_benchmarks_md_show_the_standard_section(tmp_path):
    part = page_part(tmp_path, _rows(), add_standard_ratios, "standard", "Loader and training")
    assert "### Standard loader: torchvision ImageFolder" in part
    assert sections(stored_run()[1]).get("standard") is None  # a run without the cell: no section
