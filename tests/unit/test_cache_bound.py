"""The data cache's size bound, from the dataset's bytes and the disk's free bytes."""

from __future__ import annotations

from mountctl.cache import MIN_CACHE_MB, cache_bound_mb, mount_cache_dir

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
