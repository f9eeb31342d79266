"""A run's results as files: ``<stamp>.json`` (everything), ``<stamp>.md`` (tables) and ``<stamp>.png`` (chart)."""

from __future__ import annotations

import json
import os
from typing import Any

from mountctl.pytorch.benchmark.checkpoint_cells import checkpoint_bars, checkpoint_rows

__all__ = ["write_report", "markdown"]


def _fmt(value: Any, digits: int = 1) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:,.{digits}f}"
    return str(value)


def _table(header: list[str], rows: list[list[Any]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(" --- " for _ in header) + "|"]
    # Ratios and seconds: three places; rates and sizes: one.
    digits = [3 if name.startswith("x ") or name.endswith(" s") else 1 for name in header]
    lines += ["| " + " | ".join(_fmt(v, d) for v, d in zip(row, digits, strict=False)) + " |" for row in rows]
    return "\n".join(lines)


def _ok(cells: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [c for c in cells if c["cell"] == kind]


def markdown(result: dict[str, Any]) -> str:
    cells, machine = result["cells"], result["machine"]
    parts = [f"# mountctl bench {result['started']}",
             f"{machine['cpu_count']} CPUs ({machine['cpu_model']}), {machine['memory_gb']} GB, "
             f"GPU: {machine['gpu'] or 'none'}; load average {machine['load_average']} at start, "
             f"{machine.get('load_average_end')} at end; endpoint {result['endpoint']}; "
             f"{result['seconds']} s in all."]
    parts.append("## Limits (same run)\n\n" + _table(
        ["dataset", "shards", "raw GET MB/s", "raw GET samples/s", "GET threads"],
        [[c["dataset"], c.get("shards"), c.get("mb_per_s"), c.get("samples_per_s"), c.get("threads")]
         if c["status"] == "ok" else [c["dataset"], c.get("shards"), c["status"], "", ""]
         for c in _ok(cells, "raw-get")]))
    parts.append("## Loader: read + decode, no model\n\n" + _table(
        ["dataset", "workers", "source", "samples/s", "MB/s", "x local disk", "x raw GET", "loader CPU %",
         "loader peak RSS MB", "daemon CPU %", "daemon peak RSS MB"],
        [[c["dataset"], c["num_workers"], c["source"], c.get("samples_per_s"), c.get("mb_per_s"),
          c.get("ratio_to_local_disk"), c.get("ratio_to_raw_get"), c.get("loader_cpu_pct"),
          c.get("loader_peak_rss_mb"), c.get("daemon_cpu_pct"), c.get("daemon_peak_rss_mb")]
         if c["status"] == "ok" else [c["dataset"], c["num_workers"], c["source"], c["status"]] + [""] * 7
         for c in _ok(cells, "loader")]))
    parts.append("## Opening a source and the first sample\n\n" + _table(
        ["dataset", "source", "open / mount start-up s", "first sample s"],
        [[c["dataset"], c["source"], c.get("open_s"), c.get("first_sample_s")] if c["status"] == "ok"
         else [c["dataset"], c["source"], c["status"], ""] for c in _ok(cells, "first-sample")]))
    training = _ok(cells, "ceiling") + _ok(cells, "train")
    parts.append("## Training: ResNet-50\n\n" + _table(
        ["source", "device", "precision", "images/s", "x ceiling", "process CPU %", "daemon CPU %"],
        [[c.get("source", "-"), c.get("device"), c.get("precision"), c.get("samples_per_s"),
          c.get("ratio_to_ceiling"), c.get("loader_cpu_pct"), c.get("daemon_cpu_pct")]
         if c["status"] == "ok" else [c.get("source", c["cell"]), c["status"], "", "", "", "", ""]
         for c in training]))
    if any(c["cell"] == "checkpoint" for c in cells):
        parts.append("## Checkpoints: save and load per route\n\n" + _table(*checkpoint_rows(cells)))
    notes = [c["status"] for c in cells if c["cell"] == "gpu"]
    if notes:
        parts.append("GPU cells: " + "; ".join(notes) + ".")
    return "\n\n".join(parts) + "\n"


def _grouped_bars(axes: Any, series: dict[str, dict[str, float]]) -> None:
    """One bar per series in each group, groups in first-seen order, with a legend."""
    groups = list(dict.fromkeys(g for values in series.values() for g in values))
    width = 0.8 / max(1, len(series))
    for i, (label, values) in enumerate(series.items()):
        axes.bar([g + i * width for g in range(len(groups))], [values.get(g, 0) for g in groups], width, label=label)
    axes.set_xticks([g + width * (len(series) - 1) / 2 for g in range(len(groups))], groups, fontsize=8)
    if series:
        axes.legend(fontsize=7, ncol=2)


def _chart(result: dict[str, Any], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")  # files only: no display on a server
    import matplotlib.pyplot as plt

    loaders = [c for c in result["cells"] if c["cell"] == "loader" and c["status"] == "ok"]
    groups = list(dict.fromkeys(f"{c['dataset']}\nw={c['num_workers']}" for c in loaders))
    sources = list(dict.fromkeys(c["source"] for c in loaders))
    training = [c for c in result["cells"] if c["cell"] in ("ceiling", "train") and c["status"] == "ok"]
    checkpoints = any(c["cell"] == "checkpoint" for c in result["cells"])
    figure, panels = plt.subplots(2 + checkpoints, 1, figsize=(max(8, 1.6 * len(groups) + 4), 9 + 4 * checkpoints),
                                  gridspec_kw={"height_ratios": [2, 1, 1.5][:2 + checkpoints]})
    top, bottom = panels[0], panels[1]
    if checkpoints:
        _grouped_bars(panels[2], checkpoint_bars(result["cells"]))
        panels[2].set_ylabel("MB/s")
        panels[2].set_title("Checkpoint save and load per route (local-disk is the base)")
    _grouped_bars(top, {source: {f"{c['dataset']}\nw={c['num_workers']}": c["samples_per_s"] for c in loaders
                                 if c["source"] == source} for source in sources})
    top.set_ylabel("samples/s (read + decode)")
    top.set_title("Loader throughput per source (local-disk is the limit)")
    bottom.bar([c.get("source", "ceiling") for c in training], [c["samples_per_s"] for c in training],
               color=["grey"] + ["C0"] * (len(training) - 1))
    bottom.set_ylabel("images/s")
    bottom.set_title("ResNet-50 training (grey: synthetic batches on the device)")
    bottom.tick_params(axis="x", labelsize=8)
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)


def write_report(result: dict[str, Any], out: str) -> dict[str, str]:
    """Write the three files under ``out``; return their paths."""
    os.makedirs(out, exist_ok=True)
    stamp = result["started"].replace(":", "").replace("+0000", "Z")
    paths = {kind: os.path.join(out, f"bench-{stamp}.{kind}") for kind in ("json", "md", "png")}
    with open(paths["json"], "w", encoding="utf-8") as f:
        json.dump({**result, "files": paths}, f, indent=1)
    with open(paths["md"], "w", encoding="utf-8") as f:
        f.write(markdown(result))
    _chart(result, paths["png"])
    return paths
