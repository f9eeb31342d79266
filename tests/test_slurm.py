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

import pytest

from mountctl.ports import free_port

from conftest import fuse_mounts_under, missing, mount_programs, require_fuse
from slurm_support import SlurmCluster, missing_programs
from torch_support import REPO, RESNET_PY, last_json_line, make_tiny_dataset

JOB_TIMEOUT_S = 150


@pytest.fixture(scope="module")
def slurm(tmp_path_factory):
    absent = missing_programs()
    if absent:
        missing(f"SLURM is not installed ({', '.join(absent)} missing: apt-get install slurm-wlm munge)")
    cluster = SlurmCluster(str(tmp_path_factory.mktemp("slurm")))
    cluster.start()
    yield cluster
    left = cluster.stop()
    assert not left, f"processes of the SLURM cluster outlived it: {left}"


def sbatch(slurm: SlurmCluster, script: str, workdir, env: dict[str, str] | None = None) -> str:
    """Submit ``script`` with `sbatch --wait` and return the job's output (stdout and stderr together)."""
    path = workdir / "job.sbatch"
    path.write_text(script)
    out = workdir / "job-%j.out"
    done = slurm.run("sbatch", "--wait", "--parsable", f"--output={out}", f"--chdir={REPO}", str(path),
                     timeout=JOB_TIMEOUT_S, env=env)
    job = done.stdout.strip().split(";")[0]
    with open(str(out).replace("%j", job), errors="replace") as f:
        output = f.read()
    assert done.returncode == 0, f"job {job} failed ({done.stderr.strip()}):\n{output[-4000:]}"
    return output


def test_sbatch_runs_two_tasks_on_each_of_two_nodes_with_their_slurm_ranks(slurm, tmp_path):
    output = sbatch(slurm, "#!/bin/bash\n#SBATCH --nodes=2 --ntasks-per-node=2\n"
                    "srun bash -c 'echo RANK $SLURM_PROCID $SLURM_LOCALID $SLURM_NODEID $SLURMD_NODENAME'\n",
                    tmp_path)
    ranks = sorted(tuple(line.split()[1:]) for line in output.splitlines() if line.startswith("RANK "))
    assert ranks == [("0", "0", "0", "n1"), ("1", "1", "0", "n1"), ("2", "0", "1", "n2"), ("3", "1", "1", "n2")]
    assert not slurm.jobs()


TRAIN_SCRIPT = """#!/bin/bash
#SBATCH --nodes=2 --ntasks-per-node=2
# Each simulated node keeps its own MOUNTCTL_HOME, as a real node's local ~/.mountctl would be.
srun bash -c 'MOUNTCTL_HOME={nodes_dir}/$SLURMD_NODENAME exec {python} {resnet} train {uri} \\
    --source-kind mountpoint --backend rclone --num-nodes 2 --devices 2 --strategy ddp --accelerator cpu \\
    --arch resnet18 --precision 32 --batch-size 4 --num-workers 1 --no-progress --sample-log {log}'
"""


def test_srun_ranks_train_every_sample_once_through_one_shared_mount_per_node(slurm, s3_env, bucket, tmp_path):
    """Lightning's SLURMEnvironment assigns the ranks; MASTER_ADDR is set because the node names n1/n2 exist only
    in slurm.conf, not in this machine's resolver."""
    require_fuse()
    uri = f"s3://{bucket}/data/"
    make_tiny_dataset(uri, num_images=48, shard_size="12KB")
    nodes_dir, log = tmp_path / "nodes", tmp_path / "samples.log"
    script = TRAIN_SCRIPT.format(nodes_dir=nodes_dir, python=sys.executable, resnet=RESNET_PY, uri=uri, log=log)
    env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port(what="the DDP rendezvous")))
    output = sbatch(slurm, script, tmp_path, env)
    summary = last_json_line(output)
    assert summary["world_size"] == 4 and summary["source_kind"] == "mountpoint"
    by_node = collections.defaultdict(set)
    for rank, row in enumerate(summary["ranks"]):  # gathered in rank order; ranks 0-1 on n1, 2-3 on n2
        by_node[rank // 2].add(row["mount_pid"])
    assert None not in set().union(*by_node.values())
    assert [len(pids) for pids in by_node.values()] == [1, 1], f"one mount per node: {dict(by_node)}"
    assert by_node[0] != by_node[1], "each node mounts for itself"
    lines = [line.split() for name in glob.glob(f"{log}*") for line in open(name, encoding="utf-8")]
    counts = collections.Counter(key for key, epoch, _, _ in lines if epoch == "0")
    assert len(counts) == 48 and set(counts.values()) == {1}, "every sample exactly once across the four ranks"
    assert {int(rank) for *_, rank in lines} == {0, 1, 2, 3}
    print(f"\nSLURM 2 nodes x 2 tasks: mounts {json.dumps({k: sorted(v) for k, v in by_node.items()})}")
    assert not fuse_mounts_under(str(nodes_dir))
    assert not mount_programs(str(nodes_dir)), "a mount outlived the job"
