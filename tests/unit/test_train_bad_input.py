"""`resnet.py train` refuses bad flags in one line, exit 1, before any S3 request or training, creating nothing.

No S3: every check here runs in ``TrainConfig`` or the parser, before the endpoint is asked anything
(the URI names a bucket nobody serves, so a check that came later would fail differently).
"""

from __future__ import annotations

import io
import os
import subprocess
import sys
import tarfile

import pytest

from mountctl import InvalidSpec
from mountctl.pytorch.data.datasets.shards import read_shard
from mountctl.pytorch.errors import CheckpointError, TruncatedShard
from mountctl.pytorch.training.trainer import TrainConfig
from resnet import main

URI = "s3://no-server-asked/data/"


def run(capsys, *flags: str) -> str:
    """The CLI's exit status must be 1 and its stderr one line; return that line."""
    status = main(["train", URI, *flags])
    err = capsys.readouterr().err
    assert status == 1, err
    assert len(err.strip().splitlines()) == 1, err
    return err.strip()


def test_sample_log_in_a_missing_directory_is_refused_and_the_directory_not_created(tmp_path, capsys):
    missing = tmp_path / "nonexistent-dir"
    line = run(capsys, "--sample-log", str(missing / "x.log"))
    assert "does not exist" in line and str(missing) in line
    assert not missing.exists()


def test_sample_log_under_a_file_is_refused(tmp_path, capsys):
    (tmp_path / "plain").write_text("x")
    assert "is not a directory" in run(capsys, "--sample-log", str(tmp_path / "plain" / "x.log"))


def test_sample_log_that_is_a_directory_is_refused(tmp_path, capsys):
    assert "is a directory" in run(capsys, "--sample-log", str(tmp_path))


def test_sample_log_that_cannot_be_written_is_refused_and_leaves_nothing(tmp_path, capsys):
    if os.geteuid() == 0:
        where = "/sys/mountctl-sample.log"  # sysfs: even root cannot create a file there
    else:
        locked = tmp_path / "locked"
        locked.mkdir(mode=0o500)
        where = str(locked / "x.log")
    assert "cannot be written" in run(capsys, "--sample-log", where)
    assert not os.path.exists(where)


def test_a_writable_sample_log_path_passes_and_is_not_created_by_the_check(tmp_path):
    TrainConfig(uri=URI, sample_log=str(tmp_path / "x.log"))
    assert not (tmp_path / "x.log").exists()


def test_gpu_accelerator_without_a_gpu_is_one_line(capsys):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU: --accelerator gpu is valid here")
    assert "--accelerator gpu: no CUDA GPU" in run(capsys, "--accelerator", "gpu")


def test_checkpoint_every_zero_steps_means_off():
    assert TrainConfig(uri=URI, checkpoint_every_n_steps=0).checkpoint_every_n_steps == 0
    with pytest.raises(InvalidSpec, match="cannot be negative"):
        TrainConfig(uri=URI, checkpoint_every_n_steps=-1)


def test_unknown_checkpoint_scheme_lists_every_spelling(capsys):
    line = run(capsys, "--checkpoint-dir", "bogus://x")
    for spelling in ("s3://", "fsspec+s3://", "mount://", "mount+PROGRAM://", "local path"):
        assert spelling in line
    with pytest.raises(CheckpointError):
        TrainConfig(uri=URI, checkpoint_dir="bogus://x")


@pytest.mark.parametrize("argv", [["train", URI, "--batch-size", "x"], ["train"], ["nonsense"]])
def test_usage_errors_exit_1_in_one_line(argv, capsys):
    with pytest.raises(SystemExit) as info:
        main(argv)
    err = capsys.readouterr().err
    assert info.value.code == 1 and len(err.strip().splitlines()) == 1 and "--help" in err, err


def test_truncated_shard_message_reads_cleanly():
    data = io.BytesIO()
    with tarfile.open(fileobj=data, mode="w") as tar:
        for name, body in (("a.jpg", b"\xff\xd8\xff" + bytes(3000)), ("a.cls", b"1")):
            info = tarfile.TarInfo(name)
            info.size = len(body)
            tar.addfile(info, io.BytesIO(body))
    cut = io.BytesIO(data.getvalue()[:1200])  # inside the first member's data
    with pytest.raises(TruncatedShard) as info:
        list(read_shard("s.tar", cut, first_index=0, start=0, stop=1, expected=1))
    message = str(info.value)
    assert "((" not in message and "))" not in message and "<_io" not in message, message
    assert "shard s.tar is truncated" in message and "resnet.py make" in message


def test_a_store_that_does_not_answer_fails_before_torch_or_lightning_loads():
    """A bad endpoint or dataset is told in well under a second: torch, torchvision and Lightning (5 s of CPU)
    load only once the dataset is there.  A real refused connection (nothing listens on port 1), in a fresh
    interpreter so that nothing else has imported them."""
    code = ("import sys; from mountctl.pytorch.cli import main; "
            "status = main(['train', 's3://no-server-asked/data/', '--source-kind', 's3io']); "
            "print(status, sorted(m for m in ('torch', 'torchvision', 'lightning') if m in sys.modules))")
    env = dict(os.environ, AWS_ENDPOINT_URL="http://127.0.0.1:1", AWS_ACCESS_KEY_ID="unit",
               AWS_SECRET_ACCESS_KEY="unit-secret", AWS_DEFAULT_REGION="us-east-1")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env=env)
    assert "nothing answers at S3 endpoint http://127.0.0.1:1" in done.stderr, done.stderr[-2000:]
    assert done.stdout.split() == ["1", "[]"], done.stdout


@pytest.mark.parametrize("argv, message", [
    (["train", "s3://bkt/p/", "--source-kind", "s3io", "--from-index"], "only --source-kind mountpoint"),
    (["train", "s3://bkt/p/", "--source-kind", "fsspec", "--from-index"], "only --source-kind mountpoint"),
    (["train", "s3://bkt/p/", "--backend", "rclone", "--from-index"], "mount-s3 only: drop --backend rclone"),
    (["bench", "s3://bkt/p/", "--source-kind", "s3io", "--from-index"], "only --source-kind mountpoint"),
    (["bench", "s3://bkt/p/", "--source-kind", "mountpoint", "--backend", "s3fs", "--from-index"],
     "mount-s3 only: drop --backend s3fs"),
])
def test_from_index_where_it_cannot_apply_is_refused_at_the_dry_run(argv, message):
    """It was ignored for s3io and fsspec, and refused for rclone or s3fs only once the index had been loaded;
    the dry run asks S3 nothing (no server here)."""
    from resnet import configure

    with pytest.raises(InvalidSpec, match=message):
        configure(argv)
