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


def _waiting(row: dict, *waits: float | None) -> dict:
    row["summary"]["data_wait"] = [{"epoch": i, "data_wait_fraction": w} for i, w in enumerate(waits)]
    return row


def test_when_no_route_made_training_wait_the_training_columns_are_not_ranked_and_the_line_says_why():
    rows = [_waiting(_row("mountpoint", (72.4, 68.1), (330, 3133)), 0.004, 0.002),
            _waiting(_row("s3io", (64.9, 78.6), (317, 1121)), 0.01, 0.003),
            _waiting(_row("fsspec", (73.3, 75.7), (296, 798)), 0.021, 0.004)]
    line = mount_verdict(rows)
    assert line.startswith("The mount is first in every whole-epoch loader column. Training here is bound by the "
                           "model"), line
    assert "at most 2.1%" in line and "train img/s epoch" not in line.split(".")[0]


def test_a_route_that_made_training_wait_ranks_the_training_columns_again():
    rows = [_waiting(_row("mountpoint", (17.0, 66.6), (442, 511)), 0.3, 0.01),
            _waiting(_row("s3io", (21.8, 67.1), (425, 410)), 0.02, 0.01)]
    line = mount_verdict(rows)
    assert "train img/s epoch 1 17.0 against s3io's 21.8 (0.78 x)" in line
    assert "bound by the model" not in line


def test_an_unknown_wait_ranks_the_training_columns_and_the_loader_still_decides_its_own():
    rows = [_waiting(_row("mountpoint", (17.0, 66.6), (442, 511)), 0.01, None),
            _waiting(_row("s3io", (21.8, 67.1), (425, 530)), 0.01, 0.01)]
    line = mount_verdict(rows)
    assert "train img/s epoch 1 17.0 against s3io's 21.8" in line
    assert "loader img/s epoch 2 511.0 against s3io's 530.0" in line


def test_the_demo_commands_defaults_are_democonfigs():
    import dataclasses

    from benchmarks.harness.command import _demo_config
    from benchmarks.harness.demo import DemoConfig
    from resnet import build_parser

    config = _demo_config(build_parser().parse_args(["demo"]))
    default = DemoConfig()
    for field in ("num_images", "image_size", "batch_size", "max_epochs", "num_workers", "store", "uri"):
        assert getattr(config, field) == getattr(default, field), field
    assert dataclasses.replace(config, kinds=default.kinds) == default
