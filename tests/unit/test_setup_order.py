"""scripts/setup.sh's stages: the mount-s3 build starts once its own Debian packages are in and runs beside the rest,
and a setup stopped early ends the build's whole process group.

The real setup.sh runs here, in a copy of the repository's layout, against stand-ins for apt-get, sudo, uv, the
venv's Python, build_mount_s3.sh and setup_dlio.sh: a real apt-get would change this machine's packages and a real
build takes minutes, so no real component can produce a fresh machine on demand. Each stand-in only logs what it
was asked to do (and, for the build, waits), so the log shows what ran, in what order and beside what.
"""

from __future__ import annotations

import os
import pathlib
import shutil
import signal
import subprocess
import time

import psutil

ROOT = pathlib.Path(__file__).resolve().parents[2]
# What setup.sh itself runs from the host: everything else it looks for must be missing (a "fresh machine").
HOST_TOOLS = ("bash", "cat", "cut", "dirname", "grep", "id", "setsid", "sha256sum", "sleep")

# The build waits (bounded) for the Python install to start, so it ends only if the two ran side by side.
BUILD = """#!/usr/bin/env bash
case "${1:-}" in
  --missing) echo cmake; echo libfuse3-dev; exit 0 ;;
  --check) exit 1 ;;
esac
echo "build start" >> "$LOG"
echo $$ > "$STATE/build.pid"
sleep "${BUILD_HOLD:-0}" & echo $! > "$STATE/sleep.pid"; wait
for _ in $(seq 100); do grep -q "^uv .*-r requirements.txt" "$LOG" && break; sleep 0.1; done
echo "build end" >> "$LOG"
"""
# The second apt-get install waits (bounded) for the build to have started.
APT_GET = """#!/usr/bin/env bash
if [ "$1" = install ] && [[ " $* " != *" cmake "* ]]; then
  for _ in $(seq 100); do grep -q "^build start" "$LOG" && break; sleep 0.1; done
fi
echo "apt-get $*" >> "$LOG"
"""
LOGGER = """#!/usr/bin/env bash
[ "${1:-}" = --version ] && { echo "uv 0.13.8"; exit 0; }
echo "NAME $*" >> "$LOG"
"""


def _write(path: pathlib.Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(0o755)


def _fresh_machine(tmp_path: pathlib.Path) -> tuple[pathlib.Path, dict[str, str]]:
    repo = tmp_path / "repo"
    shutil.copy(ROOT / "scripts" / "setup.sh", _dir(repo / "scripts") / "setup.sh")
    _write(repo / "scripts" / "build_mount_s3.sh", BUILD)
    _write(repo / "scripts" / "setup_dlio.sh", LOGGER.replace("NAME", "setup_dlio"))
    _write(repo / ".venv" / "bin" / "uv", LOGGER.replace("NAME", "uv"))
    _write(repo / ".venv" / "bin" / "python", LOGGER.replace("NAME", "python"))
    (repo / "requirements.txt").write_text("torch\n")
    (repo / "pyproject.toml").write_text("[project]\n")
    bin_dir = _dir(tmp_path / "bin")
    for tool in HOST_TOOLS + ("seq",):
        found = shutil.which(tool)
        assert found, f"{tool} is not installed"
        (bin_dir / tool).symlink_to(found)
    _write(bin_dir / "apt-get", APT_GET)
    _write(bin_dir / "sudo", '#!/usr/bin/env bash\nexec "$@"\n')
    (bin_dir / "env").symlink_to(shutil.which("env") or "/usr/bin/env")
    state = _dir(tmp_path / "state")
    env = {"PATH": str(bin_dir), "LOG": str(state / "log"), "STATE": str(state), "HOME": str(tmp_path)}
    return repo, env


def _dir(path: pathlib.Path) -> pathlib.Path:
    path.mkdir(parents=True, exist_ok=True)
    return path


def test_the_build_starts_after_its_packages_and_runs_beside_the_other_installs(tmp_path):
    repo, env = _fresh_machine(tmp_path)
    done = subprocess.run(["bash", str(repo / "scripts" / "setup.sh")], env=env, capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    log = pathlib.Path(env["LOG"]).read_text().splitlines()
    order = [_first(log, prefix) for prefix in (
        "apt-get install -y -qq cmake libfuse3-dev", "build start", "apt-get install -y -qq fuse3",
        "uv pip install -q --python .venv/bin/python --compile-bytecode -r requirements.txt", "build end")]
    assert order == sorted(order), log
    assert [line for line in log if line.startswith("apt-get update")] == ["apt-get update -qq"], log
    # Each foreground stage says how long it took, and the run its total.
    for label in ("the build's Debian packages", "Debian packages", "the Python packages", "the import check"):
        assert f"setup: {label} done in " in done.stdout, done.stdout
    assert "setup: ready after " in done.stdout.splitlines()[-1]


def test_a_setup_stopped_early_ends_the_builds_process_group(tmp_path):
    repo, env = _fresh_machine(tmp_path)
    env["BUILD_HOLD"] = "60"
    setup = subprocess.Popen(["bash", str(repo / "scripts" / "setup.sh")], env=env, stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        sleep_pid = pathlib.Path(env["STATE"]) / "sleep.pid"
        deadline = time.monotonic() + 30
        while not sleep_pid.exists() or not sleep_pid.read_text().strip():
            assert time.monotonic() < deadline, "the build never started"
            time.sleep(0.05)
        build = int((pathlib.Path(env["STATE"]) / "build.pid").read_text())
        hold = int(sleep_pid.read_text())
        setup.send_signal(signal.SIGTERM)
        assert setup.wait(timeout=30) == 130
        deadline = time.monotonic() + 10
        while _running(build) or _running(hold):
            assert time.monotonic() < deadline, "the build (or its child) outlived the stopped setup"
            time.sleep(0.05)
    finally:
        if setup.poll() is None:
            os.killpg(setup.pid, signal.SIGKILL)
            setup.wait(timeout=10)


def _first(log: list[str], prefix: str) -> int:
    found = [i for i, line in enumerate(log) if line.startswith(prefix)]
    assert found, f"{prefix!r} never ran: {log}"
    return found[0]


def _running(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False
