"""The demo mounts with every program mountctl can run, mount-s3 first, including mountctl's own mount-s3, which
lives off PATH in the venv's libexec/ (a fresh machine's demo once skipped it after `command -v` missed it).

A stand-in executable plays the built mount-s3: building the real one takes minutes, and what is tested is only
where mountctl looks for it.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

import mountctl

ROOT = Path(__file__).resolve().parents[2]


def test_mountctls_own_mount_s3_off_path_is_listed_first(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "libexec").mkdir()
    built = venv / "libexec" / "mount-s3"
    built.write_text("#!/bin/sh\necho 'mount-s3 built from mountpoint-s3-fs 0.0'\n")
    built.chmod(0o755)
    monkeypatch.setattr(sys, "executable", str(venv / "bin" / "python"))
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))  # on PATH: nothing at all
    assert mountctl.installed_backends() == ("mount-s3",)
    built.chmod(0o644)  # not runnable: not installed
    assert mountctl.installed_backends() == ()


def test_the_demo_asks_mountctl_which_programs_it_can_run_and_tries_mount_s3_first() -> None:
    demo = (ROOT / "scripts" / "demo.sh").read_text()
    assert "mountctl.installed_backends()" in demo
    assert not re.search(r"command -v \"?\$backend", demo), "command -v misses mountctl's own mount-s3"
    assert re.search(r"^for backend in mount-s3 ", demo, re.MULTILINE)
