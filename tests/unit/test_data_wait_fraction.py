"""data_wait_fraction: the share of step time spent waiting for the next batch, and the line above the threshold."""

from __future__ import annotations

import pytest

from mountctl.pytorch.training.wait_share import DEFAULT_THRESHOLD, advice, data_wait_fraction


def test_fraction_is_the_waits_over_the_whole_steps():
    # Three steps of 1 s each; the loader kept the model waiting 0.5, 0.1 and 0 s of them.
    assert data_wait_fraction([0.5, 0.1, 0.0], [1.0, 1.0, 1.0]) == pytest.approx(0.2)


def test_a_loader_faster_than_the_model_gives_a_fraction_near_zero_and_a_starved_one_near_one():
    assert data_wait_fraction([0.001] * 10, [0.1] * 10) == pytest.approx(0.01)
    assert data_wait_fraction([0.95] * 10, [1.0] * 10) == pytest.approx(0.95)


def test_no_step_time_has_no_fraction_and_clock_noise_stays_within_zero_and_one():
    assert data_wait_fraction([], []) is None
    assert data_wait_fraction([1.2], [1.0]) == 1.0
    assert data_wait_fraction([-0.01], [1.0]) == 0.0


def test_the_advice_names_the_share_the_source_kind_and_what_to_try():
    line = advice("fsspec", 0.63, DEFAULT_THRESHOLD)
    assert "63%" in line and "20%" in line and "fsspec" in line and "--num-workers" in line
    assert "--no-cache" in advice("mountpoint", 0.5, 0.2) or "cache" in advice("mountpoint", 0.5, 0.2)
    assert "\n" not in line


@pytest.mark.parametrize("options", [{"data_wait_threshold": 0}, {"data_wait_threshold": 1.5},
                                     {"metrics_port": 0}, {"metrics_port": 70000}])
def test_a_threshold_outside_zero_to_one_or_a_port_that_is_not_one_is_refused(options):
    from mountctl import InvalidSpec
    from mountctl.pytorch.training.trainer import TrainConfig

    with pytest.raises(InvalidSpec):
        TrainConfig(uri="s3://bucket/data/", **options)
