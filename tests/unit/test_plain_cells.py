"""The plain-reader cell's rows: its count, its ratios to the limits of the same run, its table in the report and
in BENCHMARKS.md.

The rows are shaped as ``plain_cells`` records them (one per route, way, reader count and pass); the figures are
made up, since only their arrangement is under test here. The cell itself runs end to end on real mounts in
tests/test_bench.py's sweep.
"""

from __future__ import annotations

from bench_pages import page_part, stored_run

from benchmarks.harness import preset
from benchmarks.harness.plain_cells import MODES, READERS, add_plain_ratios, plain_cell_count, plain_markdown
from benchmarks.harness.report import sections

DATASET = "img32-1MB-n64"


def _rows(store: str = "far") -> list[dict]:
    rows: list[dict] = [{"cell": "raw-get", "dataset": DATASET, "store": store, "status": "ok", "mb_per_s": 200.0}]
    routes = [("local-disk", "by name")] + [(f"mountpoint/{p}", m) for p in ("mount-s3", "rclone") for m in MODES]
    for readers in READERS:
        for n, (source, mode) in enumerate(routes):
            for epoch in (1, 2):
                rows.append({"cell": "plain", "source": source, "mode": mode, "readers": readers, "epoch": epoch,
                             "dataset": DATASET, "store": store, "status": "ok",
                             "mb_per_s": 1000.0 if n == 0 else 100.0 * n + 10 * epoch + readers,
                             "program_peak_rss_mb": None if n == 0 else 40.0 + epoch})
    return rows


def test_quick_runs_it_with_the_bytes_cells_and_counts_every_route_way_reader_count_and_pass():
    config = preset("quick", uri="s3://bucket/p/", backends=("mount-s3", "rclone", "s3fs"))
    assert config.bytes_cells
    assert plain_cell_count(config, None) == (1 + 3 * 2) * 2 * 2  # type: ignore[arg-type]


def test_pass_1_is_against_the_ranged_get_limit_and_pass_2_against_local_disks_second_pass():
    rows = _rows("far") + _rows("local")
    rows[5]["status"] = "failed: the mount did not start"
    add_plain_ratios(rows)
    by = {(r["store"], r["source"], r["mode"], r["readers"], r["epoch"]): r for r in rows if r["cell"] == "plain"}
    first = by[("far", "mountpoint/mount-s3", "listed", 4, 1)]
    assert first["ratio_to_raw_get"] == round(first["mb_per_s"] / 200.0, 3)
    second = by[("far", "mountpoint/rclone", "by name", 1, 2)]
    assert second["ratio_to_local_disk"] == round(second["mb_per_s"] / 1000.0, 3)
    assert by[("far", "local-disk", "by name", 1, 2)]["ratio_to_local_disk"] == 1.0
    assert "ratio_to_raw_get" not in rows[5]  # failed: no figure


def test_the_table_puts_both_passes_of_each_route_way_and_reader_count_on_one_row():
    rows = _rows()
    add_plain_ratios(rows)
    text = plain_markdown(rows)
    lines = [line for line in text.splitlines() if line.startswith("| ")]
    assert lines[0].startswith("| store | dataset | source | files opened | readers | MB/s pass 1 | x ranged-GET")
    assert len(lines) == 2 + 5 * len(READERS)
    assert f"| far | {DATASET} | mountpoint/mount-s3 | by name | 4 | 214.0 | 1.070 | 224.0 | 0.224 | 42.0 |" in text
    assert plain_markdown([]) == ""


def test_the_report_and_benchmarks_md_show_it_under_bytes_against_the_limit(tmp_path):
    plain = [row for row in _rows() if row["cell"] == "plain"]
    part = page_part(tmp_path, plain, add_plain_ratios, "plain", "Bytes against the limit")
    assert "### A plain reader: cat of every shard" in part
    assert sections(stored_run()[1]).get("plain") is None  # a run without the cell: no section
