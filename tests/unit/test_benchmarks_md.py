"""BENCHMARKS.md regenerated from the bench's own report files (benchmarks/benchmarks_md.py).

The run directory under tests/unit/data/bench-tiny/ is what a real run wrote:
`MOUNTCTL_HOME=/tmp/bm35/home .venv/bin/python resnet.py bench --preset tiny --no-progress --out /tmp/bm35/tiny`
on 2026-11-26 (both stores, mount-s3, rclone and s3fs installed), its JSON and Markdown as written (its PNG left
out: the generator draws its pictures from the JSON). That run had no `--suite node` or `--suite mlperf` beside
it, and the tiny preset runs no peers, so those sections must read "not run".
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
from pathlib import Path

import pytest

from benchmarks.harness.benchmarks_page import FIGURES, NOT_RUN, PAGES, REGENERATE, write_pages
from mountctl.errors import InvalidSpec

RUN = Path(__file__).parent / "data" / "bench-tiny"
[REPORT_JSON] = sorted(RUN.glob("bench-*.json"))
REPORT_MD = REPORT_JSON.with_suffix(".md")


@pytest.fixture(scope="module")
def result() -> dict:
    return json.loads(REPORT_JSON.read_text())


@pytest.fixture(scope="module")
def root(tmp_path_factory) -> Path:
    """A checkout-shaped folder holding an old report, which the regeneration replaces."""
    where = tmp_path_factory.mktemp("checkout")
    (where / "docs").mkdir()
    (where / "BENCHMARKS.md").write_text("# Benchmarks\n\nOld, typed figures.\n")
    write_pages([str(RUN)], str(where))
    return where


def _section(page: str, title: str) -> str:
    match = re.search(rf"^## {re.escape(title)}\n(.*?)(?=^## |\Z)", page, re.S | re.M)
    assert match, f"no section {title!r}"
    return match.group(1)


def _tables(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith("| ")]


def test_each_suite_measured_gets_a_section_with_its_runs_command_commit_machine_date_and_load(root, result):
    page = (root / "BENCHMARKS.md").read_text()
    machine, run = result["machine"], result["run"]
    for title in ("Loader and training", "Bytes against the limit", "Checkpoints"):
        section = _section(page, title)
        assert f"- Command: `python {shlex.join(run['argv'])}`" in section
        assert f"- Commit: `{run['commit'][:12]}`" in section
        assert f"- Machine: {machine['cpu_count']} x {machine['cpu_model']}, {machine['memory_gb']} GB memory" in section
        assert f"- Date: {result['started']}" in section
        start, end = (" ".join(str(x) for x in machine[key]) for key in ("load_average", "load_average_end"))
        assert f"{start} at start, {end} at end" in section


def test_every_table_row_of_the_sweeps_sections_is_a_row_of_the_benchs_own_report(root):
    page = (root / "BENCHMARKS.md").read_text()
    own = set(_tables(REPORT_MD.read_text()))
    taken = [row for title in ("Loader and training", "Checkpoints")
             for row in _tables(_section(page, title))]
    bytes_section = _section(page, "Bytes against the limit")
    taken += _tables(bytes_section.split("### Bytes path", 1)[1])
    assert len(taken) > 40
    assert [row for row in taken if row not in own] == []


def test_the_limit_table_shows_each_bytes_cell_beside_the_limit_of_its_own_store(root, result):
    """The one table the bench does not print itself: every figure in it is a field of the run's JSON."""
    section = _section((root / "BENCHMARKS.md").read_text(), "Bytes against the limit")
    rows = _tables(section.split("### MB/s against", 1)[1].split("###", 1)[0])[2:]  # after header and rule
    cells = [c for c in result["cells"] if c["cell"] == "bytes" and c["epoch"] == 1]
    limits = {c["store"]: c["mb_per_s"] for c in result["cells"] if c["cell"] == "raw-get"}
    assert len(rows) == len(cells)
    for row, cell in zip(rows, cells, strict=True):
        store, _, readers, dataset, mb_s, limit, ratio = [part.strip() for part in row.strip("|").split("|")]
        assert (store, int(readers), dataset) == (cell["store"], cell["readers"], cell["dataset"])
        assert mb_s == (f"{cell['mb_per_s']:,.1f}" if cell["status"] == "ok" else cell["status"])
        assert limit == f"{limits[cell['store']]:,.1f}"
        assert ratio == ("-" if cell.get("ratio_to_raw_get") is None else f"{cell['ratio_to_raw_get']:,.3f}")


def test_a_suite_with_no_run_reads_not_run_and_shows_no_figures(root):
    page = (root / "BENCHMARKS.md").read_text()
    for title in ("64 readers on one mount", "DLIO (MLPerf Storage)", "Peers: LitData and MosaicML Streaming"):
        assert _section(page, title).strip() == NOT_RUN
    assert sorted(os.listdir(root / FIGURES)) == ["bytes.png", "checkpoints.png", "loader-training.png"]


def test_the_page_and_its_site_copy_link_the_pictures_drawn_for_them(root):
    """The site reads BENCHMARKS.md at build time (benchmarks/docs_page.py): its links must land from docs/ too."""
    from benchmarks.docs_page import site_text

    page = root / "BENCHMARKS.md"
    assert PAGES == ("BENCHMARKS.md",) and not (root / "docs" / "benchmark-figures.md").exists()
    for text, where in ((page.read_text(), root), (site_text(page.read_text()), root / "docs")):
        links = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", text)
        assert len(links) == 3
        assert all((where / link).resolve().is_file() for link in links)


def test_the_regenerate_commands_pass_the_commands_own_dry_run():
    from resnet import configure

    for line in REGENERATE:
        words = shlex.split(line)
        if "resnet.py" in words:
            configure(words[words.index("resnet.py") + 1:])
        else:
            assert (Path(__file__).parents[2] / words[1]).is_file()


def test_a_folder_without_a_bench_report_is_refused_naming_it(tmp_path):
    (tmp_path / "notes.txt").write_text("no report here")
    with pytest.raises(InvalidSpec, match=f"{tmp_path} holds no bench report"):
        write_pages([str(tmp_path)], str(tmp_path / "out"))


def test_a_suite_no_longer_given_takes_its_old_picture_away(tmp_path):
    root = tmp_path / "checkout"
    write_pages([str(RUN)], str(root))
    only_loader = tmp_path / "run"
    only_loader.mkdir()
    kept = json.loads(REPORT_JSON.read_text())
    kept["cells"] = [c for c in kept["cells"] if c["cell"] not in ("bytes", "random", "checkpoint")]
    (only_loader / REPORT_JSON.name).write_text(json.dumps(kept))
    shutil.copy(REPORT_MD, only_loader)
    write_pages([str(only_loader)], str(root))
    assert sorted(os.listdir(root / FIGURES)) == ["loader-training.png"]
    page = (root / "BENCHMARKS.md").read_text()
    assert _section(page, "Checkpoints").strip() == NOT_RUN
    assert _section(page, "Bytes against the limit").strip() == NOT_RUN


def test_with_keep_a_suite_not_given_keeps_its_old_section_and_picture_and_the_rest_is_regenerated(tmp_path):
    root = tmp_path / "checkout"
    write_pages([str(RUN)], str(root))
    before = (root / "BENCHMARKS.md").read_text()
    only_loader = tmp_path / "run"
    only_loader.mkdir()
    rerun = json.loads(REPORT_JSON.read_text())
    rerun["cells"] = [c for c in rerun["cells"] if c["cell"] not in ("bytes", "random", "checkpoint")]
    rerun["run"] = {**rerun["run"], "commit": "0123456789abcdef"}
    (only_loader / REPORT_JSON.name).write_text(json.dumps(rerun))
    shutil.copy(REPORT_MD, only_loader)
    write_pages([str(only_loader)], str(root), keep=True)
    page = (root / "BENCHMARKS.md").read_text()
    for title in ("Checkpoints", "Bytes against the limit"):
        assert _section(page, title) == _section(before, title)  # its own run's facts and figures, unchanged
    assert "0123456789ab" in _section(page, "Loader and training")
    assert "0123456789ab" not in _section(page, "Checkpoints")
    assert _section(page, "64 readers on one mount").strip() == NOT_RUN  # never run: nothing to keep
    assert sorted(os.listdir(root / FIGURES)) == ["bytes.png", "checkpoints.png", "loader-training.png"]
    links = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", page)
    assert len(links) == 3 and all((root / link).resolve().is_file() for link in links)


def _copy_of_run(result: dict, started: str, scale: float, dirty: bool = False) -> dict:
    """The real run again, as if repeated: a later start and every measured float multiplied by ``scale``."""
    again = json.loads(json.dumps(result))
    again["started"] = started
    again["run"] = {**again["run"], "dirty": dirty}
    for cell in again["cells"]:
        for name, value in cell.items():
            if isinstance(value, float):
                cell[name] = value * scale
    return again


def test_three_runs_of_one_command_at_one_commit_give_each_figure_as_their_median(tmp_path, result):
    from benchmarks.harness.benchmarks_page import Run, median_run

    runs = [Run("sweep", "a.json", _copy_of_run(result, result["started"], 1.0)),
            Run("sweep", "b.json", _copy_of_run(result, "2099-01-01T00:00:00+00:00", 3.0, dirty=True)),
            Run("sweep", "c.json", _copy_of_run(result, "2099-01-02T00:00:00+00:00", 0.5))]
    merged = median_run(runs, runs[2])
    assert merged is not None and merged.path == "c.json" and len(merged.result["median_of"]) == 3
    for original, cell in zip(result["cells"], merged.result["cells"], strict=True):
        for name, value in original.items():
            if isinstance(value, float):  # the median of x, 3x and x/2 is x
                assert cell[name] == pytest.approx(value, abs=1e-3), (cell["cell"], name)
    # A run at another commit, or of another command, is not pooled.
    other = _copy_of_run(result, "2099-01-03T00:00:00+00:00", 7.0)
    other["run"] = {**other["run"], "commit": "0" * 40}
    alone = median_run([*runs, Run("sweep", "d.json", other)], Run("sweep", "d.json", other))
    assert alone is not None and "median_of" not in alone.result
    # The page says so, in the run's facts.
    for index, run in enumerate(runs):
        (tmp_path / "runs").mkdir(exist_ok=True)
        (tmp_path / "runs" / f"bench-{index}.json").write_text(json.dumps(run.result))
    (tmp_path / "docs").mkdir()
    write_pages([str(tmp_path / "runs")], str(tmp_path))
    section = _section((tmp_path / "BENCHMARKS.md").read_text(), "Loader and training")
    assert "each figure is the median of 3 runs of this command at this commit" in section
    assert "(1 of the 3 runs with uncommitted changes)" in section


def test_the_64_reader_section_shows_the_newest_node_run_of_each_object_size(tmp_path):
    """tests/unit/data/node-16 and node-64: the node-scale.json that `resnet.py bench --suite node --store far`
    wrote on 2026-11-26, without and with `--node-object-mb 64`."""
    (tmp_path / "docs").mkdir()
    data = Path(__file__).parent / "data"
    write_pages([str(RUN), str(data / "node-64"), str(data / "node-16")], str(tmp_path))
    page = (tmp_path / "BENCHMARKS.md").read_text()
    section = _section(page, "64 readers on one mount")
    assert section.index("64 x 16 MiB objects") < section.index("64 x 64 MiB objects")
    limits = _section(page, "Bytes against the limit")
    for size in (16, 64):
        result = json.loads((data / f"node-{size}" / "node-scale.json").read_text())
        for cell in result["cells"]:
            row = f"| {cell['store']} | mountpoint/{cell['program']}"
            assert any(line.startswith(row) and f"64 x {size} MiB objects" in line for line in _tables(limits)), row


def test_a_run_stopped_by_a_signal_never_stands_for_its_suite(result, tmp_path):
    """An interrupted run's report holds only the cells it measured (issue 40, section 3): newer or not, the page
    is made from the complete run beside it."""
    run = tmp_path / "runs"
    shutil.copytree(RUN, run)
    partial = {**result, "started": "2099-01-01T00:00:00+00:00", "cells": result["cells"][:2], "interrupted": True}
    (run / "bench-2099-01-01T000000Z.json").write_text(json.dumps(partial))
    for checkout in ("alone", "beside"):
        (tmp_path / checkout / "docs").mkdir(parents=True)
    write_pages([str(RUN)], str(tmp_path / "alone"))
    write_pages([str(run)], str(tmp_path / "beside"))
    assert (tmp_path / "beside" / "BENCHMARKS.md").read_text() == (tmp_path / "alone" / "BENCHMARKS.md").read_text()
