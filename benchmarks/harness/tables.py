"""How every table of a bench report is written: the number format, and rows gathered by epoch.

Each cell kind's module builds its own table from these, so that all of them read alike (ratios and seconds to
three places, rates and sizes to one) and none imports ``report.py``, which imports them.
"""

from __future__ import annotations

from typing import Any

__all__ = ["table", "of_kind", "by_epoch", "at", "pair", "peak"]


def _fmt(value: Any, digits: int = 1) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:,.{digits}f}"
    return str(value)


def table(header: list[str], rows: list[list[Any]]) -> str:
    """A Markdown table formatted as every table of the report is (ratios and seconds: three places)."""
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(" --- " for _ in header) + "|"]
    # Ratios and seconds: three places; rates and sizes: one.
    digits = [3 if name.startswith("x ") or name.endswith((" s", " ms")) else 1 for name in header]
    lines += ["| " + " | ".join(_fmt(v, d) for v, d in zip(row, digits, strict=False)) + " |" for row in rows]
    return "\n".join(lines)


def of_kind(cells: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    """The run's cells of one kind (``cell``), measured or not, in run order."""
    return [c for c in cells if c["cell"] == kind]


def by_epoch(rows: list[dict[str, Any]], key: tuple[str, ...]
             ) -> list[tuple[tuple[Any, ...], dict[int, dict[str, Any]]]]:
    """Rows that differ only in their epoch, gathered: [(key values, {epoch: row})] in first-seen order."""
    grouped: dict[tuple[Any, ...], dict[int, dict[str, Any]]] = {}
    for row in rows:
        grouped.setdefault(tuple(row.get(k) for k in key), {})[row.get("epoch", 1)] = row
    return list(grouped.items())


def at(epochs: dict[int, dict[str, Any]], epoch: int, field: str) -> Any:
    """One epoch's figure, or its status where it was not measured (None where the run has no such epoch)."""
    row = epochs.get(epoch)
    if row is None:
        return None
    return row.get(field) if row["status"] == "ok" else row["status"]


def pair(epochs: dict[int, dict[str, Any]], field: str) -> tuple[Any, Any]:
    """Epochs 1 and 2 of one figure, side by side."""
    return at(epochs, 1, field), at(epochs, 2, field)


def peak(epochs: dict[int, dict[str, Any]]) -> Any:
    """The mount program's peak RSS over both epochs (one mount serves both)."""
    peaks = [row.get("program_peak_rss_mb") for row in epochs.values() if row["status"] == "ok"]
    return max((p for p in peaks if p is not None), default=None)
