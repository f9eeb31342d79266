"""The README's quick starts as a new user runs them (issue 36.10): a fresh bash whose environment is only
PATH=/usr/bin:/bin and HOME, from the repository root, each command exactly as README.md prints it (read from the
page, not retyped here), against the embedded local S3 the quick start itself starts. And outside .venv,
`resnet.py` and `python -m mountctl` stop in one line that says to activate it, not in a traceback."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from conftest import require_fuse

ROOT = Path(__file__).resolve().parents[1]
CLEAN = {"PATH": "/usr/bin:/bin"}  # what `env -i` leaves, plus HOME (each test's own)
MOUNT_DIR = "/tmp/m"  # where the CLI quick start mounts, as printed


def readme_block(heading: str) -> str:
    """The first ```bash block under `## heading` in README.md, as printed."""
    text = (ROOT / "README.md").read_text()
    section = text.split(f"\n## {heading}\n", 1)[1].split("\n## ", 1)[0]
    found = re.search(r"^```bash\n(.*?)^```", section, re.S | re.M)
    assert found, f"README.md's '{heading}' has no bash block"
    return found.group(1)


def clean_bash(script: str, home: Path, timeout: float) -> subprocess.CompletedProcess:
    """`env -i PATH=/usr/bin:/bin HOME=... bash` in the repository root, stopping at the first failing command."""
    return subprocess.run(["/usr/bin/env", "-i", *(f"{k}={v}" for k, v in {**CLEAN, "HOME": str(home)}.items()),
                           "/bin/bash", "--noprofile", "--norc", "-e", "-o", "pipefail", "-c", script],
                          cwd=ROOT, capture_output=True, text=True, timeout=timeout)


@pytest.fixture
def new_user():
    """A user's HOME of their own (so the embedded S3's state is theirs), as short as a real one (weed's unix
    sockets live under it); whatever a failed run left is stopped."""
    home = Path(tempfile.mkdtemp(prefix="qs-", dir="/tmp"))
    yield home
    clean_bash(f"source .venv/bin/activate; mountctl unmount {MOUNT_DIR} || true; mountctl local-s3 stop", home,
               timeout=120)
    shutil.rmtree(home, ignore_errors=True)


def test_the_cli_quick_start_runs_as_printed_in_a_clean_shell(new_user):
    require_fuse()
    if os.path.exists(MOUNT_DIR) and os.listdir(MOUNT_DIR):
        pytest.fail(f"{MOUNT_DIR}, where the README's quick start mounts, is in use: the quick start cannot run here")
    block = readme_block("Quick start (CLI)")
    done = clean_bash(block, new_user, timeout=240)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    assert "\nhi{" in done.stdout  # cat /tmp/m/hello.txt through rclone (no newline in it), then the JSON
    assert '"backend": "rclone"' in done.stdout  # mountctl status --json
    assert "mounted s3://mountctl/ at /tmp/m with rclone" in done.stdout
    assert f"unmounted {MOUNT_DIR}" in done.stdout and "local S3 stopped" in done.stderr


@pytest.mark.timeout(900)
def test_the_training_quick_start_runs_as_printed_in_a_clean_shell(new_user):
    """The printed sizes are a first look a CPU finishes in a minute or two: this runs exactly those."""
    require_fuse()
    block = readme_block("Quick start (training)")
    done = clean_bash(block, new_user, timeout=840)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "Traceback" not in done.stderr
    summaries = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    made, trained, benched = summaries  # one JSON line each from make, train and bench
    assert made["images"] == trained["images"] == benched["epochs"][0]["images"] == 256
    assert trained["source_kind"] == "mountpoint" and trained["epochs"][0]["distinct_images"] == 256
    assert benched["source_kind"] == "s3io"
    assert "local S3 stopped" in done.stderr


@pytest.mark.parametrize("command", ["python3 -S resnet.py make s3://mountctl/t/ --num-images 10",
                                     "python3 -S -m mountctl local-s3 env"])
def test_outside_the_venv_a_command_says_to_activate_it_in_one_line(command, tmp_path):
    """`-S` leaves out site-packages: the system Python of a new user, whatever this machine has installed."""
    done = clean_bash(command, tmp_path, timeout=60)
    assert done.returncode == 1 and done.stdout == ""
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert "has no boto3" in done.stderr and "`source .venv/bin/activate`" in done.stderr
