"""One function decides every read-ahead of a mountpoint-kind run: never two layers on the same shards."""

from __future__ import annotations

import pytest

from mountctl.pytorch.data.read_ahead.cache_warmer import warm_slots
from mountctl.pytorch.data.read_ahead.next_shards import in_memory_ahead
from mountctl.pytorch.data.read_ahead.policy import choose_read_ahead

GIB = 1 << 30


@pytest.mark.parametrize("asked", [None, True, False])
@pytest.mark.parametrize("cache", [True, False])
def test_at_most_one_layer_reads_a_reader_s_next_shards(asked, cache):
    choice = choose_read_ahead(asked, cache=cache, readers=2, memory=24 * GIB)
    assert not (choice.in_memory and choice.into_cache)
    assert choice.into_cache == (asked is True and cache)  # the warmer needs a cache to warm
    assert choice.in_memory == (asked is not False and not choice.into_cache)


def test_the_memory_bound_counts_the_files_each_reader_holds_open_ahead(monkeypatch):
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "4")
    default = choose_read_ahead(None, cache=True, readers=2, memory=24 * GIB)
    assert default.readers_on_node == 8 and default.open_ahead() == in_memory_ahead(8, 24 * GIB).shards
    assert choose_read_ahead(True, cache=True, readers=2, shards_ahead=2, memory=24 * GIB).open_ahead() == 2
    assert choose_read_ahead(False, cache=True, readers=2, memory=24 * GIB).open_ahead() == 0



def test_a_reader_counts_its_ranks_workers_only_where_the_request_did_not(monkeypatch):
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    unsaid = choose_read_ahead(None, cache=True, memory=24 * GIB)
    assert unsaid.in_memory_plan(8) == in_memory_ahead(16, 24 * GIB)  # 8 workers in each of 2 ranks
    said = choose_read_ahead(None, cache=True, readers=2, memory=24 * GIB)
    assert said.in_memory_plan(8) == in_memory_ahead(4, 24 * GIB) != unsaid.in_memory_plan(8)
    assert choose_read_ahead(False, cache=True, memory=24 * GIB).in_memory_plan(8).shards == 0


def test_the_nodes_warm_slots_are_sized_by_every_rank_s_readers(monkeypatch):
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    choice = choose_read_ahead(True, cache=True, readers=4, memory=24 * GIB)
    assert choice.warm_slots == warm_slots(8) == 8

@pytest.mark.parametrize(("per_file", "listed", "asked", "warm"), [
    (True, True, None, None),  # a per-file dataset mounted from its list: mount-s3 warms it whole
    (True, True, False, "off"),  # --no-read-ahead turns that off too
    (True, False, None, "off"),  # a plain mount: the warm's walk would list every folder
    (False, True, None, "off"),  # shards never get it: their readers read ahead themselves
])
def test_mount_s3_warms_only_a_per_file_dataset_mounted_from_its_list(per_file, listed, asked, warm):
    choice = choose_read_ahead(asked, cache=True, per_file=per_file, listed=listed, memory=24 * GIB)
    assert choice.mount_warm == warm


def test_the_wide_first_get_follows_files_read_whole():
    assert choose_read_ahead(None, cache=True, whole_files=True, memory=GIB).whole_files
    assert not choose_read_ahead(None, cache=True, memory=GIB).whole_files  # map-style reads stay cheap
