"""`resnet.py bench --suite mlperf`: DLIO's own unet3d workload reads through real mounts and leaves nothing behind.

Tiny on purpose (the ``tiny`` scale: 14 files of 64 KiB, one accelerator, one epoch):
it checks that DLIO 2.0.0 from ``.venv-dlio`` runs unmodified over local disk and over
each installed mount program (plain, and with its cache warmed ahead of DLIO) on the
far-store proxy, and that MLPerf Storage's figures
come back, not what they are.  Needs ``scripts/setup_dlio.sh`` (``scripts/setup.sh``
runs it); on CI a missing DLIO fails the test.
"""

from __future__ import annotations

import glob
import os
import tempfile
import time

import psutil

from benchmarks.harness.dlio import dlio_venv
from benchmarks.harness.mlperf import S3_DIRECT, MlperfConfig, run_mlperf
from mountctl import installed_backends
from mountctl.errors import InvalidSpec

from conftest import fuse_mounts_under, make_bucket, missing, require_fuse


def _dlio_installed() -> None:
    try:
        dlio_venv()
    except InvalidSpec as exc:
        missing(str(exc))


def _descendants_alive(before: set[int], wait_s: float = 10.0) -> list[str]:
    """This process's children not in ``before`` still alive after a bounded wait (multiprocessing's resource
    tracker lives as long as this process by design: not a leak)."""
    deadline = time.monotonic() + wait_s
    while True:
        alive = []
        for child in psutil.Process().children(recursive=True):
            try:
                if child.pid in before or child.status() == psutil.STATUS_ZOMBIE:
                    continue
                command = " ".join(child.cmdline())
            except psutil.Error:
                continue
            if "resource_tracker" not in command:
                alive.append(command)
        if not alive or time.monotonic() > deadline:
            return alive
        time.sleep(0.2)


def test_tiny_unet3d_through_each_mount_reports_au_and_leaves_nothing(s3, s3_env, mount_root):
    require_fuse()
    _dlio_installed()
    bucket = make_bucket(s3, "mlperf-test")
    home = os.environ["MOUNTCTL_HOME"]
    mounts_before = set(fuse_mounts_under(home))
    children_before = {p.pid for p in psutil.Process().children(recursive=True)}
    scratch_before = set(glob.glob(os.path.join(tempfile.gettempdir(), "mountctl-mlperf-*")))
    config = MlperfConfig(uri=f"s3://{bucket}/mlperf/", scale="tiny", workloads=("unet3d",), accelerators=(1,),
                          store="far", far_latency_ms=5.0, out=str(mount_root.parent / "out"))

    result = run_mlperf(config, settings=s3_env, progress=lambda _: None)

    measured = [r for r in result["runs"] if "accelerators" in r]
    routes = {r["route"] for r in measured}
    assert routes == {"local-disk", *(f"mount/{b}{w}" for b in installed_backends()
                                       for w in ("", "+no-warm" if b == "mount-s3" else "+warm")),
                      *(["mount/mount-s3+index"] if "mount-s3" in installed_backends() else [])}
    for run in measured:
        assert run["status"] == "ok", run
        assert run["accelerators"] == 1 and run["epochs"] == 1
        assert 0.0 < run["au_pct"] <= 100.0, run
        assert run["samples_per_s"] > 0.0, run
    assert {r["store"] for r in measured if r["route"] != "local-disk"} == {"far"}
    assert [r["status"] for r in result["runs"] if r["route"] == S3_DIRECT] and result["stores"]["far"]["latency_ms"]
    assert {row["route"] for row in result["kept"]} == routes
    # Nothing of the run outlives it: no mount, no mpirun, rank or DataLoader worker, no scratch directory.
    assert set(fuse_mounts_under(home)) == mounts_before
    assert _descendants_alive(children_before) == []
    assert set(glob.glob(os.path.join(tempfile.gettempdir(), "mountctl-mlperf-*"))) == scratch_before
