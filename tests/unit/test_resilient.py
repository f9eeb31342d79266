"""open_resilient retries only what a remount causes, and a file that is really gone fails at once."""

from __future__ import annotations

import errno
import time

import pytest

from mountctl import open_resilient
from mountctl.mounts.resilient import RETRYABLE_ERRNOS, ResilientReader


@pytest.fixture
def data_file(tmp_path):
    path = tmp_path / "shard.tar"
    path.write_bytes(bytes(range(256)) * 64)
    return path


def test_reads_like_a_plain_file(data_file):
    with open_resilient(data_file) as f:
        f.seek(100)
        assert f.read(10) == bytes(range(100, 110))


@pytest.mark.parametrize("code", [errno.EAGAIN, errno.ETIMEDOUT, errno.EACCES])
def test_other_errors_are_not_retried(data_file, code):
    reader = ResilientReader(str(data_file))
    assert not reader._retryable(OSError(code, "x"))


@pytest.mark.parametrize("code", sorted(RETRYABLE_ERRNOS))
def test_remount_errors_are_retried(data_file, code):
    assert ResilientReader(str(data_file))._retryable(OSError(code, "x"))


def test_retryable_set_is_exactly_the_documented_one():
    assert RETRYABLE_ERRNOS == {errno.ENOTCONN, errno.ECONNABORTED, errno.EIO, errno.ESTALE}


def test_a_file_gone_from_its_mount_fails_at_once_with_a_clear_error(data_file):
    reader = ResilientReader(str(data_file), retry_for_s=120)
    data_file.unlink()
    reader._drop()  # as after a transport error: the next read reopens
    began = time.monotonic()
    with pytest.raises(FileNotFoundError, match="disappeared from its mount") as raised:
        reader.read(10)
    assert "deleted while" not in str(raised.value)  # nobody asked the store: no claim that S3 deleted it
    assert time.monotonic() - began < 1


def test_an_object_s3_no_longer_has_fails_at_once(data_file):
    reader = ResilientReader(str(data_file), still_exists=lambda: False)
    with pytest.raises(FileNotFoundError, match="deleted"):
        reader._retryable(OSError(errno.EIO, "Input/output error"))


def test_an_unreachable_s3_keeps_the_retry_going(data_file):
    def unreachable() -> bool:
        raise ConnectionError("S3 is restarting")

    assert ResilientReader(str(data_file), still_exists=unreachable)._retryable(OSError(errno.EIO, "x"))


def test_enoent_while_the_store_is_unreachable_is_waited_out_not_called_deleted(data_file):
    """s3fs answers ENOENT while its store is down: with a store that raises, the read waits and then succeeds."""
    reader = ResilientReader(str(data_file), retry_for_s=30, still_exists=lambda: (_ for _ in ()).throw(
        ConnectionError("connection refused")))
    assert reader._retryable(OSError(errno.ENOENT, "No such file or directory"))


def test_enoent_for_an_object_the_store_still_has_is_retried(data_file):
    assert ResilientReader(str(data_file), still_exists=lambda: True)._retryable(OSError(errno.ENOENT, "x"))


def test_enoent_for_an_object_the_store_says_is_gone_fails_as_deleted(data_file):
    with pytest.raises(FileNotFoundError, match="deleted while it was being read"):
        ResilientReader(str(data_file), still_exists=lambda: False)._retryable(OSError(errno.ENOENT, "x"))


def test_open_during_an_outage_is_deferred_to_the_first_read(tmp_path):
    """The file appears only once the 'store' is back: the open is retried, not failed."""
    path = tmp_path / "late.bin"
    calls = []

    def still_exists() -> bool:
        calls.append(1)
        if len(calls) == 3:
            path.write_bytes(b"payload")
        raise ConnectionError("store down")

    with open_resilient(path, retry_for_s=10, still_exists=still_exists) as f:
        assert f.read() == b"payload"


def test_a_missing_file_without_a_store_to_ask_fails_at_open(tmp_path):
    with pytest.raises(FileNotFoundError):
        open_resilient(tmp_path / "absent.bin")


def test_giving_up_after_the_bound_names_the_bound_and_how_to_raise_it(data_file):
    reader = ResilientReader(str(data_file), retry_for_s=0.3)
    reader._file = None

    def failing(_f):
        raise OSError(errno.EIO, "Input/output error")

    with pytest.raises(OSError, match="MOUNTCTL_OUTAGE_BOUND_S") as raised:
        reader._with_retry(failing)
    assert raised.value.errno == errno.EIO


def test_the_outage_bound_is_configurable(monkeypatch, data_file):
    from mountctl.mounts.resilient import outage_bound_s

    assert outage_bound_s() == 120.0
    monkeypatch.setenv("MOUNTCTL_OUTAGE_BOUND_S", "300")
    assert outage_bound_s() == 300.0 and ResilientReader(str(data_file))._retry_for_s == 300.0
    monkeypatch.setenv("MOUNTCTL_OUTAGE_BOUND_S", "soon")
    with pytest.raises(ValueError, match="MOUNTCTL_OUTAGE_BOUND_S"):
        outage_bound_s()


def test_a_stalled_read_is_reported_once_and_its_recovery_once(data_file, caplog):
    from mountctl.mounts import resilient

    watch = resilient._StallWatch(notice_s=0.3)
    reader = ResilientReader(str(data_file))
    with caplog.at_level("WARNING", logger="mountctl"):
        token = watch.begin(reader.name)
        time.sleep(1.2)  # blocked, as a read inside rclone waiting for the store
        watch.end(token, ok=True)
        fast = watch.begin(reader.name)
        watch.end(fast, ok=True)
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 2, lines
    assert "unreachable" in lines[0] and "retrying" in lines[0] and "MOUNTCTL_OUTAGE_BOUND_S" in lines[0]
    assert "answering again" in lines[1] and "resumed after" in lines[1]


def _stall(watch, seconds: float) -> None:
    token = watch.begin("/mnt/data/a.bin")
    time.sleep(seconds)  # blocked, as a read inside the mount program waiting for the store
    watch.end(token, ok=True)


def test_a_stall_just_after_reads_resumed_is_the_same_outage_and_is_not_reported_again(caplog):
    # After an outage the program's failed requests come back through their retry backoff, so a read soon
    # after the first resumed one may wait again (seen in CI: two pairs of lines for one 8 s outage).
    from mountctl.mounts import resilient

    watch = resilient._StallWatch(notice_s=0.3, same_outage_s=1.5)
    with caplog.at_level("WARNING", logger="mountctl"):
        _stall(watch, 0.9)  # the outage: reported, and its resume
        _stall(watch, 0.9)  # the retries catching up: the same outage
        time.sleep(1.6)
        _stall(watch, 0.9)  # later: another outage, reported
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 4, lines
    assert ["unreachable" in lines[0], "answering again" in lines[1]] == [True, True]
    assert ["unreachable" in lines[2], "answering again" in lines[3]] == [True, True]


def test_a_long_stall_just_after_reads_resumed_is_reported_all_the_same(caplog):
    from mountctl.mounts import resilient

    watch = resilient._StallWatch(notice_s=0.3, same_outage_s=0.6)
    with caplog.at_level("WARNING", logger="mountctl"):
        _stall(watch, 0.8)
        _stall(watch, 1.6)  # past notice_s + same_outage_s: the store went again, or never came back
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 4, lines
    assert "unreachable" in lines[2] and "answering again" in lines[3]
