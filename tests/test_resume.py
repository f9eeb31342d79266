"""Mid-epoch checkpoints and exact resume, on any layout, counted with `--sample-log`.

Each test SIGKILLs a real training run (all ranks: the whole process group) once a checkpoint exists,
resumes it with `--resume`, and audits the sample logs: the lines logged before the kill with
``global_step < resumed_from_step`` plus those logged after the resume are the epoch's samples,
each exactly once.  Tiny on purpose: ResNet-18, 32 px, tens of samples, gloo on CPU.
"""

from __future__ import annotations

import collections
import glob
import io
import os
import signal
import socket
import subprocess
import sys
import time

import pytest
import torch

from conftest import fuse_mounts_under, require_fuse
from torch_support import REPO, RESNET_PY, last_json_line, make_tiny_dataset

TINY = ["--arch", "resnet18", "--precision", "32", "--no-progress", "--accelerator", "cpu", "--batch-size", "4",
        "--shuffle-buffer", "8"]


def ddp(ranks: int) -> list[str]:
    return ["--devices", str(ranks), "--strategy", "ddp"] if ranks > 1 else ["--devices", "1"]


def start(argv: list[str], env: dict | None = None) -> subprocess.Popen:
    """A training run in its own process group, so that one SIGKILL reaches every rank."""
    return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO,
                            env=env, start_new_session=True)


def finish(process: subprocess.Popen, timeout: float = 300) -> dict:
    out, err = process.communicate(timeout=timeout)
    assert process.returncode == 0, err[-3000:]
    return last_json_line(out)


def kill_when(process: subprocess.Popen, ready, timeout: float = 300) -> None:
    """SIGKILL the run's whole process group as soon as ``ready()``; fail if it ends first."""
    deadline = time.monotonic() + timeout
    while not ready():
        assert process.poll() is None, f"the run ended before it could be killed:\n{process.stderr.read()[-3000:]}"
        assert time.monotonic() < deadline, "the run never reached the point to kill it at"
        time.sleep(0.005)
    os.killpg(process.pid, signal.SIGKILL)
    process.communicate(timeout=60)


def train_argv(uri: str, ckpt: str, log: str, *extra: str) -> list[str]:
    return [sys.executable, RESNET_PY, "train", uri, *TINY, "--checkpoint-dir", ckpt, "--sample-log", log, *extra]


class SampleLogs:
    """Every rank's sample log (FILE and FILE.rank<N>), read from where the last ``mark`` left off."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.offsets: dict[str, int] = {}

    def read_new(self) -> list[tuple[str, int, int, int]]:
        rows = []
        for name in sorted(glob.glob(self.path) + glob.glob(self.path + ".rank*")):
            with open(name, encoding="utf-8") as f:
                f.seek(self.offsets.get(name, 0))
                text = f.read()
                self.offsets[name] = f.tell()
            for line in text.splitlines():
                key, epoch, step, rank = line.split()
                rows.append((key, int(epoch), int(step), int(rank)))
        return rows


def audit(before: list, after: list, resumed_from_step: int, num_images: int) -> dict:
    """Assert each sample of epoch 0 trained exactly once across the kill; return the counts."""
    kept = [row for row in before if row[2] < resumed_from_step] + after
    counts = collections.Counter(row[0] for row in kept if row[1] == 0)
    assert len(counts) == num_images, f"{num_images - len(counts)} samples were never trained"
    assert set(counts.values()) == {1}, {k: n for k, n in counts.items() if n > 1}
    steps_per_rank = collections.Counter()
    for rank in {row[3] for row in after}:
        steps_per_rank[rank] = len({row[2] for row in after if row[3] == rank and row[1] == 0})
    assert len(set(steps_per_rank.values())) == 1, f"ranks ran unequal step counts: {steps_per_rank}"
    result = {"logged_before_kill": len(before), "kept_before_kill": len(kept) - len(after),
              "retrained": len(before) - (len(kept) - len(after)), "after_resume": len(after),
              "distinct": len(counts), "resumed_from_step": resumed_from_step}
    print(f"\nAUDIT {result}")
    return result


def checkpoint_step(path: str) -> int:
    return int(torch.load(path, map_location="cpu", weights_only=True)["global_step"])


def kill_resume_audit(uri: str, tmp_path, *, before: list[str], after: list[str], num_images: int,
                      env: dict | None = None, kill_at_step: int = 3) -> tuple[dict, dict]:
    ckpt, log = str(tmp_path / "ckpt"), str(tmp_path / "samples.log")
    last = os.path.join(ckpt, "last.ckpt")
    run = start(train_argv(uri, ckpt, log, "--checkpoint-every-n-steps", "3", *before), env)
    kill_when(run, lambda: os.path.exists(last) and checkpoint_step(last) >= kill_at_step)
    logs = SampleLogs(log)
    killed = logs.read_new()
    summary = finish(start(train_argv(uri, ckpt, log, "--checkpoint-every-n-steps", "3", "--resume", *after), env))
    assert summary["resumed_from_step"] is not None and summary["resumed_from_step"] >= kill_at_step
    return audit(killed, logs.read_new(), summary["resumed_from_step"], num_images), summary


@pytest.mark.parametrize("kind", ["mountpoint", "s3io"])
def test_kill_in_mid_epoch_then_resume_trains_every_sample_once(kind, s3_env, bucket, mount_root, tmp_path):
    if kind == "mountpoint":
        require_fuse()
    uri = f"s3://{bucket}/data/"
    make_tiny_dataset(uri, num_images=48, shard_size="12KB")
    layout = ["--source-kind", kind, "--backend", "rclone", "--mount-dir", str(mount_root / "m"),
              "--num-workers", "2"]
    counts, summary = kill_resume_audit(uri, tmp_path, before=layout, after=layout, num_images=48)
    assert counts["resumed_from_step"] < 12 and summary["global_step"] == 12  # 48 samples in batches of 4


@pytest.mark.parametrize("before,after", [((2, 2), (1, 3)), ((1, 3), (2, 1))], ids=["2x2-to-1x3", "1x3-to-2x1"])
def test_elastic_resume_on_other_ranks_and_workers_trains_every_sample_once(before, after, s3_env, bucket,
                                                                            tmp_path):
    uri = f"s3://{bucket}/data/"
    make_tiny_dataset(uri, num_images=56, shard_size="12KB")
    layouts = [["--source-kind", "fsspec", *ddp(ranks), "--num-workers", str(workers)] for ranks, workers in
               (before, after)]
    counts, summary = kill_resume_audit(uri, tmp_path, before=layouts[0], after=layouts[1], num_images=56)
    assert summary["world_size"] == after[0]


@pytest.mark.parametrize("where", ["path", "s3"])
def test_kill_during_a_checkpoint_save_leaves_the_previous_last_ckpt(where, s3_env, s3, bucket, tmp_path):
    """On a path the save is caught while its partial file exists; on S3 while its multipart upload is open."""
    uri = f"s3://{bucket}/data/"
    make_tiny_dataset(uri, num_images=48, shard_size="12KB")
    ckpt, log = str(tmp_path / "ckpt"), str(tmp_path / "samples.log")
    if where == "s3":
        ckpt = f"s3://{bucket}/ckpt/"

        def stored() -> bytes | None:
            try:
                return s3.get_object(Bucket=bucket, Key="ckpt/last.ckpt")["Body"].read()
            except s3.exceptions.NoSuchKey:
                return None

        def saving() -> bool:
            return bool(s3.list_multipart_uploads(Bucket=bucket, Prefix="ckpt/last.ckpt").get("Uploads"))
    else:
        last, partial = os.path.join(ckpt, "last.ckpt"), os.path.join(ckpt, ".last.ckpt.partial")

        def stored() -> bytes | None:
            return open(last, "rb").read() if os.path.exists(last) else None  # noqa: SIM115

        def saving() -> bool:
            return os.path.exists(partial)
    # ResNet-50 (about 190 MB with its momentum) so that the save takes long enough to be caught in.
    argv = train_argv(uri, ckpt, log, "--source-kind", "s3io", "--num-workers", "1", "--checkpoint-every-n-steps",
                      "2")
    argv[argv.index("resnet18")] = "resnet50"
    run = start(argv)
    have_one = False

    def second_save_under_way() -> bool:
        nonlocal have_one
        have_one = have_one or stored() is not None
        return have_one and saving()

    kill_when(run, second_save_under_way)
    assert saving(), "the kill came after the save had finished: nothing was tested"
    body = stored()
    assert body is not None
    step = int(torch.load(io.BytesIO(body), map_location="cpu", weights_only=True)["global_step"])  # whole
    assert step % 2 == 0 and step > 0
    logs = SampleLogs(log)
    killed = logs.read_new()
    argv.append("--resume")
    summary = finish(start(argv))
    assert summary["resumed_from_step"] == step
    audit(killed, logs.read_new(), step, 48)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.mark.parametrize("launcher", ["torchrun", "lightning"])
def test_two_nodes_train_every_sample_once_with_one_mount_each(launcher, s3_env, bucket, tmp_path):
    """Two launchers on this machine, each with its own MOUNTCTL_HOME, act as two nodes of 2 ranks:
    torchrun's c10d rendezvous, or Lightning's own settings (MASTER_ADDR, MASTER_PORT, NODE_RANK)."""
    require_fuse()
    uri = f"s3://{bucket}/data/"
    make_tiny_dataset(uri, num_images=64, shard_size="12KB")
    port, log = free_port(), str(tmp_path / "samples.log")
    train = [RESNET_PY, "train", uri, *TINY, "--source-kind", "mountpoint", "--backend", "rclone", "--devices", "2",
             "--num-nodes", "2", "--strategy", "ddp", "--num-workers", "1", "--sample-log", log]
    nodes = []
    for node in range(2):
        env = dict(os.environ, MOUNTCTL_HOME=str(tmp_path / f"node{node}"))
        if launcher == "torchrun":
            argv = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--nproc-per-node", "2",
                    "--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{port}", *train]
        else:
            env.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), NODE_RANK=str(node))
            argv = [sys.executable, *train]
        nodes.append(start(argv, env))
    outputs = [node.communicate(timeout=400) for node in nodes]
    for node, (_, err) in zip(nodes, outputs, strict=True):
        assert node.returncode == 0, err[-3000:]
    summary = last_json_line("".join(out for out, _ in outputs))
    assert summary["world_size"] == 4
    mount_pids = collections.Counter(rank["mount_pid"] for rank in summary["ranks"])
    assert None not in mount_pids and sorted(mount_pids.values()) == [2, 2], "one mount per node, two ranks each"
    rows = SampleLogs(log).read_new()
    counts = collections.Counter(row[0] for row in rows)
    assert len(counts) == 64 and set(counts.values()) == {1}
    assert {row[3] for row in rows} == {0, 1, 2, 3}
    print(f"\nAUDIT two nodes ({launcher}): {len(rows)} lines, {len(counts)} distinct, mounts {dict(mount_pids)}")
    for node in range(2):
        assert not fuse_mounts_under(str(tmp_path / f"node{node}"))


def test_two_kills_and_resumes_on_three_layouts_train_every_sample_once(s3_env, bucket, tmp_path):
    """1 rank x 2 workers, killed; 2 ranks x 1 worker from there, killed; 1 rank x 0 workers finishes the epoch."""
    uri = f"s3://{bucket}/data/"
    make_tiny_dataset(uri, num_images=56, shard_size="12KB")
    ckpt, log = str(tmp_path / "ckpt"), str(tmp_path / "samples.log")
    last = os.path.join(ckpt, "last.ckpt")
    logs, kept, resumed_from = SampleLogs(log), [], 0
    layouts = [[*ddp(1), "--num-workers", "2"], [*ddp(2), "--num-workers", "1", "--resume"]]
    for layout, kill_at in zip(layouts, (3, 6), strict=True):
        run = start(train_argv(uri, ckpt, log, "--source-kind", "fsspec", "--checkpoint-every-n-steps", "3",
                               *layout))
        kill_when(run, lambda at=kill_at: os.path.exists(last) and checkpoint_step(last) >= at)
        step = checkpoint_step(last)
        kept += [row for row in logs.read_new() if resumed_from <= row[2] < step]
        resumed_from = step
    summary = finish(start(train_argv(uri, ckpt, log, "--source-kind", "fsspec", *ddp(1), "--num-workers", "0",
                                      "--resume")))
    assert summary["resumed_from_step"] == resumed_from
    audit(kept, logs.read_new(), resumed_from, 56)


@pytest.mark.parametrize("layout,before,after", [
    ("files", ["--source-kind", "s3io", *ddp(1), "--num-workers", "2"],
     ["--source-kind", "s3io", *ddp(2), "--num-workers", "1"]),
    ("random-access", ["--source-kind", "fsspec", *ddp(1), "--num-workers", "1", "--random-access"],
     ["--source-kind", "fsspec", *ddp(1), "--num-workers", "0", "--random-access"]),
], ids=["files-1x2-to-2x1", "random-access-1x1-to-1x0"])
def test_map_style_kill_in_mid_epoch_then_resume_trains_every_sample_once(layout, before, after, s3_env, bucket,
                                                                          tmp_path):
    """Map-style keeps its place in the epoch like the shard stream: the batch sampler's position is in the
    checkpoint, and Lightning's warning that a resume is inexact does not show because it is exact."""
    uri = f"s3://{bucket}/data/"
    make_tiny_dataset(uri, num_images=40, shard_size="12KB", layout="files" if layout == "files" else "shards")
    ckpt, log = str(tmp_path / "ckpt"), str(tmp_path / "samples.log")
    last = os.path.join(ckpt, "last.ckpt")
    run = start(train_argv(uri, ckpt, log, "--checkpoint-every-n-steps", "3", *before))
    kill_when(run, lambda: os.path.exists(last) and checkpoint_step(last) >= 3)
    logs = SampleLogs(log)
    killed = logs.read_new()
    resumed = start(train_argv(uri, ckpt, log, "--checkpoint-every-n-steps", "3", "--resume", *after))
    out, err = resumed.communicate(timeout=300)
    assert resumed.returncode == 0, err[-3000:]
    summary = last_json_line(out)
    assert 3 <= summary["resumed_from_step"] < 10  # 40 samples in batches of 4
    counts = audit(killed, logs.read_new(), summary["resumed_from_step"], 40)
    assert counts["after_resume"] < 40, "the resumed run started the epoch again"
    assert "ended before the epoch ended" not in err
