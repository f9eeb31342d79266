"""A bench stopped with Ctrl-C (SIGINT) or SIGTERM stops what it started: the embedded S3, the far proxy, its mounts.

A real ``resnet.py bench --preset tiny`` with no URI (so it starts the embedded SeaweedFS of its own
``MOUNTCTL_HOME``) runs until its far-store nginx and a mount program are up, and is then sent the
signal, as a terminal's Ctrl-C or a scheduler's SIGTERM would send it.  It must exit 130 / 143 with
one line, and no weed, nginx or mount program of that run may be left.  The run's processes are told
apart from everyone else's by its own directory (its MOUNTCTL_HOME and TMPDIR): other runs on this
machine are neither counted nor touched.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time

import psutil
import pytest

from mountctl.local_s3.far_proxy import find_nginx
from mountctl.mounts.mounttable import read_mount_table

from conftest import missing, require_fuse

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MOUNT_PROGRAMS = ("rclone", "s3fs", "mount-s3")


def _of_run(scope: str) -> list[psutil.Process]:
    """Processes of the run: their command line or working directory lies under ``scope``."""
    found = []
    for process in psutil.process_iter(["name", "cmdline"]):
        with contextlib.suppress(psutil.Error):
            if process.pid == os.getpid() or process.status() == psutil.STATUS_ZOMBIE:
                continue
            if scope in " ".join(process.info["cmdline"] or []) or process.cwd().startswith(scope):
                found.append(process)
    return found


def _names(processes: list[psutil.Process]) -> set[str]:
    names = set()
    for process in processes:
        with contextlib.suppress(psutil.Error):
            names.add(process.name())
    return names


def _describe(processes: list[psutil.Process]) -> list[str]:
    described = []
    for process in processes:
        with contextlib.suppress(psutil.Error):
            described.append(f"{process.pid} {' '.join(process.cmdline())[:160]}")
    return described


def _up(scope: str, stage: str) -> bool:
    names = _names(_of_run(scope))
    if stage == "server":
        return "weed" in names
    return {"weed", "nginx"} <= names and bool(names & set(MOUNT_PROGRAMS))


# Ctrl-C in a terminal signals the whole foreground process group (the DataLoader workers and cell processes
# too), once the far proxy and a mount are up; SIGTERM (`kill`, `timeout`) reaches the bench alone, as early as
# the embedded server is up, before any mount has been made.
@pytest.mark.parametrize("signum, code, stage, group", [(signal.SIGINT, 130, "mount", True),
                                                         (signal.SIGTERM, 143, "server", False),
                                                         (signal.SIGTERM, 143, "mount", False)],
                         ids=["INT", "TERM-early", "TERM"])
def test_an_interrupted_bench_leaves_no_server_proxy_or_mount_of_its_own(signum, code, stage, group, tmp_path):
    require_fuse()
    if find_nginx() is None:
        missing("nginx is not installed (apt-get install nginx-light libnginx-mod-http-lua)")
    scope = str(tmp_path)
    (tmp_path / "tmp").mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update(MOUNTCTL_HOME=str(tmp_path / "home"), TMPDIR=str(tmp_path / "tmp"), PYTHONPATH=ROOT)
    bench = subprocess.Popen([sys.executable, "resnet.py", "bench", "--preset", "tiny", "--store", "far", "--no-train",
                              "--no-progress", "--out", str(tmp_path / "out")],
                             cwd=ROOT, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE, text=True, start_new_session=True)
    err: list[str] = []
    reader = threading.Thread(target=lambda: err.extend(bench.stderr), daemon=True)  # type: ignore[arg-type]
    reader.start()
    try:
        deadline = time.monotonic() + 300
        while not _up(scope, stage):
            assert bench.poll() is None, f"the bench ended before its {stage} was up:\n{''.join(err)}"
            assert time.monotonic() < deadline, f"no {stage} up within 300s:\n{''.join(err)}"
            time.sleep(0.1)
        up = _describe(_of_run(scope))
        if group:
            os.killpg(bench.pid, signum)
        else:
            bench.send_signal(signum)
        bench.wait(timeout=240)  # unmount, proxy and server each have their own bounded stop
        reader.join(timeout=10)
        text = "".join(err)
        deadline = time.monotonic() + 10  # a process that has just exited gets a moment to be reaped
        while (left := _of_run(scope)) and time.monotonic() < deadline:  # weed, nginx, mounts, anything else
            time.sleep(0.1)
        mounts = [e.mount_point for e in read_mount_table() if e.mount_point.startswith(scope)]
        print(f"\n[bench stopped by {signal.Signals(signum).name} at {stage} up] exit {bench.returncode}; up when stopped: "
              f"{len(up)} processes; left: {_describe(left)}, mounts {mounts}")
        assert bench.returncode == code, text[-3000:]
        lines = [line for line in text.splitlines() if line.startswith("resnet.py bench:")]
        assert len(lines) == 1 and "Traceback" not in text, text[-3000:]
        assert lines[0].startswith("resnet.py bench: interrupted" if signum == signal.SIGINT else
                                   "resnet.py bench: stopped by SIGTERM"), lines
        # The cells measured before the stop are kept, marked as interrupted, and the one line says where.
        reports = sorted((tmp_path / "out").glob("bench-*.json")) if (tmp_path / "out").is_dir() else []
        if "kept the" in lines[0]:
            assert len(reports) == 1 and str(reports[0]) in lines[0], lines
            kept = json.loads(reports[0].read_text())
            assert kept["interrupted"] is True and kept["cells"] and kept["cells_planned"] > len(kept["cells"])
            # Each kept cell names its store, the one under way when the run stopped too: the report's tables
            # are by store (without it the far limit's row left the side-by-side table).
            assert all(c.get("store") == "far" for c in kept["cells"]), [(c["cell"], c.get("store")) for c in
                                                                        kept["cells"]]
            assert "Interrupted" in reports[0].with_suffix(".md").read_text()
        else:
            assert not reports, "a report was written but the line does not say so"
        if stage == "mount":  # the far store's raw GET limit is measured before any mount is made
            assert reports, f"the cells measured before Ctrl-C were not kept: {lines}"
        assert not left, f"left running after the bench exited: {_describe(left)}"
        assert not mounts, f"left mounted: {mounts}"
    finally:
        if bench.poll() is None:
            bench.kill()
            bench.wait(timeout=30)
        for process in _of_run(scope):  # whatever a failed run left, so that nothing outlives the test
            with contextlib.suppress(psutil.Error):
                process.kill()
        for entry in read_mount_table():
            if entry.mount_point.startswith(scope):
                subprocess.run(["fusermount3", "-uz", entry.mount_point], capture_output=True, timeout=15)
