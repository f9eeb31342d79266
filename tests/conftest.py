"""Shared fixtures: one real SeaweedFS server per session, real FUSE programs, leak checks.

With CI=true a test that needs FUSE or the S3 server fails instead of
skipping; the only skip CI allows is the mount-s3 backend when the program is
not installed (it is not in the registries these machines reach).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import tempfile
import time
import uuid

import psutil
import pytest

ON_CI = os.environ.get("CI", "").lower() == "true"

# Under pytest-xdist (scripts/test.sh runs the end-to-end layer in parallel) each worker is a session of its
# own, with a private temporary directory: checks that nothing was left in the temp dir then see only their own
# worker's files, as they would in a serial run.  weed's gRPC sockets stay in /tmp (its paths are fixed).
_WORKER = os.environ.get("PYTEST_XDIST_WORKER", "")
_WORKER_TMP = tempfile.mkdtemp(prefix=f"mctl-{_WORKER}-") if _WORKER else ""
if _WORKER_TMP:
    os.chmod(_WORKER_TMP, 0o1777)  # as /tmp is: tests that run as other users reach their directories in it
    os.environ["TMPDIR"] = tempfile.tempdir = _WORKER_TMP
# Every test session gets a private MOUNTCTL_HOME so that it never touches the user's.
_SESSION_HOME = tempfile.mkdtemp(prefix="mountctl-test-home-")
os.environ["MOUNTCTL_HOME"] = _SESSION_HOME
# torch's OpenMP threads spin while they wait for work.  With more runnable threads than cores (DataLoader
# workers, mount programs, the S3 server and another job on two cores) the spinning takes the cores the work
# needs: a ResNet-18 step of 8 images took 12-25 s at load 25 spinning, 2.6 s with passive waits.  Set before
# torch loads, here and in every child the tests start; a value already in the environment wins.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
# One OpenMP thread per process: the suite runs several processes per core, and with two threads each their
# synchronisation takes more CPU than the work (4 processes of 15 ResNet-50 steps at once on 2 cores: 69 s of
# CPU and 35 s with 2 threads each, 26 s and 13 s with 1).  As above, a value already in the environment wins.
os.environ.setdefault("OMP_NUM_THREADS", "1")

# Tests that stop a child with SIGINT (Ctrl-C) need it to start with SIGINT at its default, as from a terminal.
# A runner that starts the suite as a background job of a non-interactive shell (`cmd &`) starts it with
# SIGINT ignored, and every child inherits that: it then ignores the test's SIGINT, and the test waits out
# its timeout (one CI run: both SIGINT owners of test_faults and the SIGINT bench).  It passed only where an
# earlier test on the same worker had happened to set a SIGINT handler.  Python's own handler here gives
# every child the default back (a handled signal is reset at exec; an ignored one is not).
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)
# Likewise SIGHUP: a suite started under `nohup` starts with SIGHUP ignored, every child inherits that, and mountctl
# leaves an ignored SIGHUP alone (as nohup asks), so the owner-signal tests' SIGHUP went unheard and they timed out.
# A handler here is reset to the default in each child at exec; this process still outlives a hangup, as asked.
if signal.getsignal(signal.SIGHUP) is signal.SIG_IGN:
    signal.signal(signal.SIGHUP, lambda signum, frame: None)
# A stopped run (a CI limit's SIGTERM, `timeout`, a scheduler) must end what its fixtures started: weed servers,
# far-store proxies, mounts, and the worker's /tmp/mctl-gw* folder. Python dies of SIGTERM without unwinding, so the
# first one becomes KeyboardInterrupt, which pytest answers by stopping and running every fixture's teardown (the
# controller and each xdist worker alike); later ones are ignored, so that the teardown is not cut short. A process
# forked from this one (a DataLoader worker) still dies of it, as it did before.
_SUITE_PID = os.getpid()
_finishing = False


def _stop_the_run(signum: int, frame: object) -> None:
    global _finishing
    if os.getpid() != _SUITE_PID:
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)
        return
    if _finishing:
        return
    _finishing = True
    raise KeyboardInterrupt(f"the test run was stopped by signal {signum}: ending what its fixtures started")


if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
    signal.signal(signal.SIGTERM, _stop_the_run)

from mountctl.local_s3.server import LocalS3  # noqa: E402
from mountctl.mounts.backends import BACKENDS  # noqa: E402
from mountctl.mounts.mounttable import read_mount_table  # noqa: E402
from mountctl.s3 import client as s3_client  # noqa: E402


def missing(reason: str) -> None:
    """Skip locally, fail on CI: a missing prerequisite must never pass silently there."""
    if ON_CI:
        pytest.fail(f"CI=true and {reason}; scripts/setup.sh should have installed it")
    pytest.skip(reason)


def require_fuse() -> None:
    if not os.path.exists("/dev/fuse"):
        missing("/dev/fuse is not available")
    if shutil.which("fusermount3") is None:
        missing("fusermount3 is not installed (apt-get install fuse3)")


@pytest.fixture(autouse=True)
def _aws_environment_restored():
    """The s3io route writes resolved keys into the process environment (s3torchconnector reads keys
    only from the standard chain): undo that after every test so one test's server never leaks into another."""
    saved = {k: v for k, v in os.environ.items() if k.startswith("AWS_")}
    yield
    for name in [n for n in os.environ if n.startswith("AWS_")]:
        del os.environ[name]
    os.environ.update(saved)


@pytest.fixture(scope="session")
def local_s3():
    server = LocalS3(os.path.join(_SESSION_HOME, "local-s3"), ends_with_owner=True)  # even a SIGKILLed run's stops
    try:
        server.weed()
    except Exception as exc:
        missing(f"the local S3 server cannot start: {exc}")
    server.start()
    pid, ports = server.status().pid, server_ports(server)
    yield server
    server.stop()
    left = server_files_in_tmp(pid, ports)
    assert not left, f"the local S3 server left files in the temp dir: {left}"


def server_ports(server: LocalS3) -> list[int]:
    with open(os.path.join(server.dir, "server.json")) as f:
        ports = json.load(f)["ports"].values()
    return [number for port in ports for number in (port, port + 10000)]  # HTTP and gRPC


def server_files_in_tmp(pid: int, ports: list[int], tmp_dir: str = "/tmp") -> list[str]:
    """What the weed with this pid and these ports wrote to the temp dir: glog files named
    by its pid, the weed.<LEVEL> links to them, gRPC sockets named by its ports.  Other weeds
    running beside this session (another checkout's tests) do not count."""
    found = []
    for name in os.listdir(tmp_dir):
        path = os.path.join(tmp_dir, name)
        if name.startswith("weed."):
            target = os.readlink(path) if os.path.islink(path) else name
            if target.endswith(f".{pid}"):
                found.append(name)
        elif name.startswith("seaweedfs-") and any(name.endswith(f"-{port}.sock") for port in ports):
            found.append(name)
    return sorted(found)


@pytest.hookimpl(wrapper=True)
def pytest_sessionfinish(session, exitstatus):
    """The folders go after the fixtures' teardown (pytest's own sessionfinish, inside the yield): the servers
    whose data they hold are stopped by then."""
    global _finishing
    _finishing = True  # a SIGTERM from here on must not cut the teardown short
    try:
        return (yield)
    finally:
        shutil.rmtree(_SESSION_HOME, ignore_errors=True)
        # Never remove through a mount a test left behind: its files are a bucket's objects.
        if _WORKER_TMP and not [e for e in read_mount_table() if e.mount_point.startswith(_WORKER_TMP)]:
            shutil.rmtree(_WORKER_TMP, ignore_errors=True)


@pytest.fixture
def s3_env(local_s3, monkeypatch):
    """Point the standard AWS variables at the local server, as `eval "$(mountctl local-s3 env)"` does."""
    for name in list(os.environ):
        if name.startswith("AWS_"):
            monkeypatch.delenv(name)
    for name, value in local_s3.env().items():
        monkeypatch.setenv(name, value)
    return local_s3.settings()


@pytest.fixture
def s3(s3_env):
    return s3_client(s3_env)


def make_bucket(s3, name: str) -> str:
    """Create a bucket and wait until it is visible (SeaweedFS shows it a moment later)."""
    s3.create_bucket(Bucket=name)
    s3.get_waiter("bucket_exists").wait(Bucket=name, WaiterConfig={"Delay": 0.1, "MaxAttempts": 100})
    return name


def remove_bucket(s3, name: str) -> None:
    """Empty a bucket and delete it."""
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=name):
        keys = [{"Key": obj["Key"]} for obj in page.get("Contents", [])]
        if keys:
            s3.delete_objects(Bucket=name, Delete={"Objects": keys})
    s3.delete_bucket(Bucket=name)


@pytest.fixture
def bucket(s3):
    """A fresh bucket per test, emptied and removed afterwards."""
    name = make_bucket(s3, f"t-{uuid.uuid4().hex[:12]}")
    yield name
    remove_bucket(s3, name)


@pytest.fixture(params=["mount-s3", "rclone", "s3fs"])
def backend(request):
    """Each test using this runs once per mount program."""
    name = request.param
    require_fuse()
    if not BACKENDS[name].available():
        missing(f"{name} is not installed; `bash scripts/setup.sh` installs or builds it")
    return name


def fuse_mounts_under(root: str) -> list[str]:
    return [e.mount_point for e in read_mount_table() if e.is_fuse and e.mount_point.startswith(root)]


def _fusectl_mounted() -> bool:
    return any(e.fs_type == "fusectl" for e in read_mount_table())


def mount_programs(*scopes: str) -> list[psutil.Process]:
    """Mount programs and mountctl supervisors whose command line names one of ``scopes``
    (this session's MOUNTCTL_HOME by default), so runs beside this one do not count."""
    scopes = scopes or (_SESSION_HOME,)
    found = []
    for process in psutil.process_iter(["name", "cmdline"]):
        try:
            cmd = process.info["cmdline"] or []
        except psutil.Error:
            continue
        if process.info["name"] in ("rclone", "s3fs", "mount-s3") or "mountctl.shared.supervisor" in cmd:
            if any(scope in " ".join(cmd) for scope in scopes):
                found.append(process)
    return found


@pytest.fixture
def mount_root(tmp_path):
    """A directory for mount points; the test fails if anything is left mounted or running under it."""
    root = tmp_path / "mnt"
    root.mkdir()
    before = {p.pid for p in mount_programs(_SESSION_HOME, str(tmp_path))}
    had_fusectl = _fusectl_mounted()
    yield root
    # Under pytest-xdist another worker's mountctl may hold the control filesystem for a moment (it mounts
    # it to abort a wedged connection, then unmounts it): a bounded wait tells that from a leak.  There, one
    # that was mounted when the test began and is gone now was another worker's (seen once in a CI run with 4
    # workers); alone, the test must leave it as it found it.
    shared = bool(os.environ.get("PYTEST_XDIST_WORKER"))

    def fusectl_left() -> bool:
        now = _fusectl_mounted()
        return now and not had_fusectl if shared else now != had_fusectl

    deadline = time.monotonic() + (10 if shared else 0)
    while fusectl_left() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not fusectl_left(), "the FUSE control filesystem mountctl mounted was left behind"
    leftover_mounts = fuse_mounts_under(str(tmp_path))

    def still_running() -> list[tuple[psutil.Process, str]]:
        found = []
        for p in mount_programs(_SESSION_HOME, str(tmp_path)):
            with contextlib.suppress(psutil.Error):  # gone or a zombie meanwhile: it ended
                if p.pid not in before and p.is_running() and p.status() != psutil.STATUS_ZOMBIE:
                    found.append((p, " ".join(p.cmdline())))
        return found

    # A supervisor that is exiting (unmounting, removing its cache) gets a bounded moment.
    deadline = time.monotonic() + 5
    while (leftover := still_running()) and time.monotonic() < deadline:
        time.sleep(0.1)
    leftover_procs = [p for p, _ in leftover]
    for path in leftover_mounts:
        os.system(f"fusermount3 -uz '{path}' 2>/dev/null")
    for process in leftover_procs:
        process.kill()
    assert not leftover_mounts, f"mounts left behind: {leftover_mounts}"
    assert not leftover_procs, f"processes left behind: {[cmd for _, cmd in leftover]}"
    run_dir = os.path.join(_SESSION_HOME, "run")
    leftover_dirs = [n for n in os.listdir(run_dir) if n.startswith("mount-")] if os.path.isdir(run_dir) else []
    assert not leftover_dirs, f"scratch directories left behind: {leftover_dirs}"


def new_children(before: set[int], wait_s: float = 5.0) -> list[str]:
    """Command lines of this process's children not in ``before`` still alive after a bounded wait
    (a mount supervisor that is unmounting gets a moment, as in the leak check above).  Python's
    multiprocessing resource tracker lives as long as this process by design: not a leak."""
    deadline = time.monotonic() + wait_s
    while True:
        alive = []
        for child in psutil.Process().children(recursive=True):
            with contextlib.suppress(psutil.Error):
                if (child.pid not in before and child.status() != psutil.STATUS_ZOMBIE
                        and "multiprocessing.resource_tracker" not in " ".join(child.cmdline())):
                    alive.append(" ".join(child.cmdline()))
        if not alive or time.monotonic() > deadline:
            return alive
        time.sleep(0.1)


@pytest.fixture(scope="session")
def sweep(local_s3, tmp_path_factory):
    """One tiny `resnet.py bench` run for the whole session: (config, result, report paths).

    The sweep is the suite's most expensive fixture, so every test that reads a sweep's cells shares this
    one (tests/test_bench.py).  What it assumes of the ``tiny`` preset: both stores (local and a real far
    proxy, here 5 ms per request), the installed mount programs, one dataset, two epochs, a bytes cell at
    2 readers, the checkpoint cells with DCP, and no peers (tests/test_peers.py has those).
    """
    require_fuse()
    from benchmarks.harness import preset, run_sweep, write_report

    settings = local_s3.settings()
    with pytest.MonkeyPatch.context() as patch:
        for name, value in local_s3.env().items():
            patch.setenv(name, value)  # the mount supervisor and the trainer resolve S3 from the environment
        client = s3_client(settings)
        make_bucket(client, "bench-test")
        out = tmp_path_factory.mktemp("bench-results")
        # A short far latency keeps the test quick; the far store is still a real proxy on its own port.
        config = preset("tiny", uri="s3://bench-test/bench/", out=str(out), progress=False, far_latency_ms=5.0)
        children = {p.pid for p in psutil.Process().children(recursive=True)}
        result = run_sweep(config, settings=settings)
        result["test_children_left"] = new_children(children)
        paths = write_report(result, config.out)
    return config, result, paths


# The end-to-end files that take longest, longest first (wall time per file in a 4-worker run).  Under
# pytest-xdist each file runs whole on one worker (--dist loadfile keeps its module fixtures to one start), in
# collection order (scripts/test.sh passes --no-loadscope-reorder: xdist would otherwise start the files with
# the most tests first): the long ones start first so that none of them is left running alone at the end.
_LONGEST_FIRST = ("test_gpu_pack.py", "test_own_data.py", "test_resume.py", "test_bench.py", "test_torch_e2e.py", "test_key_rotation.py",
                  "test_slurm.py", "test_examples.py", "test_peers.py", "test_own_data_features.py",
                  "test_throttling.py", "test_mapstyle.py", "test_faults.py", "test_checkpoints.py",
                  "test_s3_outage.py", "test_own_data_examples.py", "test_mlperf.py", "test_settings_routes.py",
                  "test_object_versions.py", "test_mount_backends.py", "test_big_prefix.py",
                  "test_examples_fallback.py", "test_checkpoint_faults.py", "test_mount_cache.py")


def pytest_collection_modifyitems(config, items):
    rank = {name: i for i, name in enumerate(_LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: a file's own order stays
