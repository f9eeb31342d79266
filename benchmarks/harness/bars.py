"""How the chart's panels draw their bars, so that each cell kind's panel (``kinds.Panel``) reads as the others.

Only axes are handed in: matplotlib itself is imported by ``report.chart``, which makes the figure.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["epoch_bars", "grouped_bars"]


def epoch_bars(axis: Any, rows: list[dict[str, Any]], group: Callable[[dict[str, Any]], str], field: str,
               ylabel: str, title: str) -> None:
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


def grouped_bars(axes: Any, series: dict[str, dict[str, float]]) -> None:
    """One bar per series in each group, groups in first-seen order, with a legend."""
    groups = list(dict.fromkeys(g for values in series.values() for g in values))
    width = 0.8 / max(1, len(series))
    for i, (label, values) in enumerate(series.items()):
        axes.bar([g + i * width for g in range(len(groups))], [values.get(g, 0) for g in groups], width, label=label)
    axes.set_xticks([g + width * (len(series) - 1) / 2 for g in range(len(groups))], groups, fontsize=8)
    if series:
        axes.legend(fontsize=7, ncol=2)
