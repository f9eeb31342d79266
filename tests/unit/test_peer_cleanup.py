"""Which /dev/shm segments a peer cell may remove: only its own Streaming prefix, only this user's.

A directory stands in for /dev/shm: the selection is a pure function of names, owner records and
owners, and a real second Streaming job holding live segments cannot be arranged in a unit test.
"""

from __future__ import annotations

import struct

import pytest

from benchmarks.harness import peers
from benchmarks.harness.peer_cleanup import remove_streaming_segments, streaming_segments
from mountctl.pytorch.errors import DatasetError

pytestmark = pytest.mark.unit


def locals_record(*dirs: str, prefix: int) -> bytes:
    text = ("\0".join(dirs) + f"\0{prefix}").encode()
    return struct.pack("<i", 4 + len(text)) + text


def test_only_the_cells_own_prefix_is_selected(tmp_path):
    shm = tmp_path / "shm"
    shm.mkdir()
    (shm / "000000_locals").write_bytes(locals_record("/other/job/cache", prefix=0))
    (shm / "000000_barrier").write_bytes(b"x")
    (shm / "000001_locals").write_bytes(locals_record("/tmp/mountctl-streaming-cell-a/cache", prefix=1))
    (shm / "000001_barrier").write_bytes(b"x")
    (shm / "000001_shard_states").write_bytes(b"x")
    (shm / "unrelated").write_bytes(b"x")
    mine = streaming_segments("/tmp/mountctl-streaming-cell-a/cache", str(shm))
    assert [p.rsplit("/", 1)[1] for p in mine] == ["000001_barrier", "000001_locals", "000001_shard_states"]
    assert remove_streaming_segments("/tmp/mountctl-streaming-cell-a/cache", str(shm)) == 3
    assert sorted(p.name for p in shm.iterdir()) == ["000000_barrier", "000000_locals", "unrelated"]


def test_no_segments_and_no_directory_select_nothing(tmp_path):
    assert streaming_segments("/tmp/x", str(tmp_path)) == []
    assert streaming_segments("/tmp/x", str(tmp_path / "absent")) == []


def test_a_peer_that_yields_no_batches_fails_with_a_clear_error(monkeypatch, tmp_path):
    """No real library yields zero batches from a valid copy on demand, so an empty dataset stands in for it."""
    monkeypatch.setattr(peers, "open_peer_dataset", lambda *a, **k: [])
    request = {"peer": "litdata", "uri": "s3://b/p/", "mode": "loader", "num_workers": 0, "batch_size": 4,
               "image_size": 32, "warmup_batches": 1, "seed": 0, "epochs": 1, "num_images": 8, "checksum": "0",
               "total_bytes": 100, "cache": str(tmp_path / "cache")}
    with pytest.raises(DatasetError, match="yielded no batches"):
        peers.read_epochs(request, None)  # type: ignore[arg-type]
