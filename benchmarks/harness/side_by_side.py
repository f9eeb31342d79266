"""The stores side by side: one row per measurement and route, a column group per store (local, far or remote).

Each value sits beside its ratio to the limit measured in the same store and
run: the bytes path against the parallel ranged-GET limit, loaders and
map-style reads against local disk, random reads against s3torchconnector's
range reader, training against the compute ceiling, checkpoints against local
disk.  Epochs 1 and 2 apart where the cell has both.  Loaders and training lead with the whole
epoch (time to the first batch, then the rate over the epoch); the rate after warm-up follows.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["side_by_side", "MEASURES"]

def _workers(cell: dict[str, Any]) -> str:
    return f"{cell['num_workers']} worker{'s' * (cell['num_workers'] != 1)}"


def _map(cell: dict[str, Any]) -> str:
    return f"map-style {cell['layout']}, {cell['num_workers']} w, read-ahead {cell['readahead_threads']}"


# Per cell kind, its rows in order, whole epoch first: (what the row measures, the value's field, its unit,
# the ratio's field, the limit it is a ratio to).  Time to the first batch, then the rate over the whole
# epoch, then the rate after warm-up, labelled as such.
MEASURES: dict[str, tuple[tuple[Callable[[dict[str, Any]], str], str, str, str, str], ...]] = {
    "raw-get": ((lambda c: "limit: parallel ranged GET", "mb_per_s", "MB/s", "", ""),),
    "bytes": ((lambda c: f"bytes, {c['readers']} reader{'s' * (c['readers'] != 1)}", "mb_per_s", "MB/s",
               "ratio_to_raw_get", "raw GET"),),
    "random": ((lambda c: "random 64 KiB reads", "mb_per_s", "MB/s", "ratio_to_s3io_range", "s3io range"),),
    "loader": ((lambda c: f"loader + decode, {_workers(c)}: time to first batch", "first_batch_s", "s", "", ""),
               (lambda c: f"loader + decode, {_workers(c)}: whole epoch", "epoch_samples_per_s", "samples/s",
                "ratio_to_local_disk", "local disk"),
               (lambda c: f"loader + decode, {_workers(c)}: after warm-up", "samples_per_s", "samples/s",
                "ratio_to_local_disk_after_warmup", "local disk")),
    "map": ((lambda c: f"{_map(c)}: time to first batch", "first_batch_s", "s", "", ""),
            (lambda c: f"{_map(c)}: whole epoch", "epoch_samples_per_s", "samples/s", "ratio_to_local_disk",
             "local disk"),
            (lambda c: f"{_map(c)}: after warm-up", "samples_per_s", "samples/s", "", "")),
    "ceiling": ((lambda c: "training ceiling: whole epoch", "epoch_samples_per_s", "images/s", "", ""),
                (lambda c: "training ceiling: after warm-up", "samples_per_s", "images/s", "", "")),
    "train": ((lambda c: "training ResNet-50: time to first batch", "first_batch_s", "s", "", ""),
              (lambda c: "training ResNet-50: whole epoch", "epoch_samples_per_s", "images/s", "ratio_to_ceiling",
               "ceiling"),
              (lambda c: "training ResNet-50: after warm-up", "samples_per_s", "images/s",
               "ratio_to_ceiling_after_warmup", "ceiling")),
    "checkpoint": ((lambda c: f"checkpoint {c['op']} {c['state']}", "mb_per_s", "MB/s", "ratio_to_local_disk",
                    "local disk"),),
}


def _route(cell: dict[str, Any]) -> str:
    route = cell.get("route") or cell.get("source") or "-"
    variant = cell.get("variant")
    return f"{route} ({variant})" if variant and variant not in ("-", "default") else route


def side_by_side(cells: list[dict[str, Any]], stores: list[str]) -> tuple[list[str], list[list[Any]]]:
    """(header, rows): measurement, route, unit and limit, then per store the value and its ratio, epochs 1 and 2."""
    rows: dict[tuple[str, int, str, str], dict[tuple[str, int], dict[str, Any]]] = {}
    for cell in cells:
        if cell["cell"] not in MEASURES or "store" not in cell:
            continue
        for number, measure in enumerate(MEASURES[cell["cell"]]):
            try:
                key = (cell["cell"], number, measure[0](cell), _route(cell))
            except KeyError:  # a cell that failed before it could say what it measured
                break
            rows.setdefault(key, {})[(cell["store"], cell.get("epoch", 1))] = cell
    header = ["measurement", "route", "unit", "x limit"]
    for store in stores:
        header += [f"{store} e1", f"{store} e2", f"x {store} e1", f"x {store} e2"]
    table = []
    for (kind, number, what, route), by in rows.items():
        _, field, unit, ratio, limit = MEASURES[kind][number]
        line: list[Any] = [what, route, unit, limit or "-"]
        for store in stores:
            for part in (field, ratio):
                for epoch in (1, 2):
                    found = by.get((store, epoch))
                    if found is None or not part:
                        line.append(None)
                    else:
                        line.append(found.get(part) if found["status"] == "ok" else "failed")
        table.append(line)
    return header, table
