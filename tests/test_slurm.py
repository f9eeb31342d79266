"""Jobs on a real SLURM cluster (Debian's slurm-wlm 22.05 and munge): two slurmd nodes on this machine.

`srun` starts every task of a node at once, and Lightning's SLURMEnvironment takes ranks from SLURM_PROCID,
SLURM_LOCALID and SLURM_NODEID: the conditions torchrun-based tests do not produce. Each node gets its own
MOUNTCTL_HOME (as separate machines would have), so each node mounts once for its ranks.
"""

from __future__ import annotations

import collections
import glob
import json
import os
import sys
import time

import pytest

from mountctl.ports import free_port

from conftest import fuse_mounts_under, missing, mount_programs, require_fuse
from slurm_support import SlurmCluster, missing_programs
from torch_support import REPO, last_json_line, make_tiny_dataset

JOB_TIMEOUT_S = 150


EXAMPLES = os.path.join(REPO, "examples", "slurm")
EPILOG_WRAPPER = """#!/bin/bash
# The site's part: where mountctl is and where jobs keep their node-local MOUNTCTL_HOME; then the example epilog.
export MOUNTCTL_SLURM_ENV={root}/mountctl-slurm.env
{epilog}
echo "$SLURM_JOB_ID $SLURMD_NODENAME $?" >> {root}/epilog-ran.log
"""


@pytest.fixture(scope="module")
def slurm(tmp_path_factory):
    absent = missing_programs()
    if absent:
        missing(f"SLURM is not installed ({', '.join(absent)} missing: apt-get install slurm-wlm munge)")
    root = str(tmp_path_factory.mktemp("slurm"))
    with open(os.path.join(root, "mountctl-slurm.env"), "w") as f:
        f.write(f"MOUNTCTL_BIN={os.path.join(os.path.dirname(sys.executable), 'mountctl')}\n"
                f"MOUNTCTL_LOCAL_DIR={root}/local\nexport PYTHONPATH={REPO}\n")
    wrapper = os.path.join(root, "epilog-site.sh")
    with open(wrapper, "w") as f:
        f.write(EPILOG_WRAPPER.format(root=root, epilog=os.path.join(EXAMPLES, "epilog.sh")))
    os.chmod(wrapper, 0o755)
    cluster = SlurmCluster(root, extra_conf=f"Epilog={wrapper}")
    cluster.start()
    yield cluster
    left = cluster.stop()
    assert not left, f"processes of the SLURM cluster outlived it: {left}"


def sbatch_wait(slurm: SlurmCluster, script: str, workdir) -> str:
    """`sbatch --wait SCRIPT`; returns the job's output (stdout and stderr together)."""
    out = workdir / "job-%j.out"
    done = slurm.run("sbatch", "--wait", "--parsable", f"--output={out}", f"--chdir={REPO}", script,
                     timeout=JOB_TIMEOUT_S)
    job = done.stdout.strip().split(";")[0]
    with open(str(out).replace("%j", job), errors="replace") as f:
        output = f.read()
    assert done.returncode == 0, f"job {job} failed ({done.stderr.strip()}):\n{output[-4000:]}"
    return output


def wait_until_no_mount_under(local: str, timeout_s: float = 60) -> float:
    """Seconds until no mount, supervisor or mount program is left under ``local``; fails past the bound."""
    started = time.monotonic()
    while (fuse_mounts_under(local) or mount_programs(local)) and time.monotonic() - started < timeout_s:
        time.sleep(0.2)
    assert not fuse_mounts_under(local), "a mount outlived the job's tasks"
    assert not mount_programs(local), "a supervisor or mount program outlived the job's tasks"
    return time.monotonic() - started


def test_sbatch_runs_two_tasks_on_each_of_two_nodes_with_their_slurm_ranks(slurm, tmp_path):
    script = tmp_path / "ranks.sbatch"
    script.write_text("#!/bin/bash\n#SBATCH --nodes=2 --ntasks-per-node=2\n"
                      "srun bash -c 'echo RANK $SLURM_PROCID $SLURM_LOCALID $SLURM_NODEID $SLURMD_NODENAME'\n")
    output = sbatch_wait(slurm, str(script), tmp_path)
    ranks = sorted(tuple(line.split()[1:]) for line in output.splitlines() if line.startswith("RANK "))
    assert ranks == [("0", "0", "0", "n1"), ("1", "1", "0", "n1"), ("2", "0", "1", "n2"), ("3", "1", "1", "n2")]
    assert not slurm.jobs()


def assert_epilog_ran(slurm: SlurmCluster, job: str, runs: int = 1) -> None:
    """examples/slurm/epilog.sh ran on both nodes each time the job's run ended (SLURM runs it after the job
    leaves the queue, so wait for it, bounded)."""
    ran = os.path.join(slurm.root, "epilog-ran.log")

    def rows() -> list[list[str]]:
        if not os.path.exists(ran):
            return []
        with open(ran) as f:
            return [line.split() for line in f if line.startswith(f"{job} ")]

    deadline = time.monotonic() + 60
    while len(rows()) < 2 * runs and time.monotonic() < deadline:
        time.sleep(0.2)
    assert sorted(rows()) == sorted([[job, "n1", "0"], [job, "n2", "0"]] * runs)


HOLD_MOUNT = """import os, sys, time
import mountctl
cache = os.path.join(os.environ["MOUNTCTL_HOME"], "data-cache")
with mountctl.mount(sys.argv[1], backend="rclone", cache_dir=cache) as m:
    with open(os.path.join(m.path, "blob.bin"), "rb") as f:
        size = len(f.read())
    print("HOLDING", os.environ["SLURM_PROCID"], os.environ["SLURMD_NODENAME"], m.pid, size, flush=True)
    time.sleep(600)  # until scancel
"""

HOLD_SCRIPT = """#!/bin/bash
#SBATCH --nodes=2 --ntasks-per-node=2
srun bash -c 'export MOUNTCTL_HOME="$MOUNTCTL_LOCAL_DIR/mountctl-$(id -u)-$SLURMD_NODENAME"; exec "$@"' task \\
    {python} {hold} {uri}
"""


def test_scancel_mid_job_leaves_no_mount_supervisor_or_cache_on_either_node(slurm, s3_env, s3, bucket, tmp_path):
    """Four tasks hold their node's shared mount when `scancel` sends SIGTERM (SIGKILL after KillWait=5 s).
    The supervisor is a child of the task that mounted first (in a session of its own), so SLURM may signal it
    with the tasks, or it sees its holders gone: either way nothing may be left on the node."""
    require_fuse()
    s3.put_object(Bucket=bucket, Key="hold/blob.bin", Body=b"x" * 100_000)
    local = str(tmp_path / "local")
    hold, script, out = tmp_path / "hold.py", tmp_path / "hold.sbatch", tmp_path / "hold.out"
    hold.write_text(HOLD_MOUNT)
    script.write_text(HOLD_SCRIPT.format(python=sys.executable, hold=hold, uri=f"s3://{bucket}/hold/"))
    submitted = slurm.run("sbatch", "--parsable", f"--output={out}", f"--chdir={REPO}", str(script),
                          env=dict(os.environ, MOUNTCTL_LOCAL_DIR=local))
    assert submitted.returncode == 0, submitted.stderr
    job = submitted.stdout.strip().split(";")[0]

    def holding() -> list[list[str]]:
        text = out.read_text(errors="replace") if out.exists() else ""
        return [line.split()[1:] for line in text.splitlines() if line.startswith("HOLDING ")]

    deadline = time.monotonic() + JOB_TIMEOUT_S
    while len(holding()) < 4 and time.monotonic() < deadline and job in slurm.jobs():
        time.sleep(0.2)
    rows = holding()
    assert len(rows) == 4, f"the four tasks did not all mount:\n{out.read_text(errors='replace')[-3000:]}"
    assert {row[3] for row in rows} == {"100000"}
    mount_pids = {node: {row[2] for row in rows if row[1] == node} for node in ("n1", "n2")}
    assert all(len(pids) == 1 for pids in mount_pids.values()), f"one mount per node: {mount_pids}"
    assert mount_programs(local), "the mounts are up before the cancel"
    caches = os.path.join(local, "*", "data-cache", "*")
    assert len(glob.glob(caches)) == 2, "each node's mount keeps a data cache while the job runs"

    cancelled = time.monotonic()
    assert slurm.run("scancel", job).returncode == 0
    while job in slurm.jobs() and time.monotonic() - cancelled < 60:
        time.sleep(0.2)
    assert job not in slurm.jobs(), "the job did not end within 60 s of scancel"
    ended = time.monotonic() - cancelled
    wait_until_no_mount_under(local)
    assert not glob.glob(caches), f"caches outlived the cancelled job: {glob.glob(caches)}"
    print(f"\nscancel: job gone after {ended:.1f}s, mounts and supervisors gone after "
          f"{time.monotonic() - cancelled:.1f}s")


def sample_rows(log: str) -> dict[str, list[tuple[str, int, int, int]]]:
    """Each rank's sample-log lines ("key epoch step rank"), by file."""
    rows = {}
    for name in sorted(glob.glob(f"{log}*")):
        with open(name, encoding="utf-8") as f:
            rows[name] = [(k, int(e), int(s), int(r)) for k, e, s, r in (line.split() for line in f)]
    return rows


def job_state(slurm: SlurmCluster, job: str) -> str:
    return slurm.run("squeue", "-h", "-j", job, "-o", "%T").stdout.strip()


def test_the_example_batch_script_requeued_mid_epoch_resumes_from_s3_with_one_shared_mount_per_node(
        slurm, s3_env, bucket, tmp_path):
    """examples/slurm/train.sbatch, scaled down on the sbatch command line (2 nodes x 2 tasks, CPU, gloo,
    resnet18); Lightning's SLURMEnvironment assigns the ranks. `scontrol requeuehold` mid-epoch kills the tasks
    (as a preemption would); released, the script sees SLURM_RESTART_COUNT and resumes from the last checkpoint
    in S3. SLURM 22.05 ignores `scontrol update NumNodes=` on a requeued job, so the task count stays.
    MASTER_ADDR is set because the node names n1/n2 exist only in slurm.conf, not in this machine's resolver."""
    require_fuse()
    uri, images = f"s3://{bucket}/data/", 160  # 10 steps of 4 ranks x 4 samples
    make_tiny_dataset(uri, num_images=images, shard_size="12KB")
    local, log, out = os.path.join(slurm.root, "local"), str(tmp_path / "samples.log"), tmp_path / "job.out"
    env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port(what="the DDP rendezvous")),
               MOUNTCTL_LOCAL_DIR=local, PYTHON=sys.executable)
    submitted = slurm.run("sbatch", "--parsable", "--nodes=2", "--ntasks-per-node=2", f"--output={out}",
                          f"--chdir={REPO}", os.path.join(EXAMPLES, "train.sbatch"), uri, f"s3://{bucket}/ckpt/",
                          "--backend", "rclone", "--accelerator", "cpu", "--arch", "resnet18", "--precision", "32",
                          "--batch-size", "4", "--num-workers", "1", "--no-progress", "--sample-log", log,
                          "--checkpoint-every-n-steps", "2", env=env)
    assert submitted.returncode == 0, submitted.stderr
    job = submitted.stdout.strip().split(";")[0]

    def past_step(step: int, rank: int | None = None) -> bool:
        return any(row[2] >= step and rank in (None, row[3]) for rows in sample_rows(log).values() for row in rows)

    # Rank 0 saves the step-2 checkpoint before it trains step index 2, so its rows past that prove a checkpoint
    # in S3; stopping there leaves 7 of the epoch's 10 steps as a margin for the stop to land mid-epoch.
    deadline = time.monotonic() + JOB_TIMEOUT_S
    while not past_step(3, rank=0) and time.monotonic() < deadline and job_state(slurm, job) in ("PENDING",
                                                                                               "RUNNING"):
        time.sleep(0.2)
    assert past_step(3, rank=0) and not past_step(10), \
        f"not stopped mid-epoch:\n{out.read_text(errors='replace')[-3000:]}"
    assert slurm.run("scontrol", "requeuehold", job).returncode == 0
    deadline = time.monotonic() + 60
    while job_state(slurm, job) != "PENDING" and time.monotonic() < deadline:
        time.sleep(0.2)
    assert job_state(slurm, job) == "PENDING", "the requeued job's tasks did not end"
    wait_until_no_mount_under(local)
    before = sample_rows(log)
    # A requeued job waits 2 minutes (BeginTime) before it may start again: start it now.
    assert slurm.run("scontrol", "update", f"JobId={job}", "StartTime=now").returncode == 0
    assert slurm.run("scontrol", "release", job).returncode == 0
    deadline = time.monotonic() + JOB_TIMEOUT_S
    while job in slurm.jobs() and time.monotonic() < deadline:
        time.sleep(0.5)
    output = out.read_text(errors="replace")
    summary = last_json_line(output)
    assert summary["world_size"] == 4 and summary["source_kind"] == "mountpoint", output[-3000:]
    assert summary["resumed_from"] and summary["checkpoint"], "resumed from S3 and saved there again"

    resumed_from = summary["resumed_from_step"]
    assert 2 <= resumed_from < 10
    after = [row for name, rows in sample_rows(log).items() for row in rows[len(before.get(name, [])):]]
    kept = [row for rows in before.values() for row in rows if row[2] < resumed_from] + after
    counts = collections.Counter(key for key, epoch, _, _ in kept if epoch == 0)
    assert len(counts) == images and set(counts.values()) == {1}, "every sample once across the two runs"
    assert {row[3] for row in after} == {0, 1, 2, 3}

    by_node = collections.defaultdict(set)
    for rank, row in enumerate(summary["ranks"]):  # gathered in rank order; ranks 0-1 on n1, 2-3 on n2
        by_node[rank // 2].add(row["mount_pid"])
    assert None not in set().union(*by_node.values())
    assert [len(pids) for pids in by_node.values()] == [1, 1], f"one mount per node: {dict(by_node)}"
    assert by_node[0] != by_node[1], "each node mounts for itself"
    assert sorted(os.listdir(local)) == ["mountctl-0-n1", "mountctl-0-n2"], "a MOUNTCTL_HOME per node"
    wait_until_no_mount_under(local)
    assert_epilog_ran(slurm, job, runs=2)
    print(f"\nrequeue: stopped past step 3, resumed from the step-{resumed_from} checkpoint in S3; "
          f"mounts {json.dumps({k: sorted(v) for k, v in by_node.items()})}")
