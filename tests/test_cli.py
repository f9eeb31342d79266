"""The command line as a new user runs it: a private local S3, mount, status, unmount, stop."""

from __future__ import annotations

import glob
import json
import os
import subprocess
import sys

import pytest

from mountctl.mounts.backends import get_backend
from mountctl.programs import find_program

from conftest import fuse_mounts_under, mount_programs, require_fuse

MOUNTCTL = [sys.executable, "-m", "mountctl"]


def run(args: list[str], env: dict[str, str], check: bool = True, timeout: float = 90) -> subprocess.CompletedProcess:
    done = subprocess.run(MOUNTCTL + args, env=env, capture_output=True, text=True, timeout=timeout)
    if check and done.returncode != 0:
        raise AssertionError(f"mountctl {' '.join(args)} failed ({done.returncode}): {done.stderr}")
    return done


@pytest.fixture
def user_env(tmp_path):
    """A shell of a new user: own MOUNTCTL_HOME, no AWS variables."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env["MOUNTCTL_HOME"] = str(tmp_path / "home")
    yield env
    subprocess.run(MOUNTCTL + ["local-s3", "stop"], env=env, capture_output=True, timeout=60)


def test_new_user_walkthrough_leaves_nothing_behind(user_env, tmp_path):
    require_fuse()
    before = {p.pid for p in mount_programs(str(tmp_path))}
    assert run(["local-s3", "status"], user_env, check=False).returncode == 3
    run(["local-s3", "start"], user_env)
    again = run(["local-s3", "start"], user_env)
    assert "already running" in again.stderr

    exports = run(["local-s3", "env"], user_env).stdout
    names = dict(line.removeprefix("export ").split("=", 1) for line in exports.splitlines())
    assert set(names) == {"AWS_ENDPOINT_URL", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_REGION"}
    assert names["AWS_ENDPOINT_URL"].startswith("http://127.0.0.1:")
    # eval "$(mountctl local-s3 env)" in a real shell, then use the AWS-standard environment:
    script = f'eval "$({" ".join(MOUNTCTL)} local-s3 env)"; {sys.executable} -c ' + \
        '"import boto3; boto3.client(\'s3\').put_object(Bucket=\'mountctl\', Key=\'hello.txt\', Body=b\'hi\')"'
    subprocess.run(["bash", "-c", script], env=user_env, check=True, timeout=60)
    env = {**user_env, **{k: v.strip("'") for k, v in names.items()}}

    mnt = str(tmp_path / "m")
    for backend in ("mount-s3", "rclone", "s3fs"):
        out = run(["mount", "s3://mountctl/", mnt, "--backend", backend], env).stdout
        assert f"with {backend}" in out
        with open(os.path.join(mnt, "hello.txt"), "rb") as f:
            assert f.read() == b"hi"
        status = json.loads(run(["status", "--json"], env).stdout)["mounts"]
        assert [(m["dir"], m["backend"], m["health"]["state"]) for m in status] == [(mnt, backend, "healthy")]
        text = run(["status"], env).stdout
        assert "health=healthy" in text and mnt in text
        # Which build runs (for mount-s3: AWS's own, or ours on AWS's crates), as recorded when it started.
        version = get_backend(backend).version()
        assert status[0]["program_version"] == version and f"backend={backend} ({version})" in text
        run(["unmount", mnt], env)
        assert json.loads(run(["status", "--json"], env).stdout)["mounts"] == []
        assert fuse_mounts_under(str(tmp_path)) == []

    with open(os.path.join(user_env["MOUNTCTL_HOME"], "local-s3", "server.json")) as f:
        ports = json.load(f)["ports"].values()
    run(["local-s3", "stop"], env)
    assert run(["local-s3", "status"], env, check=False).returncode == 3
    sockets = [glob.glob(f"/tmp/seaweedfs-*-{n}.sock") for p in ports for n in (p, p + 10000)]
    assert not any(sockets), f"the server's unix sockets outlived it: {sockets}"
    assert [p for p in mount_programs(str(tmp_path)) if p.pid not in before] == []
    assert not os.path.exists(mnt)
    run_dir = os.path.join(user_env["MOUNTCTL_HOME"], "run")
    assert os.listdir(run_dir) == []


def test_every_subcommand_help_has_an_example():
    commands = [["mount"], ["unmount"], ["status"], ["doctor"], ["cleanup"], ["local-s3"],
                ["local-s3", "start"], ["local-s3", "stop"], ["local-s3", "status"], ["local-s3", "env"]]
    for command in commands:
        done = subprocess.run(MOUNTCTL + command + ["--help"], capture_output=True, text=True, timeout=30)
        assert done.returncode == 0
        assert "example:" in done.stdout, f"`mountctl {' '.join(command)} --help` has no example"


def test_mount_error_exits_1_with_a_message_and_no_traceback(s3_env, tmp_path):
    done = subprocess.run(MOUNTCTL + ["mount", "s3://missing-bucket-x/", str(tmp_path / "m"), "--backend", "rclone"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 1
    assert "does not exist" in done.stderr and "Traceback" not in done.stderr
    assert not os.path.exists(tmp_path / "m")


def test_doctor_reports_each_check_and_fails_without_credentials(s3_env, tmp_path):
    done = subprocess.run(MOUNTCTL + ["doctor", "--json", "--uri", "s3://mountctl/"], capture_output=True, text=True,
                          timeout=60)
    report = json.loads(done.stdout)
    by_name = {c["name"]: c for c in report["checks"]}
    assert by_name["/dev/fuse"]["ok"] and by_name["endpoint"]["ok"] and by_name["bucket access"]["ok"]
    assert by_name["backend rclone"]["ok"] == (find_program("rclone") is not None)
    env = {k: v for k, v in os.environ.items() if k not in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")}
    env["HOME"] = str(tmp_path)  # no ~/.aws either
    done = subprocess.run(MOUNTCTL + ["doctor"], capture_output=True, text=True, timeout=60, env=env)
    assert done.returncode == 1
    assert "FAIL] credentials" in done.stdout and "fix:" in done.stdout


@pytest.mark.parametrize("suite", ["mlperf", "node", "all"])
def test_a_bench_argument_error_stops_before_the_embedded_s3_starts(suite, user_env):
    """`resnet.py bench` without a URI starts the embedded S3: a wrong argument must be one line before that, not
    after it (issue 36.10: `--suite mlperf` started the server, then stopped on a `--store` it had not defaulted)."""
    resnet = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "resnet.py")
    done = subprocess.run([sys.executable, resnet, "bench", "--suite", suite, "--quick", "--far-latency-ms", "-1"],
                          env=user_env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 1
    assert done.stderr.strip().splitlines() == [
        "resnet.py bench: error: far profile: latency_ms must lie in 0..10000 (0 turns it off), not -1"]
    assert run(["local-s3", "status"], user_env, check=False).returncode == 3  # never started


def test_bench_suite_mlperf_without_dlio_says_so_before_the_embedded_s3_starts(user_env, tmp_path):
    resnet = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "resnet.py")
    env = {**user_env, "MOUNTCTL_DLIO_VENV": str(tmp_path / "no-dlio")}
    done = subprocess.run([sys.executable, resnet, "bench", "--suite", "mlperf", "--quick"],
                          env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 1
    assert len(done.stderr.strip().splitlines()) == 1 and "DLIO is not installed" in done.stderr
    assert run(["local-s3", "status"], user_env, check=False).returncode == 3  # never started
