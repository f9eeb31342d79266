"""The pack's wheels: what ``wheels.txt`` and ``wheels-if-older.txt`` name, at the versions requirements.txt pins,
for one CPython version on x86-64 Linux.  Run by ``scripts/gpu.sh pack``.

Downloads go to a cache folder (``--cache``) and a wheel already there is not asked for again, so a second pack
needs no network.  s3torchconnector is published as an sdist only: its pure-Python wheel is built here once.

    python pack_wheels.py --python 3.12 --into .gpu/wheels --cache ~/.cache/mountctl/gpu-pack
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
# manylinux tags pip must be told one by one (it matches each exactly); these cover every wheel the lists name.
PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64",
             "manylinux_2_5_x86_64", "manylinux1_x86_64")
SDIST_ONLY = ("s3torchconnector",)
_WHEEL = re.compile(r"^(?P<name>[^-]+)-(?P<version>[^-]+)(-\d[^-]*)?-(?P<py>[^-]+)-(?P<abi>[^-]+)-(?P<plat>[^-]+)\.whl$")


def normalized(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def listed(path: Path) -> list[str]:
    return [normalized(n) for n in (line.split("#", 1)[0].strip() for line in path.read_text().splitlines()) if n]


def pins(requirements: Path) -> dict[str, str]:
    """name -> version of every ``name==version`` line (the one place versions are written)."""
    found = {}
    for line in requirements.read_text().splitlines():
        spec = line.split("#", 1)[0].strip()
        if "==" in spec:
            name, version = spec.split("==", 1)
            found[normalized(name)] = version.strip()
    return found


def fits(filename: str, name: str, version: str, tag: str) -> bool:
    match = _WHEEL.match(filename)
    if match is None or normalized(match["name"]) != name or match["version"] != version:
        return False
    return match["plat"] == "any" or (tag in match["py"].split(".") and "x86_64" in match["plat"])


def cached(folder: Path, name: str, version: str, tag: str) -> Path | None:
    hits = sorted(p for p in folder.glob("*.whl") if fits(p.name, name, version, tag)) if folder.is_dir() else []
    return hits[0] if hits else None


def fetch(names: list[str], versions: dict[str, str], python: str, cache: Path) -> list[Path]:
    """One wheel per name for CPython ``python`` (e.g. "3.12"), from the cache or the registry."""
    tag = "cp" + python.replace(".", "")
    folder = cache / "wheels"
    folder.mkdir(parents=True, exist_ok=True)
    unpinned = [n for n in names if n not in versions]
    if unpinned:
        sys.exit(f"gpu.sh: requirements.txt pins no version of {', '.join(unpinned)}; pin it there first")
    wanted = [(n, versions[n]) for n in names if cached(folder, n, versions[n], tag) is None]
    binary = [f"{n}=={v}" for n, v in wanted if n not in SDIST_ONLY]
    if binary:
        argv = [sys.executable, "-m", "pip", "download", "--quiet", "--disable-pip-version-check", "--no-deps",
                "--only-binary=:all:", "--python-version", python, "--implementation", "cp",
                *(f"--platform={p}" for p in PLATFORMS), "--dest", str(folder), *binary]
        if subprocess.run(argv).returncode != 0:
            sys.exit(f"gpu.sh: pip could not download {' '.join(binary)} for Python {python}; see pip's message above")
    for name, version in wanted:
        if name in SDIST_ONLY:
            argv = [sys.executable, "-m", "pip", "wheel", "--quiet", "--disable-pip-version-check", "--no-deps",
                    "--no-binary", name, "--wheel-dir", str(folder), f"{name}=={version}"]
            if subprocess.run(argv).returncode != 0:
                sys.exit(f"gpu.sh: building the wheel of {name}=={version} from its sdist failed; see pip above")
    found = {n: cached(folder, n, versions[n], tag) for n in names}
    absent = [n for n, path in found.items() if path is None]
    if absent:
        sys.exit(f"gpu.sh: no wheel of {', '.join(absent)} for Python {python} on x86-64 Linux after downloading")
    return [path for path in found.values() if path is not None]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--python", required=True, help="CPython version the wheels are for, e.g. 3.12")
    parser.add_argument("--into", required=True, type=Path, help="folder the chosen wheels are copied into")
    parser.add_argument("--cache", required=True, type=Path, help="download cache (kept between packs)")
    parser.add_argument("--binary-only", action="store_true",
                        help="copy only the binary wheels (the extra Python's: the pure ones are packed already)")
    args = parser.parse_args()
    names = listed(HERE / "wheels.txt") + listed(HERE / "wheels-if-older.txt")
    wheels = fetch(names, pins(REPO / "requirements.txt"), args.python, args.cache)
    args.into.mkdir(parents=True, exist_ok=True)
    for path in wheels:
        if not (args.binary_only and path.name.endswith("-any.whl")):
            shutil.copy2(path, args.into / path.name)
    return 0


if __name__ == "__main__":
    sys.exit(main())
