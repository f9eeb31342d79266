"""BENCHMARKS.md from the bench's own report files: one section per suite, the current figures and nothing older.

Each section takes the newest run (of those given) that measured it, and says that run's command, commit,
machine, date and load average at start and end, as the run recorded them (``facts.py``); its tables come from
``report.py``'s builders over the run's JSON, so no number is typed, and its pictures are drawn by the bench's
own chart code into ``docs/figures/``.  Where several runs of the same command at the same commit are given
(``resnet.py bench`` three times into one ``--out``), each figure is their median (``median_run``).  A suite
with no run given reads "not run in this report".

The page is written once, ``BENCHMARKS.md`` at the top; the documentation site reads that file at build time
(``benchmarks/docs_page.py``, an MkDocs hook) rather than keeping a copy.
"""

from __future__ import annotations

import glob
import json
import os
import re
import shlex
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from benchmarks.harness.kinds import BYTES_PAGE, CHECKPOINT_PAGE, KINDS, LOADER_PAGE, PEER_PAGE
from benchmarks.harness.node_scale import node_table
from benchmarks.harness.report import chart, mlperf_header, mlperf_sections, sections, table
from mountctl import InvalidSpec

__all__ = ["Run", "find_runs", "median_run", "render", "write_pages", "PAGES", "FIGURES", "REGENERATE"]

PAGES = ("BENCHMARKS.md",)
FIGURES = "docs/figures"
NOT_RUN = "Not run in this report."
# What the lead runs, alone on a quiet machine, to regenerate the page (shown at its top; docs test checks them).
REGENERATE = (
    ".venv/bin/python resnet.py bench --quick --out bench-results/all",
    ".venv/bin/python resnet.py bench --suite node --out bench-results/node",
    ".venv/bin/python resnet.py bench --suite node --node-object-mb 64 --out bench-results/node64",
    ".venv/bin/python resnet.py bench --suite mlperf --quick --out bench-results/mlperf",
    ".venv/bin/python resnet.py bench --suite checkpoint --quick --out bench-results/checkpoint",
    ".venv/bin/python benchmarks/benchmarks_md.py bench-results/all bench-results/node bench-results/node64 "
    "bench-results/mlperf bench-results/checkpoint",
)
_REPORT_FILES = {"bench-*.json": "sweep", "mlperf-*.json": "mlperf", "node-scale.json": "node"}


@dataclass(frozen=True)
class Run:
    """One report file the bench wrote: which suite (sweep, mlperf, node), where, and what it holds."""

    kind: str
    path: str
    result: dict[str, Any] = field(repr=False)

    @property
    def started(self) -> str:
        return str(self.result.get("started") or "")

    def has(self, *cells: str) -> bool:
        return any(c.get("cell") in cells for c in self.result.get("cells", []))


def find_runs(dirs: list[str]) -> list[Run]:
    """Every report JSON directly under each of ``dirs`` (``--out`` of a bench run), but a run stopped by a signal
    (``interrupted``: only some of its cells) never stands for its suite."""
    runs = []
    for folder in dirs:
        if not os.path.isdir(folder):
            raise InvalidSpec(f"{folder}: no such directory: give the --out directory of a `resnet.py bench` run")
        found = [(kind, path) for pattern, kind in _REPORT_FILES.items()
                 for path in sorted(glob.glob(os.path.join(folder, pattern)))]
        if not found:
            raise InvalidSpec(f"{folder} holds no bench report (bench-*.json, mlperf-*.json or node-scale.json): "
                              "give the --out directory of a `resnet.py bench` run")
        for kind, path in found:
            with open(path, encoding="utf-8") as f:
                result = json.load(f)
            if not result.get("interrupted"):
                runs.append(Run(kind, path, result))
    return runs


def _newest(runs: list[Run], kind: str, wanted: Callable[[Run], bool]) -> Run | None:
    chosen = [run for run in runs if run.kind == kind and wanted(run)]
    return max(chosen, key=lambda run: run.started) if chosen else None


def _cell_key(cell: dict[str, Any]) -> tuple[tuple[str, Any], ...]:
    """What names a cell: every field that is not a measured float (route, dataset, readers, epoch, store...)."""
    return tuple(sorted((k, v) for k, v in cell.items() if isinstance(v, (str, int)) or v is None))


def _median(values: list[float]) -> float:
    ordered = sorted(values)
    middle = len(ordered) // 2
    return ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2


def median_run(runs: list[Run], newest: Run | None) -> Run | None:
    """``newest`` with each measured figure the median over every sweep run of the same command settings at the
    same commit (``config`` and ``run.commit`` equal); how many of them had uncommitted changes is recorded
    (``median_dirty``) and said on the page.

    A cell is matched by all its fields but the measured floats; a float is the median of the matched cells'
    (a ratio: the median of each run's ratio to the limit of its own run). The result names its runs in
    ``median_of``; one run alone is returned as it is."""
    if newest is None or newest.kind != "sweep":
        return newest
    about = newest.result.get("run") or {}
    alike = [run for run in runs if run.kind == "sweep" and run.result.get("config") == newest.result.get("config")
             and (run.result.get("run") or {}).get("commit") == about.get("commit") and about.get("commit")]
    if len(alike) < 2:
        return newest
    by_key: dict[tuple[tuple[str, Any], ...], list[dict[str, Any]]] = {}
    for run in alike:
        for cell in run.result.get("cells", []):
            by_key.setdefault(_cell_key(cell), []).append(cell)
    cells = []
    for cell in newest.result.get("cells", []):
        matched = by_key.get(_cell_key(cell), [cell])
        merged = dict(cell)
        for name, value in cell.items():
            if isinstance(value, float) and not isinstance(value, bool):
                figures = [m[name] for m in matched if isinstance(m.get(name), (int, float))]
                merged[name] = round(_median(figures), 3) if figures else value
        cells.append(merged)
    result = {**newest.result, "cells": cells,
              "median_of": sorted(str(run.result.get("started") or "") for run in alike),
              "median_dirty": sum(bool((run.result.get("run") or {}).get("dirty")) for run in alike)}
    return Run(newest.kind, newest.path, result)


def _facts(run: Run) -> str:
    """The run's command, commit, machine, date and load, as it recorded them ("not recorded" where it did not)."""
    result, machine = run.result, run.result.get("machine") or {}
    about = result.get("run") or {}
    argv = about.get("argv") or []
    command = (f"`python {shlex.join(argv)}`" if argv[:1] == ["resnet.py"] else f"`{shlex.join(argv)}`"
               ) if argv else "not recorded"
    commit = about.get("commit")
    dirty = (f" ({result['median_dirty']} of the {len(result['median_of'])} runs with uncommitted changes)"
             if result.get("median_dirty") else "") if result.get("median_of") else (
             " with uncommitted changes" if about.get("dirty") else "")
    commit_text = f"`{commit[:12]}`{dirty}" if commit else "not recorded"
    cpu = (f"{machine['cpu_count']} x {machine['cpu_model']}, {machine['memory_gb']} GB memory, "
           f"GPU: {machine.get('gpu') or 'none'}" if "cpu_model" in machine else "not recorded")

    def load(key: str) -> str:
        value = machine.get(key)
        return " ".join(str(x) for x in value) if value else "not recorded"

    seconds = f"; {result['seconds']} s in all" if result.get("seconds") is not None else ""
    lines = [f"- Command: {command}", f"- Commit: {commit_text}", f"- Machine: {cpu}",
             f"- Date: {result.get('started') or 'not recorded'}{seconds}",
             f"- Load average (1, 5, 15 min): {load('load_average')} at start, {load('load_average_end')} at end",
             f"- Report file: `{os.path.basename(run.path)}`"]
    if len(result.get("median_of") or ()) > 1:
        lines[3:6] = [f"- Runs: each figure is the median of {len(result['median_of'])} runs of this command at this "
                      f"commit, started {', '.join(result['median_of'])} (a ratio: the median of each run's ratio "
                      "to its own limit); the newest run's load average (1, 5, 15 min): "
                      f"{load('load_average')} at start, {load('load_average_end')} at end, report file "
                      f"`{os.path.basename(run.path)}`"]
    return "\n".join(lines)


def _demote(markdown: str) -> str:
    """A report's ``## `` sections one level down, under the page's section."""
    return "\n".join("#" + line if line.startswith("## ") else line for line in markdown.split("\n"))


def _node_runs(runs: list[Run]) -> list[Run]:
    """The newest ``--suite node`` run of each object size given (``--node-object-mb``), smallest objects first."""
    newest: dict[int, Run] = {}
    for run in runs:
        if run.kind == "node":
            size = run.result["config"]["object_mb"]
            if size not in newest or run.started > newest[size].started:
                newest[size] = run
    return [newest[size] for size in sorted(newest)]


def _limit_rows(sweep: Run | None, nodes: list[Run]) -> list[list[Any]]:
    """MB/s against the ranged-GET limit of the same run and store: the sweep's bytes cells (epoch 1), then the
    64 readers of ``--suite node``; every figure as the bench recorded it."""
    rows: list[list[Any]] = []
    if sweep is not None:
        cells = sweep.result["cells"]
        limits = {(c.get("store"), c["dataset"]): c.get("mb_per_s") for c in cells
                  if c["cell"] == "raw-get" and c["status"] == "ok"}
        for c in cells:
            if c["cell"] == "bytes" and c.get("epoch", 1) == 1:
                route = f"{c['source']} ({c['variant']})" if c.get("variant") not in (None, "-") else c["source"]
                rows.append([c.get("store"), route, c["readers"], c["dataset"],
                             c.get("mb_per_s") if c["status"] == "ok" else c["status"],
                             limits.get((c.get("store"), c["dataset"])), c.get("ratio_to_raw_get")])
    for node in nodes:
        config = node.result["config"]
        for c in node.result["cells"]:
            program = c["program"] if c["program"] == c["resolved"] else f"{c['program']} ({c['resolved']})"
            rows.append([c["store"], f"mountpoint/{program}", c["readers"],
                         f"{config['objects']} x {config['object_mb']} MiB objects", c["aggregate_mb_s"],
                         c["limit_mb_s"], c["ratio_to_limit"]])
    return rows


@dataclass
class _Page:
    """The sections as they are built: text, and the figures to write (name -> how to draw or copy it)."""

    runs: list[Run]
    parts: list[str] = field(default_factory=list)
    figures: dict[str, Callable[[str], bool]] = field(default_factory=dict)
    kept: dict[str, str] = field(default_factory=dict)  # title -> the old page's section, for suites not given
    kept_figures: set[str] = field(default_factory=set)

    def section(self, title: str, run: Run | None, body: Callable[[Run], list[str]]) -> None:
        if run is None and title in self.kept:
            # A suite not rerun keeps its old section whole: its own command, commit, machine and date travel
            # with it, so no figure of it is presented as this run's.
            self.parts.append(self.kept[title])
            self.kept_figures.update(re.findall(r"\]\(FIGURES/([^)]+)\)", self.kept[title]))
            return
        self.parts.append(f"## {title}\n\n" + ("\n\n".join([_facts(run), *body(run)]) if run else NOT_RUN))

    def figure(self, name: str, draw: Callable[[str], bool], alt: str) -> str:
        self.figures[name] = draw
        return f"![{alt}](FIGURES/{name})"


def kept_sections(text: str, figures_link: str) -> dict[str, str]:
    """The ``## `` sections of an old page that ran (not "not run"), by title, its picture links made
    ``FIGURES/``-relative again so that they are rewritten like the new ones."""
    found = {}
    for part in re.split(r"(?m)^(?=## )", text):
        if part.startswith("## ") and NOT_RUN not in part:
            title = part.splitlines()[0][3:].strip()
            found[title] = part.rstrip("\n").replace(f"]({figures_link}/", "](FIGURES/")
    return found


def _build(runs: list[Run], kept: dict[str, str] | None = None) -> _Page:
    page = _Page(runs, kept=kept or {})
    loader = median_run(runs, _newest(runs, "sweep", lambda r: r.has("loader", "train", "ceiling")))
    moved = median_run(runs, _newest(runs, "sweep", lambda r: r.has("bytes")))
    nodes = _node_runs(runs)
    mlperf = _newest(runs, "mlperf", lambda r: True)
    saved = median_run(runs, _newest(runs, "sweep", lambda r: r.has("checkpoint")))
    peers = median_run(runs, _newest(runs, "sweep", lambda r: "peers" in sections(r.result)))

    def tables(run: Run, page_name: str) -> list[str]:
        """The run's tables that ``kinds.KINDS`` puts under this section of the page, in the report's order."""
        found = sections(run.result)
        return [_demote(found[kind.name]) for kind in KINDS if kind.page == page_name and kind.name in found]

    def sweep_chart(run: Run, panels: tuple[str, ...]) -> Callable[[str], bool]:
        return lambda path: chart(run.result, path, panels)

    page.section(LOADER_PAGE, loader, lambda run: [
        page.figure("loader-training.png", sweep_chart(run, ("loader", "training")),
                    "whole-epoch rate per route: loader and ResNet-50 training"),
        *tables(run, LOADER_PAGE)])

    def limit_body(run: Run) -> list[str]:
        parts = ["### MB/s against the ranged-GET limit of the same run and store (epoch 1; 64 readers: "
                 "`--suite node`)\n\n" + table(["store", "route", "readers", "objects", "MB/s", "limit MB/s",
                                                  "x limit"], _limit_rows(moved, nodes))]
        if moved is not None:
            parts.insert(0, page.figure("bytes.png", sweep_chart(moved, ("bytes",)),
                                        "bytes path: MB/s per route against the ranged-GET limit"))
            parts += tables(moved, BYTES_PAGE)
        parts += [f"64 readers, {node.result['config']['object_mb']} MiB objects: a run of the next section "
                  f"({_facts(node).splitlines()[-1][2:]})." for node in nodes if node is not run]
        return parts

    def node_body(run: Run) -> list[str]:
        parts = []
        for node in nodes:
            config = node.result["config"]
            if node is not run:
                parts += [f"### {config['objects']} x {config['object_mb']} MiB objects", _facts(node)]
            parts += [f"{config['ranks']} ranks x {config['threads']} readers on one shared mount per program, "
                      f"{config['objects']} x {config['object_mb']} MiB objects.", node_table(node.result)]
        return parts

    page.section(BYTES_PAGE, moved or (nodes[0] if nodes else None), limit_body)
    page.section("64 readers on one mount", nodes[0] if nodes else None, node_body)

    def dlio_body(run: Run) -> list[str]:
        png = os.path.splitext(run.path)[0] + ".png"
        parts = [*mlperf_header(run.result)[2:], *[_demote(s) for s in mlperf_sections(run.result)]]
        if os.path.exists(png):
            parts.insert(0, page.figure("dlio.png", lambda path: bool(shutil.copyfile(png, path)),
                                        "DLIO: accelerators kept at AU >= 90 % per route"))
        return parts

    page.section("DLIO (MLPerf Storage)", mlperf, dlio_body)
    page.section(CHECKPOINT_PAGE, saved, lambda run: [
        page.figure("checkpoints.png", sweep_chart(run, ("checkpoints",)), "checkpoint save and load MB/s per route"),
        *tables(run, CHECKPOINT_PAGE)])
    page.section(PEER_PAGE, peers, lambda run: tables(run, PEER_PAGE))
    return page


def _header(link: Callable[[str], str]) -> str:
    return "\n\n".join([
        "# Benchmarks",
        "The current figures: one section per suite, each from the newest run given of that suite, with the run's "
        "command, commit, machine, date and load average as the run recorded them. Generated by "
        "`benchmarks/benchmarks_md.py` from the bench's own report files (`--out`): do not edit by hand. Ratios are to "
        "the limit measured in the same run and store. What each column means: "
        f"[Benchmarks]({link('docs/benchmarks.md')}) and [the guide]({link('docs/benchmarks-guide.md')}). "
        "Earlier runs: `git log -p BENCHMARKS.md`.",
        "To regenerate it (each suite alone on a quiet machine; the first command three times, so that each figure "
        "of its sections is a median of three; without `--quick` the sweep covers more worker counts, shard and "
        "dataset sizes and both stores, for hours on two cores; `--accelerator gpu` where there is a GPU):",
        "```bash\n" + "\n".join(REGENERATE) + "\n```"])


def render(runs: list[Run], page_dir: str, root: str, *, old_text: str | None = None
           ) -> tuple[str, dict[str, Callable[[str], bool]], set[str]]:
    """The page's text, its links relative to ``page_dir`` (both under ``root``), its figures to write, and the
    old figures its kept sections still show.  ``old_text``: the page as it stands, whose sections of suites with
    no run given are kept (with each section's own run facts) instead of reading "not run"."""

    def link(path: str) -> str:
        return os.path.relpath(os.path.join(root, path), page_dir)

    page = _build(runs, kept_sections(old_text, link(FIGURES)) if old_text else None)

    text = "\n\n".join([_header(link), *page.parts]) + "\n"
    return text.replace("](FIGURES/", f"]({link(FIGURES)}/"), page.figures, page.kept_figures


def _write(path: str, text: str) -> None:
    """Through a new file and a rename, so that a symbolic link at ``path`` is replaced, never written through."""
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with open(path + ".tmp", "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(path + ".tmp", path)


def write_pages(dirs: list[str], root: str, *, keep: bool = False) -> list[str]:
    """Write ``PAGES`` and their figures under ``root`` from the runs under ``dirs``; return what was written.
    ``keep``: the sections of suites not given stay as they are (``render``)."""
    runs = find_runs(dirs)
    written = []
    figures: dict[str, Callable[[str], bool]] = {}
    still_shown: set[str] = set()
    for name in PAGES:
        path = os.path.join(root, name)
        old_text = None
        if keep and os.path.exists(path):
            with open(path, encoding="utf-8") as f:
                old_text = f.read()
        text, figures, still_shown = render(runs, os.path.dirname(path), root, old_text=old_text)
        _write(path, text)
        written.append(path)
    folder = os.path.join(root, FIGURES)
    os.makedirs(folder, exist_ok=True)
    for name in ("loader-training.png", "bytes.png", "dlio.png", "checkpoints.png"):
        if name not in figures and name not in still_shown and os.path.exists(os.path.join(folder, name)):
            os.remove(os.path.join(folder, name))  # a suite not in this report: its old picture goes too
    for name, draw in figures.items():
        if draw(os.path.join(folder, name)):
            written.append(os.path.join(folder, name))
    return written
