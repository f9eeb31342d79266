"""A Python child of ours never imports from the caller's working directory.

`python -m` puts the working directory first on sys.path: a `mountctl/` package planted in a directory another
user can write (/tmp, a shared scratch folder) would run in our place, as root.  These tests plant one and start
the warm's reader (a real child process over a local directory) from there.
"""

from __future__ import annotations

import os
import sys

from mountctl.mounts.warm import Warmer
from mountctl.processes import CHILD_CWD, python_child_env, python_module_argv


def plant(directory, marker) -> None:
    """A `mountctl` package that leaves ``marker`` behind if it is ever imported."""
    package = directory / "mountctl"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text(f"open({str(marker)!r}, 'w').write('planted code ran')\n")
    os.chmod(directory, 0o1777)  # world-writable, as /tmp is


def test_the_warm_started_from_a_directory_with_a_planted_package_never_runs_it(tmp_path, monkeypatch):
    data = tmp_path / "data"
    data.mkdir()
    (data / "a.bin").write_bytes(b"x" * 1000)
    scratch, marker = tmp_path / "scratch", tmp_path / "ran"
    plant(scratch, marker)
    monkeypatch.chdir(scratch)
    report = Warmer(str(data), timeout_s=60).start().wait()
    assert not marker.exists(), "a package from the working directory was imported by the warm"
    assert (report.files, report.bytes) == (1, 1000)


def test_a_relative_root_is_passed_on_absolute(tmp_path, monkeypatch):
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "a.bin").write_bytes(b"y" * 10)
    monkeypatch.chdir(tmp_path)
    assert Warmer("data", timeout_s=60).start().wait().bytes == 10


def test_pythonpath_loses_its_entries_that_mean_the_working_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    env = python_child_env({"PYTHONPATH": os.pathsep.join(["", "lib", "/opt/x", ""]), "PYTHONSAFEPATH": ""})
    assert env["PYTHONPATH"] == os.pathsep.join([str(tmp_path / "lib"), "/opt/x"])
    assert "PYTHONSAFEPATH" not in env
    assert "PYTHONPATH" not in python_child_env({"PYTHONPATH": ":"})


def test_the_child_command_line_names_the_module_and_keeps_the_working_directory_off_sys_path():
    argv = python_module_argv("mountctl.shared.supervisor", "/mnt/a", "/log")
    assert argv[-4:] == ["-m", "mountctl.shared.supervisor", "/mnt/a", "/log"]
    assert "-P" in argv or sys.version_info < (3, 11)
    assert CHILD_CWD == "/" and os.stat(CHILD_CWD).st_uid == 0
