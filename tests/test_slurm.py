"""Jobs on a real SLURM cluster (Debian's slurm-wlm 22.05 and munge): two slurmd nodes on this machine.

`srun` starts every task of a node at once, and Lightning's SLURMEnvironment takes ranks from SLURM_PROCID,
SLURM_LOCALID and SLURM_NODEID: the conditions torchrun-based tests do not produce. Each node gets its own
MOUNTCTL_HOME (as separate machines would have), so each node mounts once for its ranks.
"""

from __future__ import annotations

import collections
import contextlib
import glob
import json
import os
import secrets
import shutil
import stat
import subprocess
import sys
import tempfile
import time

import psutil
import pytest

from mountctl.local_s3.ports import free_port
from mountctl.mounts.health import SERVING_STATES

from conftest import fuse_mounts_under, missing, mount_programs, require_fuse
from slurm_support import (
    USER_PROGRAMS,
    SlurmCluster,
    fusermount_for_other_users,
    missing_programs,
    python_for_other_users,
    system_user,
)
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
    # Not under pytest's temp dir (root's alone): jobs run as other users read slurm.conf and reach munge's socket.
    root = tempfile.mkdtemp(prefix="mountctl-slurm-")
    os.chmod(root, 0o755)
    with open(os.path.join(root, "mountctl-slurm.env"), "w") as f:
        f.write(f"MOUNTCTL_BIN={os.path.join(os.path.dirname(sys.executable), 'mountctl')}\n"
                f"MOUNTCTL_LOCAL_DIR={root}/local\nexport PYTHONPATH={REPO}\n")
    wrapper = os.path.join(root, "epilog-site.sh")
    with open(wrapper, "w") as f:
        f.write(EPILOG_WRAPPER.format(root=root, epilog=os.path.join(EXAMPLES, "epilog.sh")))
    os.chmod(wrapper, 0o755)
    cluster = SlurmCluster(root, extra_conf=f"Epilog={wrapper}")
    try:
        cluster.start()
        yield cluster
    finally:
        left = cluster.stop()
        # The daemons' logs stay where pytest keeps its temp dirs (the last three sessions); the rest goes.
        if os.path.isdir(os.path.join(root, "log")):
            shutil.copytree(os.path.join(root, "log"), tmp_path_factory.mktemp("slurm-logs"), dirs_exist_ok=True)
        shutil.rmtree(root, ignore_errors=True)
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


def assert_epilog_ran(slurm: SlurmCluster, job: str, nodes: list[str]) -> None:
    """examples/slurm/epilog.sh ran, and succeeded, on each of ``nodes`` (one entry per node per run of the job);
    SLURM runs it after the job leaves the queue, so wait for it, bounded."""
    ran = os.path.join(slurm.root, "epilog-ran.log")

    def rows() -> list[list[str]]:
        if not os.path.exists(ran):
            return []
        with open(ran) as f:
            return [line.split() for line in f if line.startswith(f"{job} ")]

    deadline = time.monotonic() + 60
    while len(rows()) < len(nodes) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert sorted(rows()) == sorted([job, node, "0"] for node in nodes)


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


def job_field(slurm: SlurmCluster, job: str, name: str) -> str:
    """One field of `scontrol show job` (finished jobs stay there for MinJobAge, 300 s by default)."""
    for word in slurm.run("scontrol", "-o", "show", "job", job).stdout.split():
        if word.startswith(name + "="):
            return word.split("=", 1)[1]
    return ""


def stop_training_tasks(slurm: SlurmCluster, job: str) -> int:
    """SIGSTOP the job's training processes (the ranks, their DataLoader workers and the srun that started
    them), not its mounts; returns how many. SLURM sends SIGCONT before SIGTERM when it ends a job, so they go on to take the signals as usual."""
    stopped = 0
    for process in slurm.processes():
        with contextlib.suppress(psutil.Error):
            if process.environ().get("SLURM_JOB_ID") == job and "resnet.py" in " ".join(process.cmdline()):
                process.suspend()
                stopped += 1
    return stopped


def test_the_example_batch_script_ended_by_its_time_limit_mid_epoch_resumes_requeued_on_fewer_tasks(
        slurm, s3_env, bucket, tmp_path):
    """examples/slurm/train.sbatch, scaled down on the sbatch command line (`--nodes=1-2 --ntasks-per-node=2`,
    both nodes idle so 4 tasks; CPU, gloo, resnet18); Lightning's SLURMEnvironment assigns the ranks, one mount
    per node. Mid-epoch, its time limit is lowered to 1 minute and SLURM ends it as TIMEOUT (SIGCONT, SIGTERM,
    then SIGKILL after KillWait=5 s): nothing may stay on either node. With n2 drained (a lost node),
    `scontrol requeue` and `scontrol update NumNodes=1-2 NumTasks=2` run it again on n1 alone, 2 tasks: the
    script sees SLURM_RESTART_COUNT, resumes from the checkpoint in S3, and the two runs train every sample of
    the epoch once.

    SLURM counts limits in whole minutes and checks them every 30 s, so the job ends up to 30 s after the cut
    (or after its first minute): to be sure the epoch is still mid-way then, whatever the load, the training
    processes are stopped (SIGSTOP) once a checkpoint is in S3, before the cut; SLURM's own SIGCONT before its
    SIGTERM wakes them. MASTER_ADDR is set because the node names n1/n2 exist only in slurm.conf, not in this
    machine's resolver."""
    require_fuse()
    uri, images = f"s3://{bucket}/data/", 128  # 8 steps of 4 ranks x 4 samples
    steps = images // 16
    make_tiny_dataset(uri, num_images=images, shard_size="12KB")
    local, log, out = os.path.join(slurm.root, "local"), str(tmp_path / "samples.log"), tmp_path / "job.out"
    env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port(what="the DDP rendezvous")),
               MOUNTCTL_LOCAL_DIR=local, PYTHON=sys.executable)
    submitted = slurm.run("sbatch", "--parsable", "--nodes=1-2", "--ntasks-per-node=2", "--time=10",
                          "--open-mode=append", f"--output={out}", f"--chdir={REPO}", os.path.join(EXAMPLES, "train.sbatch"), uri,
                          f"s3://{bucket}/ckpt/", "--backend", "rclone", "--accelerator", "cpu", "--arch", "resnet18",
                          "--precision", "32", "--batch-size", "4", "--num-workers", "1", "--no-progress",
                          "--sample-log", log, "--checkpoint-every-n-steps", "2", env=env)
    assert submitted.returncode == 0, submitted.stderr
    job = submitted.stdout.strip().split(";")[0]

    def past_step(step: int, rank: int | None = None) -> bool:
        return any(row[2] >= step and rank in (None, row[3]) for rows in sample_rows(log).values() for row in rows)

    # Rank 0 saves the step-2 checkpoint before it trains step index 2, so its rows past that prove a checkpoint
    # in S3.
    deadline = time.monotonic() + JOB_TIMEOUT_S
    while not past_step(3, rank=0) and time.monotonic() < deadline and job_state(slurm, job) in ("PENDING",
                                                                                               "RUNNING"):
        time.sleep(0.2)
    assert past_step(3, rank=0) and not past_step(steps - 1), \
        f"no checkpoint mid-epoch:\n{out.read_text(errors='replace')[-3000:]}"
    assert stop_training_tasks(slurm, job) >= 4, "the four ranks (and their workers) are stopped mid-epoch"
    cut = slurm.run("scontrol", "update", f"JobId={job}", "TimeLimit=1")
    assert cut.returncode == 0, cut.stderr
    homes = sorted(os.path.relpath(m, local).split(os.sep)[0] for m in fuse_mounts_under(local))
    assert homes == ["mountctl-0-n1", "mountctl-0-n2"], f"one shared mount per node for its 2 ranks: {homes}"
    while job in slurm.jobs() and time.monotonic() < deadline + 120:
        time.sleep(0.2)
    assert job_field(slurm, job, "JobState") == "TIMEOUT", f"ended as {job_field(slurm, job, 'JobState')}"
    ran_for = job_field(slurm, job, "RunTime")
    wait_until_no_mount_under(local)
    assert not glob.glob(os.path.join(local, "*", "cache", "*")), "a data cache outlived the job"
    before = sample_rows(log)

    # n2 is lost (drained); requeued, the job would keep its 4 tasks (2 nodes), its 1-minute limit and wait 2
    # minutes (BeginTime): change all three once it is pending again. SLURM 22.05 takes a smaller NumNodes only
    # as a range, and only when fewer nodes are up: `NumNodes=1` with both nodes idle is accepted and ignored.
    assert slurm.run("scontrol", "update", "NodeName=n2", "State=DRAIN", "Reason=lost-in-test").returncode == 0
    try:
        assert slurm.run("scontrol", "requeue", job).returncode == 0
        requeued = time.monotonic()
        while job_state(slurm, job) != "PENDING" and time.monotonic() - requeued < 60:
            time.sleep(0.2)
        updated = slurm.run("scontrol", "update", f"JobId={job}", "NumNodes=1-2", "NumTasks=2", "TimeLimit=10",
                            "StartTime=now")
        assert updated.returncode == 0, updated.stderr
        deadline = time.monotonic() + JOB_TIMEOUT_S
        while job in slurm.jobs() and time.monotonic() < deadline:
            time.sleep(0.5)
    finally:
        slurm.run("scontrol", "update", "NodeName=n2", "State=RESUME")
    output = out.read_text(errors="replace")
    summary = last_json_line(output)
    assert summary["world_size"] == 2 and summary["source_kind"] == "mountpoint", output[-3000:]
    assert summary["resumed_from"] and summary["checkpoint"], "resumed from S3 and saved there again"

    resumed_from = summary["resumed_from_step"]
    assert 2 <= resumed_from < steps
    after = [row for name, rows in sample_rows(log).items() for row in rows[len(before.get(name, [])):]]
    kept = [row for rows in before.values() for row in rows if row[2] < resumed_from] + after
    counts = collections.Counter(key for key, epoch, _, _ in kept if epoch == 0)
    assert len(counts) == images and set(counts.values()) == {1}, "every sample once across the two runs"
    assert {row[3] for row in after} == {0, 1}
    assert len({row["mount_pid"] for row in summary["ranks"]} - {None}) == 1, "the node's 2 ranks share a mount"
    assert sorted(os.listdir(local)) == ["mountctl-0-n1", "mountctl-0-n2"], "a MOUNTCTL_HOME per node"
    wait_until_no_mount_under(local)
    assert_epilog_ran(slurm, job, ["n1", "n2", job_field(slurm, job, "NodeList")])
    print(f"\ntime limit: TIMEOUT after {ran_for}, nothing left on either node; requeued on 2 tasks, resumed from "
          f"the step-{resumed_from} checkpoint in S3 ({steps} steps of 4 tasks an epoch)")


def _train_sbatch_help(slurm: SlurmCluster, local: str, out) -> subprocess.CompletedProcess:
    """examples/slurm/train.sbatch on n1, one task, `--help` passed on to `resnet.py train`: the script's own steps
    run (its node's MOUNTCTL_HOME under ``local``), then the real trainer prints its usage and exits."""
    env = dict(os.environ, MOUNTCTL_LOCAL_DIR=local, PYTHON=sys.executable)
    return slurm.run("sbatch", "--wait", "--nodes=1", "--ntasks-per-node=1", "--nodelist=n1", f"--output={out}",
                     f"--chdir={REPO}", os.path.join(EXAMPLES, "train.sbatch"), "s3://nowhere/data/",
                     "s3://nowhere/ckpt/", "--help", env=env, timeout=JOB_TIMEOUT_S)


@pytest.fixture
def sticky_local_dir(slurm):
    """A node-local directory like /tmp: every user makes entries in it, and removes only their own."""
    local = os.path.join(slurm.root, f"sticky-{secrets.token_hex(4)}")
    os.mkdir(local)
    os.chmod(local, 0o1777)
    yield local
    shutil.rmtree(local, ignore_errors=True)


def test_the_example_batch_script_makes_its_node_home_private(slurm, sticky_local_dir, tmp_path):
    out = tmp_path / "job.out"
    done = _train_sbatch_help(slurm, sticky_local_dir, out)
    output = out.read_text(errors="replace")
    assert done.returncode == 0 and "usage:" in output, output
    home = os.lstat(os.path.join(sticky_local_dir, "mountctl-0-n1"))
    assert stat.S_ISDIR(home.st_mode) and (home.st_uid, stat.S_IMODE(home.st_mode)) == (os.getuid(), 0o700)


@pytest.mark.parametrize("squat", ["directory", "link"])
def test_the_example_batch_script_refuses_a_node_home_that_another_user_made_first(slurm, sticky_local_dir,
                                                                                    tmp_path, squat):
    """A throwaway user makes the job user's predictable MOUNTCTL_HOME (a directory open to all, or a link to one of
    theirs) before the job. The job (root's: nothing else would stop root from using it) must end in one line that
    names it and its owner, before the trainer starts, and leave it as it was."""
    if os.geteuid() != 0 or missing_programs(("useradd", "userdel", "runuser")):
        missing("this test runs as root with useradd, userdel and runuser")
    home, theirs = os.path.join(sticky_local_dir, "mountctl-0-n1"), os.path.join(sticky_local_dir, "theirs")
    with contextlib.ExitStack() as cleanup:
        try:
            squatter = cleanup.enter_context(system_user("mcsq"))
        except RuntimeError as exc:
            missing(str(exc))
        as_squatter = ["runuser", "-u", squatter.pw_name, "--"]
        subprocess.run([*as_squatter, "mkdir", "-m", "777", theirs if squat == "link" else home], check=True,
                       timeout=30)
        if squat == "link":
            subprocess.run([*as_squatter, "ln", "-s", theirs, home], check=True, timeout=30)
        out = tmp_path / "job.out"
        done = _train_sbatch_help(slurm, sticky_local_dir, out)
        output = out.read_text(errors="replace")
        assert done.returncode != 0 and "usage:" not in output, f"the job ran in another user's home:\n{output}"
        refusals = [line for line in output.splitlines() if line.startswith("train.sbatch: ")]
        assert len(refusals) == 1 and home in refusals[0] and squatter.pw_name in refusals[0], output
        assert os.listdir(theirs if squat == "link" else home) == [], "the job wrote into another user's directory"
        assert os.lstat(home).st_uid == squatter.pw_uid


SIDE_BY_SIDE = """import errno, json, os, subprocess, sys, time
import mountctl
from mountctl.shared.registry import Registry

uri, here = sys.argv[1], sys.argv[2]  # here: this user's private exchange directory with the test


def wait_for(name):
    deadline, path = time.monotonic() + 240, os.path.join(here, name)
    while not os.path.exists(path):
        if time.monotonic() > deadline:
            sys.exit(f"{path} did not appear within 240 s")
        time.sleep(0.2)
    with open(path) as f:
        return json.load(f)


def attempt(read, path):
    try:
        read(path)
        return "read"
    except OSError as exc:
        return errno.errorcode.get(exc.errno, str(exc.errno))


home = os.environ["MOUNTCTL_HOME"]
cache = os.path.join(home, "data-cache")
with mountctl.mount(uri, backend="rclone", cache_dir=cache) as m:
    with open(os.path.join(m.path, "blob.bin")) as f:
        mine = {"uid": os.getuid(), "mount_pid": m.pid, "mount_dir": m.path, "home": home, "cache": cache,
                "registry": Registry().record_path(m.path), "read": f.read()}
    print("MINE", json.dumps(mine), flush=True)
    theirs = wait_for("theirs.json")
    probes = {what: attempt(read, theirs[what]) for what, read in (
        ("home", os.listdir), ("cache", os.listdir), ("registry", lambda p: open(p).read()),
        ("mount_dir", os.listdir))}
    shown = subprocess.run([sys.executable, "-m", "mountctl", "status", "--json"], capture_output=True, text=True,
                           timeout=120)
    sys.stderr.write(shown.stderr)
    rows = json.loads(shown.stdout)["mounts"]
    print("PROBED", json.dumps({"probes": probes, "status": [{"dir": r["dir"], "health": r["health"]["state"]}
                                                             for r in rows]}), flush=True)
    wait_for("stop.json")
print("UNMOUNTED", flush=True)
"""

SIDE_BY_SIDE_SCRIPT = """#!/bin/bash
#SBATCH --nodes=1 --ntasks=1 --nodelist=n1
srun bash -c 'export MOUNTCTL_HOME="$MOUNTCTL_LOCAL_DIR/mountctl-$(id -u)-$SLURMD_NODENAME"; exec "$@"' task \\
    {python} {job} "$@"
"""


def lines_of(out: str, tag: str) -> list[dict]:
    text = open(out, errors="replace").read() if os.path.exists(out) else ""
    return [json.loads(line.split(" ", 1)[1]) for line in text.splitlines() if line.startswith(tag + " ")]


def wait_for_line(slurm: SlurmCluster, job: str, out: str, tag: str) -> dict:
    deadline = time.monotonic() + JOB_TIMEOUT_S
    while not lines_of(out, tag) and time.monotonic() < deadline and job in slurm.jobs():
        time.sleep(0.2)
    found = lines_of(out, tag)
    text = open(out, errors="replace").read() if os.path.exists(out) else "(no output)"
    assert found, f"job {job} printed no {tag} line:\n{text[-3000:]}"
    return found[0]


def end_jobs(slurm: SlurmCluster, jobs: list[str], *, cancel: bool = True) -> None:
    """Wait (bounded) until none of ``jobs`` is in the queue, cancelling them first unless ``cancel`` is False."""
    if cancel and set(jobs) & set(slurm.jobs()):
        slurm.run("scancel", *jobs)
    deadline = time.monotonic() + JOB_TIMEOUT_S
    while set(jobs) & set(slurm.jobs()) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not set(jobs) & set(slurm.jobs()), f"jobs {jobs} did not end within {JOB_TIMEOUT_S}s"


def write_json(path: str, data: dict) -> None:
    """Atomically, so that the job never reads half a file."""
    with open(path + ".tmp", "w") as f:
        json.dump(data, f)
    os.replace(path + ".tmp", path)


def test_two_users_jobs_on_one_node_each_mount_their_own_and_cannot_read_each_others(
        slurm, local_s3, s3_env, s3, bucket):
    """Root submits one job for each of two throwaway users (`sbatch --uid=`), both on n1 at once. Each user
    has its own S3 key (a live identity of the local S3, in a credentials file only that user can read: no key
    on a command line), and MOUNTCTL_HOME comes from train.sbatch's rule under a shared sticky directory. Each
    job mounts, then probes the other user's home, cache, registry record and mount, and runs `mountctl
    status`."""
    require_fuse()
    if os.geteuid() != 0 or missing_programs(USER_PROGRAMS):
        missing(f"this test runs as root with {', '.join(USER_PROGRAMS)} (passwd, libcap2-bin, fuse3)")
    top = os.path.join(slurm.root, "users")
    local, bin_dir = os.path.join(top, "local"), os.path.join(top, "bin")
    for path in (local, bin_dir):
        os.makedirs(path)
    os.chmod(top, 0o755)
    try:
        python, pythonpath = python_for_other_users(REPO)
        fusermount_for_other_users(bin_dir)
    except RuntimeError as exc:
        missing(str(exc))
    os.chmod(local, 0o1777)  # like /tmp: every user makes its own MOUNTCTL_HOME there
    job, script = os.path.join(top, "side_by_side.py"), os.path.join(top, "side_by_side.sbatch")
    with open(job, "w") as f:
        f.write(SIDE_BY_SIDE)
    with open(script, "w") as f:
        f.write(SIDE_BY_SIDE_SCRIPT.format(python=python, job=job))
    with contextlib.ExitStack() as cleanup:
        cleanup.callback(shutil.rmtree, top, True)
        try:
            users = {label: cleanup.enter_context(system_user(f"mcs{label}")) for label in "ab"}
        except RuntimeError as exc:
            missing(str(exc))
        jobs, outs, heres = {}, {}, {}
        cleanup.callback(lambda: end_jobs(slurm, list(jobs.values())))  # before the users and their keys go
        for label, user in users.items():
            s3.put_object(Bucket=bucket, Key=f"{label}/blob.bin", Body=f"data of user {label}".encode())
            here = heres[label] = os.path.join(top, label)
            os.mkdir(here, 0o700)
            os.chown(here, user.pw_uid, user.pw_gid)
            key, secret = f"mcs{label}{secrets.token_hex(6)}", secrets.token_hex(20)
            local_s3.add_identity(user.pw_name, key, secret)
            cleanup.callback(local_s3.revoke_identity, user.pw_name, key)
            credentials = os.path.join(here, "credentials")
            with open(os.open(credentials, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w") as f:
                f.write(f"[default]\naws_access_key_id = {key}\naws_secret_access_key = {secret}\n")
            os.chown(credentials, user.pw_uid, user.pw_gid)
            env = {"PATH": f"{bin_dir}:{os.path.dirname(sys.executable)}:/usr/bin:/bin", "PYTHONPATH": pythonpath,
                   "HOME": here, "MOUNTCTL_LOCAL_DIR": local, "AWS_ENDPOINT_URL": s3_env.endpoint_url,
                   "AWS_REGION": s3_env.region, "AWS_SHARED_CREDENTIALS_FILE": credentials,
                   "AWS_CONFIG_FILE": os.path.join(here, "config"), "OMP_WAIT_POLICY": "PASSIVE"}
            outs[label] = os.path.join(here, "job.out")
            submitted = slurm.run("sbatch", "--parsable", f"--uid={user.pw_name}", f"--output={outs[label]}",
                                  f"--chdir={here}", script, f"s3://{bucket}/{label}/", here, env=env)
            assert submitted.returncode == 0, submitted.stderr
            jobs[label] = submitted.stdout.strip().split(";")[0]

        mine = {label: wait_for_line(slurm, jobs[label], outs[label], "MINE") for label in users}
        for label, user in users.items():
            assert mine[label]["uid"] == user.pw_uid and mine[label]["read"] == f"data of user {label}"
            assert psutil.Process(mine[label]["mount_pid"]).uids().real == user.pw_uid, "mounted as its user"
            home = os.stat(mine[label]["home"])
            assert (home.st_uid, stat.S_IMODE(home.st_mode)) == (user.pw_uid, 0o700), "a home only its user enters"
        assert mine["a"]["mount_pid"] != mine["b"]["mount_pid"] and mine["a"]["mount_dir"] != mine["b"]["mount_dir"]
        for label, other in (("a", "b"), ("b", "a")):
            write_json(os.path.join(heres[label], "theirs.json"), mine[other])
        probed = {label: wait_for_line(slurm, jobs[label], outs[label], "PROBED") for label in users}
        for label, other in (("a", "b"), ("b", "a")):
            assert probed[label]["probes"] == dict.fromkeys(("home", "cache", "registry", "mount_dir"), "EACCES")
            shown = {row["dir"]: row["health"] for row in probed[label]["status"]}
            assert mine[other]["mount_dir"] not in shown, f"user {label}'s status lists {other}'s mount: {shown}"
            assert list(shown) == [mine[label]["mount_dir"]], f"user {label}'s status: {shown}"
            assert shown[mine[label]["mount_dir"]] in SERVING_STATES, f"user {label}'s own mount: {shown}"

        for label in users:
            write_json(os.path.join(heres[label], "stop.json"), {})
        end_jobs(slurm, list(jobs.values()), cancel=False)
        for label in users:
            assert "UNMOUNTED" in open(outs[label], errors="replace").read(), f"user {label}'s job did not unmount"
        wait_until_no_mount_under(local)
        assert not glob.glob(os.path.join(local, "*", "data-cache", "*")), "a cache outlived its user's job"
    print(f"\nusers side by side: mounts {[mine[label]['mount_pid'] for label in 'ab']}, each refused the other's "
          "home, cache, registry and mount (EACCES); status lists only its own")
