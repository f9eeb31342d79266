"""``resnet.py bench``'s arguments are turned into what it runs, and checked, before anything starts (issue 36.10)."""

from __future__ import annotations

import pytest

from mountctl import InvalidSpec
from resnet import configure


@pytest.mark.parametrize("suite", ["all", "mlperf", "node"])
def test_every_suite_reads_both_stores_by_default_and_the_far_store_with_quick(suite):
    def store(*argv: str) -> str:
        return configure(["bench", "--suite", suite, *argv])[1].store

    assert (store(), store("--quick"), store("--quick", "--store", "both"), store("--store", "local")) == \
        ("both", "far", "both", "local")


@pytest.mark.parametrize("suite", ["all", "mlperf", "node", "checkpoint"])
def test_a_bad_far_profile_fails_in_the_dry_run_of_every_suite(suite):
    with pytest.raises(InvalidSpec, match="far profile: latency_ms"):
        configure(["bench", "--suite", suite, "--far-latency-ms", "-1"])


def test_one_kind_alone_needs_a_uri_and_one_worker_count_before_it_starts():
    with pytest.raises(InvalidSpec, match="give the URI"):
        configure(["bench", "--source-kind", "s3io"])
    with pytest.raises(InvalidSpec, match="one --num-workers"):
        configure(["bench", "s3://bucket/p/", "--source-kind", "s3io", "--num-workers", "1,2"])
    assert configure(["bench", "s3://bucket/p/", "--source-kind", "s3io"])[1].num_workers == 2


def test_a_suite_config_refuses_a_store_it_does_not_know():
    """What `--suite mlperf` and `--suite node` ran with before: `--store` not given reached their stores as None,
    after the embedded S3 had started; the config itself now refuses it."""
    from benchmarks.harness.mlperf import MlperfConfig
    from benchmarks.harness.node_scale import NodeScaleConfig

    for config in (MlperfConfig, NodeScaleConfig):
        with pytest.raises(InvalidSpec, match="--store must be one of local, far, both, not None"):
            config(uri="s3://bucket/p/", store=None)  # type: ignore[arg-type]


def test_from_index_in_a_sweep_is_refused_in_the_dry_run():
    """A sweep (no --source-kind) ignored --from-index in silence (issue 40, 2.7): it measures mount-s3 mounted from
    the index as a route of its own, so the flag is refused there in one line."""
    with pytest.raises(InvalidSpec, match="mount-s3\\+index") as refused:
        configure(["bench", "--from-index"])
    assert len(str(refused.value).splitlines()) == 1
    config = configure(["bench", "s3://bucket/p/", "--source-kind", "mountpoint", "--from-index"])[1]
    assert config.mountpoint.from_index
