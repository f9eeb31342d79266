"""A BENCHMARKS.md made from the tests' stored tiny bench run with extra rows added: for the tests of a cell kind's
section on the page (tests/unit/test_standard_cells.py, test_plain_cells.py)."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks.harness.benchmarks_page import write_pages
from benchmarks.harness.report import sections

RUN = Path(__file__).parent / "data" / "bench-tiny"


def stored_run() -> tuple[str, dict[str, Any]]:
    """The stored run's file name and its result."""
    [report] = sorted(RUN.glob("bench-*.json"))
    return report.name, json.loads(report.read_text())


def page_part(tmp_path: Path, rows: list[dict[str, Any]], ratios: Callable[[list[dict[str, Any]]], None],
              kind: str, part: str) -> str:
    """The text under ``## part`` of the BENCHMARKS.md written from the stored run plus ``rows`` (their ratios
    filled in by ``ratios``); the run's report must have the ``kind`` section."""
    name, result = stored_run()
    result["cells"] = result["cells"] + rows
    ratios(result["cells"])
    assert kind in sections(result)
    runs = tmp_path / "runs"
    runs.mkdir()
    (runs / name).write_text(json.dumps(result))
    (tmp_path / "docs").mkdir()
    write_pages([str(runs)], str(tmp_path))
    page = (tmp_path / "BENCHMARKS.md").read_text()
    found = re.search(rf"^## {re.escape(part)}\n(.*?)(?=^## )", page, re.S | re.M)
    assert found, f"BENCHMARKS.md has no section {part!r}"
    return found.group(1)
