"""The line under the demo's table: is the mount first in every whole-epoch column, and where not, by how much."""

from __future__ import annotations

from benchmarks.harness.demo import mount_verdict


def _row(kind: str, train: tuple[float, float], loader: tuple[float, float]) -> dict:
    return {"kind": kind, "summary": {"epochs": [{"epoch_images_per_s": v} for v in train]},
            "bench": {"epochs": [{"epoch_images_per_s": v} for v in loader]}}


def test_a_mount_ahead_everywhere_says_so():
    rows = [_row("mountpoint", (30, 50), (400, 500)), _row("s3io", (29, 49), (390, 480))]
    assert mount_verdict(rows) == "The mount is first in every whole-epoch column."


def test_each_column_the_mount_trails_is_named_with_both_figures_and_the_ratio():
    rows = [_row("mountpoint", (17.0, 66.6), (442, 511)), _row("s3io", (21.8, 67.1), (425, 410)),
            _row("fsspec", (19.4, 71.0), (422, 417))]
    line = mount_verdict(rows)
    assert line.startswith("The mount is not first in: ") and "\n" not in line
    assert "train img/s epoch 1 17.0 against s3io's 21.8 (0.78 x)" in line
    assert "train img/s epoch 2 66.6 against fsspec's 71.0 (0.94 x)" in line
    assert "loader img/s" not in line


def test_nothing_is_said_without_a_mount_or_without_another_kind():
    assert mount_verdict([_row("s3io", (1, 1), (1, 1))]) == ""
    assert mount_verdict([_row("mountpoint", (1, 1), (1, 1))]) == ""


def test_a_failed_kind_is_left_out_of_the_comparison():
    rows = [_row("mountpoint", (30, 50), (400, 500)), {"kind": "fsspec", "summary": None, "bench": None}]
    assert mount_verdict(rows) == "The mount is first in every whole-epoch column."
