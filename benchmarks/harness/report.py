"""A run's results as files: ``<stamp>.json`` (everything), ``<stamp>.md`` (tables) and ``<stamp>.png`` (chart)."""

from __future__ import annotations

import json
import os
from typing import Any

from benchmarks.harness.checkpoint_cells import checkpoint_bars, checkpoint_rows
from benchmarks.harness.side_by_side import side_by_side

__all__ = ["write_report", "markdown", "mlperf_markdown", "write_mlperf_report", "header", "sections", "chart",
           "mlperf_header", "mlperf_sections", "PANELS", "table"]


def _fmt(value: Any, digits: int = 1) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:,.{digits}f}"
    return str(value)


def _table(header: list[str], rows: list[list[Any]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(" --- " for _ in header) + "|"]
    # Ratios and seconds: three places; rates and sizes: one.
    digits = [3 if name.startswith("x ") or name.endswith((" s", " ms")) else 1 for name in header]
    lines += ["| " + " | ".join(_fmt(v, d) for v, d in zip(row, digits, strict=False)) + " |" for row in rows]
    return "\n".join(lines)


def table(header: list[str], rows: list[list[Any]]) -> str:
    """A Markdown table formatted as every table of the report is (ratios and seconds: three places)."""
    return _table(header, rows)


def _ok(cells: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [c for c in cells if c["cell"] == kind]


def _by_epoch(rows: list[dict[str, Any]], key: tuple[str, ...]
              ) -> list[tuple[tuple[Any, ...], dict[int, dict[str, Any]]]]:
    """Rows that differ only in their epoch, gathered: [(key values, {epoch: row})] in first-seen order."""
    grouped: dict[tuple[Any, ...], dict[int, dict[str, Any]]] = {}
    for row in rows:
        grouped.setdefault(tuple(row.get(k) for k in key), {})[row.get("epoch", 1)] = row
    return list(grouped.items())


def _at(epochs: dict[int, dict[str, Any]], epoch: int, field: str) -> Any:
    row = epochs.get(epoch)
    if row is None:
        return None
    return row.get(field) if row["status"] == "ok" else row["status"]


def _pair(epochs: dict[int, dict[str, Any]], field: str) -> tuple[Any, Any]:
    return _at(epochs, 1, field), _at(epochs, 2, field)


def _peak(epochs: dict[int, dict[str, Any]]) -> Any:
    """The mount program's peak RSS over both epochs (one mount serves both)."""
    peaks = [row.get("program_peak_rss_mb") for row in epochs.values() if row["status"] == "ok"]
    return max((p for p in peaks if p is not None), default=None)


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
    """``markdown``'s tables by name, in its order, each a ``## `` section (a section with no cells: absent
    where ``markdown`` leaves it out). benchmarks/benchmarks_md.py takes them one by one."""
    cells = result["cells"]
    stores = _stores(result)
    found = {"stores": "## Stores side by side (each ratio: to the limit in the same store and run)\n\n"
             + _table(*side_by_side(cells, stores))}
    found["limits"] = "## Limits (same run)\n\n" + _table(
        ["store", "dataset", "shards", "raw GET MB/s", "raw GET samples/s", "GET threads"],
        [[c.get("store"), c["dataset"], c.get("shards"), c.get("mb_per_s"), c.get("samples_per_s"), c.get("threads")]
         if c["status"] == "ok" else [c.get("store"), c["dataset"], c.get("shards"), c["status"], "", ""]
         for c in _ok(cells, "raw-get")])
    found["loader"] = ("## Loader: read + decode, no model (epochs 1 and 2 side by side; whole epoch first)\n\n"
                       + _table(
        ["store", "dataset", "workers", "source", "first batch e1 s", "first batch e2 s", "samples/s e1",
         "samples/s e2", "MB/s e1", "MB/s e2", "x local disk e1", "x local disk e2", "x raw GET e1", "x raw GET e2",
         "after warm-up samples/s e1", "after warm-up samples/s e2", "loader CPU % e1", "program CPU % e1",
         "program CPU % e2", "loader peak RSS MB", "program peak RSS MB"],
        [[*key, *_pair(e, "first_batch_s"), *_pair(e, "epoch_samples_per_s"), *_pair(e, "epoch_mb_per_s"),
          *_pair(e, "ratio_to_local_disk"), *_pair(e, "ratio_to_raw_get"), *_pair(e, "samples_per_s"),
          _at(e, 1, "loader_cpu_pct"), *_pair(e, "program_cpu_pct"), _at(e, 1, "loader_peak_rss_mb"),
          _at(e, 1, "program_peak_rss_mb")]
         for key, e in _by_epoch(_ok(cells, "loader"), ("store", "dataset", "num_workers", "source"))]))
    found["first-sample"] = "## Opening a source and the first sample\n\n" + _table(
        ["store", "dataset", "source", "open / mount start-up s", "first sample s", "program peak RSS MB"],
        [[c.get("store"), c["dataset"], c["source"], c.get("open_s"), c.get("first_sample_s"),
          c.get("program_peak_rss_mb")] if c["status"] == "ok"
         else [c.get("store"), c["dataset"], c["source"], c["status"], "", ""] for c in _ok(cells, "first-sample")])
    training = [((c.get("store"), "synthetic on device", c.get("device"), c.get("precision"), "-"), {1: c, 2: c})
                for c in _ok(cells, "ceiling")]
    training += _by_epoch(_ok(cells, "train"), ("store", "source", "device", "precision", "decode"))
    found["training"] = "## Training: ResNet-50 (epochs 1 and 2 side by side; whole epoch first)\n\n" + _table(
        ["store", "source", "device", "precision", "decode", "first batch e1 s", "first batch e2 s", "images/s e1",
         "images/s e2", "x ceiling e1", "x ceiling e2", "after warm-up images/s e1", "after warm-up images/s e2",
         "process CPU %", "program CPU %", "program peak RSS MB"],
        [[*key, *_pair(e, "first_batch_s"), *_pair(e, "epoch_samples_per_s"), *_pair(e, "ratio_to_ceiling"),
          *_pair(e, "samples_per_s"), _at(e, 1, "loader_cpu_pct"), _at(e, 1, "program_cpu_pct"),
          _at(e, 1, "program_peak_rss_mb")] for key, e in training])
    found["bytes"] = "## Bytes path: tar walk, no decode (epochs 1 and 2 side by side)\n\n" + _table(
        ["store", "dataset", "source", "variant", "readers", "MB/s e1", "MB/s e2", "x raw GET e1", "x raw GET e2",
         "reader CPU % e1", "reader CPU % e2", "program CPU % e1", "program CPU % e2", "program peak RSS MB"],
        [[*key, *_pair(e, "mb_per_s"), *_pair(e, "ratio_to_raw_get"), *_pair(e, "loader_cpu_pct"),
          *_pair(e, "program_cpu_pct"), _peak(e)]
         for key, e in _by_epoch(_ok(cells, "bytes"), ("store", "dataset", "source", "variant", "readers"))])
    found["random"] = "## Random reads: 64 KiB at random offsets, one reader\n\n" + _table(
        ["store", "dataset", "source", "variant", "MB/s", "reads/s", "p50 ms", "x s3io range", "reader CPU %",
         "program CPU %", "program peak RSS MB"],
        [[c.get("store"), c["dataset"], c["source"], c.get("variant"), c.get("mb_per_s"), c.get("reads_per_s"),
          c.get("p50_ms"), c.get("ratio_to_s3io_range"), c.get("loader_cpu_pct"), c.get("program_cpu_pct"),
          c.get("program_peak_rss_mb")] if c["status"] == "ok"
         else [c.get("store"), c["dataset"], c["source"], c.get("variant"), c["status"], "", "", "", "", "", ""]
         for c in _ok(cells, "random")])
    from benchmarks.harness.map_cells import map_markdown
    from benchmarks.harness.peers import peer_markdown

    for name, section in (("map", map_markdown(cells, _table)), ("peers", peer_markdown(cells, _table))):
        if section:
            found[name] = section
    if any(c["cell"] == "checkpoint" for c in cells):
        found["checkpoints"] = "## Checkpoints: save and load per route\n\n" + _table(*checkpoint_rows(cells))
    notes = [c["status"] for c in cells if c["cell"] == "gpu"]
    if notes:
        found["gpu"] = "GPU cells: " + "; ".join(notes) + "."
    return found


def markdown(result: dict[str, Any]) -> str:
    return "\n\n".join([*header(result), *sections(result).values()]) + "\n"


def _bars(axis: Any, rows: list[dict[str, Any]], group: Any, field: str, ylabel: str, title: str) -> None:
    """One bar per epoch beside each other, per group (a ceiling row, with no epoch, counts for both)."""
    groups = list(dict.fromkeys(group(c) for c in rows))
    width = 0.4
    for i, epoch in enumerate((1, 2)):
        values = {group(c): c.get(field) or 0 for c in rows if c.get("epoch", epoch) == epoch}
        axis.bar([g + i * width for g in range(len(groups))], [values.get(g, 0) for g in groups], width,
                 label=f"epoch {epoch}")
    axis.set_xticks([g + width / 2 for g in range(len(groups))], groups, fontsize=7)
    axis.set_ylabel(ylabel)
    axis.set_title(title)
    axis.legend(fontsize=8)


def _grouped_bars(axes: Any, series: dict[str, dict[str, float]]) -> None:
    """One bar per series in each group, groups in first-seen order, with a legend."""
    groups = list(dict.fromkeys(g for values in series.values() for g in values))
    width = 0.8 / max(1, len(series))
    for i, (label, values) in enumerate(series.items()):
        axes.bar([g + i * width for g in range(len(groups))], [values.get(g, 0) for g in groups], width, label=label)
    axes.set_xticks([g + width * (len(series) - 1) / 2 for g in range(len(groups))], groups, fontsize=8)
    if series:
        axes.legend(fontsize=7, ncol=2)


PANELS = ("loader", "training", "bytes", "checkpoints")  # the chart's rows, top to bottom, where the run has them


def chart(result: dict[str, Any], path: str, panels: tuple[str, ...] = PANELS) -> bool:
    """One column of panels per store, rows shared so that a store's bars read against the other's; ``panels``
    picks rows (``PANELS`` names them). False, and no file, where the run has none of them."""
    import matplotlib

    matplotlib.use("Agg")  # files only: no display on a server
    import matplotlib.pyplot as plt

    stores = _stores(result)
    ok = [c for c in result["cells"] if c["status"] == "ok"]
    per_store = {store: [c for c in ok if c.get("store", "local") == store] for store in stores}
    widest = max((sum(c["cell"] in ("loader", "bytes") for c in cells) / 2 for cells in per_store.values()),
                 default=0)
    present = {"loader": True, "training": True, "bytes": any(c["cell"] == "bytes" for c in ok),
               "checkpoints": any(c["cell"] == "checkpoint" for c in ok)}
    rows = [name for name in PANELS if name in panels and present[name]]
    if not rows:
        return False
    heights = [{"loader": 2, "training": 1, "bytes": 2, "checkpoints": 1.5}[name] for name in rows]
    figure, axes = plt.subplots(len(heights), len(stores), squeeze=False, sharey="row",
                                figsize=(len(stores) * max(8, 0.3 * widest + 3), 4.5 * len(heights)),
                                gridspec_kw={"height_ratios": heights})
    for column, store in enumerate(stores):
        cells, panel = per_store[store], dict(zip(rows, axes[:, column], strict=True))
        if "loader" in panel:
            _bars(panel["loader"], [c for c in cells if c["cell"] == "loader"],
                  lambda c: f"{c['source']}\nw={c['num_workers']}", "epoch_samples_per_s",
                  "samples/s over the whole epoch", f"{store}: loader per source, whole epoch (local-disk is the limit)")
        if "training" in panel:
            training = [c for c in cells if c["cell"] == "ceiling"] + [c for c in cells if c["cell"] == "train"]
            _bars(panel["training"], training, lambda c: c.get("source", "ceiling"), "epoch_samples_per_s",
                  "images/s over the whole epoch", f"{store}: ResNet-50 training, whole epoch (synthetic on device: "
                  "the ceiling)")
        if "bytes" in panel:
            _bars(panel["bytes"], [c for c in cells if c["cell"] == "bytes"],
                  lambda c: f"{c['source']}\n{c['variant']} r={c['readers']}", "mb_per_s", "MB/s",
                  f"{store}: bytes path, no decode; dashed: ranged-GET limit")
            for limit in (c for c in cells if c["cell"] == "raw-get"):
                panel["bytes"].axhline(limit["mb_per_s"], color="grey", linestyle="--", linewidth=1)
        if "checkpoints" in panel:
            _grouped_bars(panel["checkpoints"], checkpoint_bars(cells))
            panel["checkpoints"].set_ylabel("MB/s")
            panel["checkpoints"].set_title(f"{store}: checkpoint save and load per route")
        panel.get("bytes", panel[rows[0]]).tick_params(axis="x", labelrotation=90)  # the panel with the most bars
    figure.tight_layout()
    figure.savefig(path, dpi=80)
    plt.close(figure)
    return True


def write_report(result: dict[str, Any], out: str) -> dict[str, str]:
    """Write the three files under ``out``; return their paths."""
    os.makedirs(out, exist_ok=True)
    stamp = result["started"].replace(":", "").replace("+0000", "Z")
    paths = {kind: os.path.join(out, f"bench-{stamp}.{kind}") for kind in ("json", "md", "png")}
    with open(paths["json"], "w", encoding="utf-8") as f:
        json.dump({**result, "files": paths}, f, indent=1)
    with open(paths["md"], "w", encoding="utf-8") as f:
        f.write(markdown(result))
    chart(result, paths["png"])
    return paths


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
             + _table(["workload", "store", "route", "accelerators kept", "AU % there", "samples/s there",
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


def write_mlperf_report(result: dict[str, Any], out: str) -> dict[str, str]:
    """``mlperf-<stamp>.json`` (every run), ``.md`` (the table) and ``.png`` (the chart) under ``out``."""
    os.makedirs(out, exist_ok=True)
    stamp = result["started"].replace(":", "").replace("+0000", "Z")
    paths = {kind: os.path.join(out, f"mlperf-{stamp}.{kind}") for kind in ("json", "md", "png")}
    with open(paths["json"], "w", encoding="utf-8") as f:
        json.dump({**result, "files": paths}, f, indent=1)
    with open(paths["md"], "w", encoding="utf-8") as f:
        f.write(mlperf_markdown(result))
    _mlperf_chart(result, paths["png"])
    return paths
