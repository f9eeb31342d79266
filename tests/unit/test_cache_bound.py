"""The data cache's size bound, from the dataset's bytes and the disk's free bytes."""

from __future__ import annotations

from mountctl.mounts.cache import MIN_CACHE_MB, cache_bound_mb, mount_cache_dir

MIB, GIB = 1 << 20, 1 << 30


def test_small_dataset_on_a_roomy_disk_gets_the_dataset_plus_slack():
    assert cache_bound_mb(1 * GIB, 500 * GIB) == 1024 * 11 // 10 + 256 + 1


def test_cache_never_takes_more_than_half_the_free_disk():
    size = cache_bound_mb(1000 * GIB, 100 * GIB)
    assert size is not None and size * MIB <= 50 * GIB


def test_half_free_limit_is_rounded_down_to_a_power_of_two_so_ranks_agree():
    assert cache_bound_mb(1000 * GIB, 100 * GIB) == cache_bound_mb(1000 * GIB, 100 * GIB - 700 * MIB) == 32768


def test_nearly_full_disk_means_no_cache():
    assert cache_bound_mb(10 * GIB, 2 * MIN_CACHE_MB * MIB - 1) is None
    assert cache_bound_mb(10 * GIB, 0) is None


def test_each_mount_directory_gets_its_own_cache_directory():
    assert mount_cache_dir("/c", "/mnt/a") != mount_cache_dir("/c", "/mnt/b")
    assert mount_cache_dir("/c", "/mnt/a") == mount_cache_dir("/c", "/mnt/a/")
    assert mount_cache_dir("/c", "/mnt/a").startswith("/c/mount-")


def test_every_program_gets_at_most_half_the_free_disk_and_leaves_the_other_half_free():
    from mountctl.mounts.cache import plan_cache

    plan, note = plan_cache("/c", 5000, free=1000)
    assert plan is not None and plan.size_mb == 500 and plan.keep_free_mb == 500
    assert "capped at 500 MiB" in note and "5000 MiB asked" in note
    plan, note = plan_cache("/c", 100, free=1000)
    assert plan is not None and plan.size_mb == 100 and plan.keep_free_mb == 500 and note == ""


def test_a_disk_too_small_for_a_cache_says_so_instead_of_caching():
    from mountctl.mounts.cache import plan_cache

    plan, note = plan_cache("/small", 200, free=64)
    assert plan is None and "no data cache" in note and "/small has 64 MiB free" in note


def test_the_automatic_size_that_turns_the_cache_off_says_so(tmp_path, monkeypatch, caplog):
    import mountctl.mounts.cache
    from mountctl.mounts.cache import cache_options

    monkeypatch.setattr(mountctl.mounts.cache, "free_mb", lambda path: 64)
    with caplog.at_level("WARNING", logger="mountctl"):
        assert cache_options(147 * MIB, str(tmp_path)) == {}
    assert [r.getMessage() for r in caplog.records if "no data cache" in r.getMessage()]
