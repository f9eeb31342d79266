"""open_resilient retries only what a remount causes, and a file that is really gone fails at once."""

from __future__ import annotations

import errno
import time

import pytest

from mountctl import open_resilient
from mountctl.resilient import RETRYABLE_ERRNOS, ResilientReader


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


def test_a_deleted_file_fails_at_once_with_a_clear_error(data_file):
    reader = ResilientReader(str(data_file), retry_for_s=120)
    data_file.unlink()
    reader._drop()  # as after a transport error: the next read reopens
    began = time.monotonic()
    with pytest.raises(FileNotFoundError, match="deleted while it was being read"):
        reader.read(10)
    assert time.monotonic() - began < 1


def test_an_object_s3_no_longer_has_fails_at_once(data_file):
    reader = ResilientReader(str(data_file), still_exists=lambda: False)
    with pytest.raises(FileNotFoundError, match="deleted"):
        reader._retryable(OSError(errno.EIO, "Input/output error"))


def test_an_unreachable_s3_keeps_the_retry_going(data_file):
    def unreachable() -> bool:
        raise ConnectionError("S3 is restarting")

    assert ResilientReader(str(data_file), still_exists=unreachable)._retryable(OSError(errno.EIO, "x"))
