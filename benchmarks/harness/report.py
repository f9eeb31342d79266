"""A run's results as files: ``<suite>-<stamp>.json`` (everything), ``.md`` (tables) and ``.png`` (chart)."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from typing import Any

from benchmarks.harness.kinds import KINDS
from benchmarks.harness.tables import table

__all__ = ["write_report", "markdown", "mlperf_markdown", "header", "sections", "chart", "mlperf_header",
           "mlperf_sections", "PANELS", "table"]


def _stores(result: dict[str, Any]) -> list[str]:
    """The run's stores in the order they ran (a run from before stores existed: its cells' own)."""
    return list(result.get("stores") or dict.fromkeys(c.get("store", "local") for c in result["cells"]))


def _store_line(name: str, about: dict[str, Any]) -> str:
    if name == "far":
        only = " (its loader cells only)" if about.get("cells") == "loader" else ""
        return (f"far = a far-store proxy before the same endpoint, {about.get('latency_ms')} ms per request and "
                f"{about.get('rate_mb_s')} MB/s per connection{only}")
    if name == "remote":
        return f"remote = {about.get('endpoint')} (a store not on this machine: no proxy)"
    return f"{name} = the endpoint itself ({about.get('endpoint')})"


def header(result: dict[str, Any]) -> list[str]:
    """A run's title, machine and load line, and its stores (the top of ``markdown``)."""
    machine = result["machine"]
    return [f"# mountctl bench {result['started']}",
            f"{machine['cpu_count']} CPUs ({machine['cpu_model']}), {machine['memory_gb']} GB, "
            f"GPU: {machine['gpu'] or 'none'}; load average {machine['load_average']} at start, "
            f"{machine.get('load_average_end')} at end; endpoint {result['endpoint']}; "
            f"{result['seconds']} s in all.",
            "Stores: " + "; ".join(_store_line(name, about) for name, about in result.get("stores", {}).items())
            + "."] + ([f"**Interrupted**: {len(result['cells'])} of {result.get('cells_planned')} cells were measured "
                       "before the run was stopped; a cell missing below was not measured."]
                      if result.get("interrupted") else [])


def sections(result: dict[str, Any]) -> dict[str, str]:
    """``markdown``'s tables by name, in its order (``kinds.KINDS``), each a ``## `` section (a section with no
    cells: absent where ``markdown`` leaves it out). ``benchmarks_page.py`` takes them one by one for BENCHMARKS.md."""
    cells, stores = result["cells"], _stores(result)
    found = {kind.name: kind.markdown(cells, stores) for kind in KINDS}
    return {name: text for name, text in found.items() if text}


def markdown(result: dict[str, Any]) -> str:
    return "\n\n".join([*header(result), *sections(result).values()]) + "\n"


PANELS = tuple(kind.name for kind in KINDS if kind.panel)  # the chart's rows, top to bottom, where the run has them


def chart(result: dict[str, Any], path: str, panels: tuple[str, ...] = PANELS) -> bool:
    """One column of panels per store, rows shared so that a store's bars read against the other's; ``panels``
    picks rows (``PANELS`` names them). False, and no file, where the run has none of them."""
    import matplotlib

    matplotlib.use("Agg")  # files only: no display on a server
    import matplotlib.pyplot as plt

    stores = _stores(result)
    ok = [c for c in result["cells"] if c["status"] == "ok"]
    per_store = {store: [c for c in ok if c.get("store", "local") == store] for store in stores}
    rows = [kind.panel for kind in KINDS if kind.panel and kind.name in panels and kind.panel.shown(ok)]
    if not rows:
        return False
    widening = {name for row in (kind.panel for kind in KINDS if kind.panel) for name in row.widens}
    widest = max((sum(c["cell"] in widening for c in cells) / 2 for cells in per_store.values()), default=0)
    heights = [row.height for row in rows]
    figure, axes = plt.subplots(len(heights), len(stores), squeeze=False, sharey="row",
                                figsize=(len(stores) * max(8, 0.3 * widest + 3), 4.5 * len(heights)),
                                gridspec_kw={"height_ratios": heights})
    for column, store in enumerate(stores):
        for row, axis in zip(rows, axes[:, column], strict=True):
            row.draw(axis, per_store[store], store)
        upright = next((axis for row, axis in zip(rows, axes[:, column], strict=True) if row.most_bars),
                       axes[0, column])
        upright.tick_params(axis="x", labelrotation=90)  # the panel with the most bars
    figure.tight_layout()
    figure.savefig(path, dpi=80)
    plt.close(figure)
    return True


def mlperf_header(result: dict[str, Any]) -> list[str]:
    """``--suite mlperf``'s title, machine and load line, stores and workloads (the top of ``mlperf_markdown``)."""
    machine = result["machine"]
    asked = "; ".join(f"{w['name']} ({w['config']}): batch {w['batch_size']} per {w['computation_time']} s = "
                      f"{w['samples_per_s_asked']} samples/s per accelerator, {w['files']} files of "
                      f"{w['record_bytes']:,} B, {w['read_threads']} reader threads, {w['epochs']} epochs"
                      for w in result["workloads"])
    return [f"# mountctl bench --suite mlperf {result['started']}",
            f"{machine['cpu_count']} CPUs, load average {machine['load_average']} at start, "
            f"{machine.get('load_average_end')} at end; {result.get('seconds')} s in all. Stores: "
            + "; ".join(_store_line(name, about) for name, about in result.get("stores", {}).items()) + ".",
            f"Workloads (DLIO's configs, Hydra overrides only): {asked}."]


def mlperf_sections(result: dict[str, Any]) -> list[str]:
    """``--suite mlperf`` in MLPerf Storage's terms: accelerators kept at AU >= 90 %, their AU and samples/s,
    then a line per route not measured and per failed run."""
    counts = sorted({n for row in result["kept"] for n in row["au_pct_by_accelerators"]})
    parts = [f"## Accelerators kept at AU >= {result['au_target_pct']:g} % (local disk: the reference)\n\n"
             + table(["workload", "store", "route", "accelerators kept", "AU % there", "samples/s there",
                       "x local disk", *(f"AU % at {n}" for n in counts)],
                      [[r["workload"], r["store"], r["route"], r["accelerators_kept"], r["au_pct"],
                        r["samples_per_s"], r["x_local_disk"],
                        *(r["au_pct_by_accelerators"].get(n, "-") for n in counts)] for r in result["kept"]])]
    notes = {f"{r['route']}: {r['status']}" for r in result["runs"] if r["status"] != "ok" and "accelerators" not in r}
    failed = [f"{r['workload']} {r['route']} ({r['store']}) x{r['accelerators']}: {r['status']}"
              for r in result["runs"] if r["status"] != "ok" and "accelerators" in r]
    return parts + [f"Not measured: {note}." for note in sorted(notes)] + [f"Failed run: {line}" for line in failed]


def mlperf_markdown(result: dict[str, Any]) -> str:
    """``--suite mlperf``'s report: its header, then ``mlperf_sections``."""
    return "\n\n".join([*mlperf_header(result), *mlperf_sections(result)]) + "\n"


def _mlperf_chart(result: dict[str, Any], path: str) -> None:
    """One panel per workload: accelerators each route keeps at the AU target, labelled with the AU there."""
    import matplotlib

    matplotlib.use("Agg")  # files only: no display on a server
    import matplotlib.pyplot as plt

    workloads = sorted({r["workload"] for r in result["kept"]}) or ["-"]
    figure, axes = plt.subplots(len(workloads), 1, squeeze=False, figsize=(9, 1.2 + 2.8 * len(workloads)))
    for axis, workload in zip(axes[:, 0], workloads, strict=True):
        rows = [r for r in result["kept"] if r["workload"] == workload]
        labels = [f"{r['route']} ({r['store']})" if r["store"] != "-" else r["route"] for r in rows]
        kept = [r["accelerators_kept"] for r in rows]
        bars = axis.barh(labels, kept, color="tab:blue")
        for bar, row in zip(bars, rows, strict=True):
            axis.text(bar.get_width(), bar.get_y() + bar.get_height() / 2, f" AU {row['au_pct']} %", va="center")
        axis.invert_yaxis()
        axis.set_xlabel(f"accelerators kept at AU >= {result['au_target_pct']:g} %")
        axis.set_title(f"{workload}: DLIO through each route (local disk is the reference)")
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)


# Per suite, its files' prefix: what writes its tables and what draws its chart.
_SUITES: dict[str, tuple[Callable[[dict[str, Any]], str], Callable[[dict[str, Any], str], Any]]] = {
    "bench": (markdown, chart), "mlperf": (mlperf_markdown, _mlperf_chart)}


def write_report(result: dict[str, Any], out: str, suite: str = "bench") -> dict[str, str]:
    """``<suite>-<stamp>.json`` (everything), ``.md`` (the tables) and ``.png`` (the chart) under ``out``; return
    their paths. ``suite``: "bench" (a sweep) or "mlperf"."""
    render, draw = _SUITES[suite]
    os.makedirs(out, exist_ok=True)
    stamp = result["started"].replace(":", "").replace("+0000", "Z")
    paths = {kind: os.path.join(out, f"{suite}-{stamp}.{kind}") for kind in ("json", "md", "png")}
    with open(paths["json"], "w", encoding="utf-8") as f:
        json.dump({**result, "files": paths}, f, indent=1)
    with open(paths["md"], "w", encoding="utf-8") as f:
        f.write(render(result))
    draw(result, paths["png"])
    return paths
