"""The mountpoint kind's options: one frozen value, checked where it is made, that train and bench build alike.

No S3: every check here runs in ``MountpointOptions`` or a config's ``__post_init__``, before any request.
"""

from __future__ import annotations

import dataclasses

import pytest

from benchmarks.harness.loader import BenchConfig
from mountctl import InvalidSpec
from mountctl.pytorch.data.sources import MountpointOptions
from mountctl.pytorch.training.trainer import TrainConfig
from resnet import configure, main

URI = "s3://no-server-asked/data/"
FLAGS = ["--backend", "mount-s3", "--mount-dir", "/mnt/data", "--no-cache", "--cache-dir", "/var/cache/m",
         "--cache-size-mb", "512", "--no-read-ahead", "--from-index"]
ASKED = MountpointOptions(backend="mount-s3", mount_dir="/mnt/data", cache=False, cache_dir="/var/cache/m",
                          cache_size_mb=512, read_ahead=False, from_index=True)


@pytest.mark.parametrize("command", ["train", "bench"])
def test_each_mountpoint_flag_lands_in_the_one_options_value(command):
    assert configure([command, URI, "--source-kind", "mountpoint", *FLAGS])[1].mountpoint == ASKED
    assert configure([command, URI, "--source-kind", "mountpoint"])[1].mountpoint == MountpointOptions()


def test_the_options_are_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        ASKED.cache = True  # type: ignore[misc]


@pytest.mark.parametrize("fields, message", [
    ({"backend": "nfs"}, "unknown mount backend 'nfs': choose one of auto, "),
    ({"cache_size_mb": 0}, "--cache-size-mb must be positive, not 0"),
    ({"backend": "rclone", "from_index": True}, "--from-index mounts with mountctl's mount-s3 only: drop --backend "
                                                "rclone, or drop --from-index"),
])
def test_a_bad_option_is_refused_where_the_options_are_made(fields, message):
    with pytest.raises(InvalidSpec) as refused:
        MountpointOptions(**fields)
    assert str(refused.value).startswith(message), refused.value


@pytest.mark.parametrize("command", ["train", "bench"])
def test_a_cache_size_of_zero_on_the_command_line_is_one_line(command, capsys):
    assert main([command, URI, "--source-kind", "mountpoint", "--cache-size-mb", "0"]) == 1
    assert capsys.readouterr().err == f"resnet.py {command}: error: --cache-size-mb must be positive, not 0\n"


def _refusal(config: type, **fields: object) -> str:
    with pytest.raises(InvalidSpec) as refused:
        config(uri=URI, **fields)
    return str(refused.value)


@pytest.mark.parametrize("fields, message", [
    ({"source_kind": "nfs"}, "unknown source kind 'nfs': choose one of mountpoint, s3io, fsspec"),
    ({"source_kind": "s3io", "mountpoint": MountpointOptions(from_index=True)},
     "--from-index mounts the objects the index lists, which only --source-kind mountpoint does: drop --from-index "
     "for --source-kind s3io"),
])
def test_train_and_bench_configs_refuse_a_source_choice_in_the_same_words(fields, message):
    assert _refusal(TrainConfig, **fields) == _refusal(BenchConfig, **fields) == message


def test_options_another_kind_has_no_use_for_are_accepted_and_left_alone():
    """Only ``from_index`` asks something of the kind itself; the cache and read-ahead only tune a mount."""
    tuned = MountpointOptions(backend="rclone", cache=False, read_ahead=True)
    assert TrainConfig(uri=URI, source_kind="fsspec", mountpoint=tuned).mountpoint is tuned
    assert BenchConfig(uri=URI, source_kind="s3io", mountpoint=tuned).mountpoint is tuned
