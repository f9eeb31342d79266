"""The mount-s3 checkpoint route's saves: the previous checkpoint stays until the new one is whole.

mount-s3 is not installable here, so a local directory stands in for its mount: the test makes
``os.rename``/``os.replace`` fail and refuses to open an existing file for writing, the two things a
mount-s3 mount refuses (it writes new files only, sequentially).  A kill during a save is stood in for
by what it leaves: a version file shorter than its name says (mount-s3 uploads what it got on close).
"""

from __future__ import annotations

import builtins
import errno
import os

import pytest

from mountctl.pytorch.training.versioned import newest_whole, save_versioned, versioned_name, whole_versions

NAME = "last.ckpt"


@pytest.fixture
def no_rename_dir(tmp_path, monkeypatch):
    """``tmp_path`` behaving like a mount-s3 mount: no rename, no overwrite of an existing file."""
    def refuse(*args, **kwargs):
        raise OSError(errno.EPERM, "mount-s3 cannot rename")

    real_open = builtins.open

    def open_new_only(file, mode="r", *args, **kwargs):
        if any(c in mode for c in "wa+") and os.path.exists(file):
            raise OSError(errno.EPERM, f"mount-s3 cannot overwrite {file}")
        return real_open(file, mode, *args, **kwargs)

    monkeypatch.setattr(os, "rename", refuse)
    monkeypatch.setattr(os, "link", refuse)
    monkeypatch.setattr(os, "replace", refuse)
    monkeypatch.setattr(builtins, "open", open_new_only)
    return str(tmp_path)


def read(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def test_each_save_is_a_new_version_and_the_older_one_goes_after_it(no_rename_dir):
    first = save_versioned(no_rename_dir, NAME, b"one" * 100)
    second = save_versioned(no_rename_dir, NAME, b"two" * 50)
    assert first != second and not os.path.exists(first)
    assert newest_whole(no_rename_dir, NAME) == second and read(second) == b"two" * 50
    assert os.listdir(no_rename_dir) == [os.path.basename(second)]


def test_a_save_killed_half_way_leaves_the_previous_checkpoint_loadable(no_rename_dir):
    whole = save_versioned(no_rename_dir, NAME, b"A" * 1000)
    cut = os.path.join(no_rename_dir, versioned_name(NAME, 2, 5000))  # what a kill during save 2 leaves
    with open(cut, "xb") as f:
        f.write(b"B" * 1234)
    assert newest_whole(no_rename_dir, NAME) == whole
    third = save_versioned(no_rename_dir, NAME, b"C" * 10)  # the next save goes past it and clears it
    assert newest_whole(no_rename_dir, NAME) == third and sorted(os.listdir(no_rename_dir)) == [
        os.path.basename(third)]


def test_a_save_that_fails_while_writing_removes_its_partial_file_and_keeps_the_previous(no_rename_dir,
                                                                                       monkeypatch):
    whole = save_versioned(no_rename_dir, NAME, b"A" * 1000)

    class Broken:
        """Data whose bytes cannot be had: the write fails as an I/O error through the mount would."""

        def __getitem__(self, item):
            raise OSError(errno.EIO, "Input/output error")

        def __len__(self):
            return 100

    monkeypatch.setattr("mountctl.pytorch.training.versioned.memoryview", lambda data: Broken(), raising=False)
    with pytest.raises(OSError, match="Input/output"):
        save_versioned(no_rename_dir, NAME, b"x")
    assert os.listdir(no_rename_dir) == [os.path.basename(whole)] and newest_whole(no_rename_dir, NAME) == whole


def test_a_plain_last_ckpt_from_before_counts_as_the_oldest_and_is_replaced(no_rename_dir):
    with open(os.path.join(no_rename_dir, NAME), "xb") as f:
        f.write(b"old")
    assert newest_whole(no_rename_dir, NAME) == os.path.join(no_rename_dir, NAME)
    new = save_versioned(no_rename_dir, NAME, b"new")
    assert os.listdir(no_rename_dir) == [os.path.basename(new)]


def test_an_s3_listing_is_read_by_the_same_rule():
    sizes = {"last.ckpt.v3-10": 10, "last.ckpt.v4-99": 12, "last.ckpt.v2-5": 5, "other.ckpt": 1}
    assert whole_versions(sizes, NAME) == [(3, "last.ckpt.v3-10"), (2, "last.ckpt.v2-5")]
    assert whole_versions({}, NAME) == []


class _CutWriter:
    """A real file whose write fails half-way: an I/O error, or the process dying, in the middle of a save."""

    def __init__(self, f):
        self.f = f

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.f.close()

    def write(self, data):
        self.f.write(bytes(data[:len(data) // 2]))
        raise OSError(errno.EIO, "Input/output error")


def test_the_mount_s3_route_keeps_the_previous_checkpoint_when_a_save_fails(no_rename_dir, monkeypatch):
    """The route's own save and load (MountCheckpointIO), on the stand-in directory as its mount."""
    from types import SimpleNamespace

    import torch

    from mountctl import resolve
    from mountctl.pytorch.errors import CheckpointError
    from mountctl.pytorch.training.checkpoint_routes import MountCheckpointIO

    location = "mount+mount-s3://bkt/ckpt/"
    route = MountCheckpointIO(location, "s3://bkt/ckpt/", backend="mount-s3", settings=resolve())
    route._handle = SimpleNamespace(path=no_rename_dir, backend="mount-s3")  # the mount itself is the stand-in
    route.save_checkpoint({"global_step": 3, "w": torch.ones(4)}, location + NAME)
    real_open = builtins.open
    monkeypatch.setattr(builtins, "open", lambda file, mode="r", *a, **k: _CutWriter(real_open(file, mode, *a, **k))
                        if "w" in mode or "x" in mode else real_open(file, mode, *a, **k))
    with pytest.raises(CheckpointError, match="partial file was removed"):
        route.save_checkpoint({"global_step": 6, "w": torch.zeros(4)}, location + NAME)
    monkeypatch.setattr(builtins, "open", real_open)
    assert route.load_checkpoint(location + NAME)["global_step"] == 3
