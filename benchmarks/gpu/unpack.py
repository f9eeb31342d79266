"""Unpack the GPU pack for the Python running this: its wheels into a target directory, its binaries beside it.

Run by ``run.sh`` on the GPU machine, before anything of the project can be imported, so it uses the standard
library and pip alone.  The wheels that run needs are those ``wheels.txt`` names (always installed: the machine
lacks them, or, like fsspec, has another release than the one s3fs pins) and those ``wheels-if-older.txt`` names
(installed only where the machine's own copy is missing or older: a newer aiohttp there is kept).  A wheel is
chosen by the running Python's tag, so one pack serves Python 3.12 (the GPU machine) and, with the extra wheels
``scripts/gpu.sh pack --also-python 3.11`` adds, this repository's CPU test.

Nothing is installed or unpacked before every file ``MANIFEST.json`` lists has its recorded size and sha256 (a
pack corrupted or changed on its way is refused, naming the file), and only listed files are used.  The mount-s3
bundle may hold regular files and folders only, each inside the destination: a member named ``bin/../../x``, an
absolute one, a link or a device refuses the pack before anything of it is written.

    python3 unpack.py --pack .gpu --target /tmp/x/site --bin /tmp/x
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.metadata
import json
import lzma
import os
import re
import shutil
import subprocess
import sys
import tarfile
import time
from pathlib import Path

_WHEEL = re.compile(r"^(?P<name>[^-]+)-(?P<version>[^-]+)(-\d[^-]*)?-(?P<py>[^-]+)-(?P<abi>[^-]+)-(?P<plat>[^-]+)\.whl$")


BINARIES = ("bin/rclone.xz", "bin/mount-s3.tar.xz")  # what unpack_binaries reads from the pack


class PackError(Exception):
    """The pack cannot serve this machine: the message says what is missing and what to do."""


def normalized(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def listed(path: Path) -> list[str]:
    """Distribution names of a list file: one a line, '#' starts a comment."""
    names = []
    for line in path.read_text().splitlines():
        name = line.split("#", 1)[0].strip()
        if name:
            names.append(normalized(name))
    return names


def python_tag() -> str:
    return f"cp{sys.version_info.major}{sys.version_info.minor}"


def fits_this_python(filename: str) -> bool:
    """A pure wheel, or a binary one built for this CPython on x86-64 Linux (what the pack holds)."""
    match = _WHEEL.match(filename)
    if match is None:
        return False
    if match["plat"] == "any":
        return True
    return python_tag() in match["py"].split(".") and "x86_64" in match["plat"] and "linux" in match["plat"]


def version_key(version: str) -> tuple[int, ...]:
    """Release numbers only (``3.14.5`` -> (3, 14, 5)); enough to tell older from newer among releases."""
    return tuple(int(part) for part in re.findall(r"\d+", version.split("+")[0])[:4])


def choose_wheels(pack: Path) -> tuple[list[Path], list[str]]:
    """(the wheel files to install here, one line per conditional wheel on why it was or was not chosen)."""
    folders = [pack / "wheels", pack / f"wheels-py{sys.version_info.major}.{sys.version_info.minor}"]
    by_name: dict[str, list[Path]] = {}
    for folder in folders:
        for path in sorted(folder.glob("*.whl")) if folder.is_dir() else []:
            if fits_this_python(path.name):
                by_name.setdefault(normalized(_WHEEL.match(path.name)["name"]), []).append(path)  # type: ignore[index]
    twice = sorted(name for name, paths in by_name.items() if len(paths) > 1)
    if twice:
        raise PackError(f"the pack holds two wheels of {', '.join(twice)} for Python {sys.version.split()[0]}; "
                        "pack again: bash scripts/gpu.sh pack")
    required, optional = listed(pack / "wheels.txt"), listed(pack / "wheels-if-older.txt")
    missing = [name for name in required + optional if name not in by_name]
    if missing:
        hint = ("pack again with `bash scripts/gpu.sh pack --also-python "
                f"{sys.version_info.major}.{sys.version_info.minor}`" if python_tag() != "cp312"
                else "pack again: bash scripts/gpu.sh pack")
        raise PackError(f"the pack has no wheel of {', '.join(missing)} for Python {sys.version.split()[0]} "
                        f"({python_tag()}); {hint}")
    chosen = [by_name[name][0] for name in required]
    notes = []
    for name in optional:
        wheel = by_name[name][0]
        ours = _WHEEL.match(wheel.name)["version"]  # type: ignore[index]
        try:
            theirs: str | None = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            theirs = None
        if theirs is None or version_key(theirs) < version_key(ours):
            chosen.append(wheel)
            notes.append(f"{name} {ours} (here: {theirs or 'none'})")
        else:
            notes.append(f"kept {name} {theirs}")
    return chosen, notes


def install(wheels: list[Path], target: Path) -> None:
    """pip into ``target`` without an index or dependencies: exactly these files, nothing fetched."""
    argv = [sys.executable, "-m", "pip", "install", "--quiet", "--no-index", "--no-deps", "--no-compile",
            "--no-cache-dir", "--disable-pip-version-check", "--target", str(target), *map(str, wheels)]
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        raise PackError("pip took over 300 s to install the pack's wheels; see whether the disk under "
                        f"{target} is full or slow") from None
    if done.returncode != 0:
        tail = "\n".join((done.stderr or done.stdout).strip().splitlines()[-5:])
        raise PackError(f"pip could not install the pack's wheels into {target} (exit {done.returncode}):\n{tail}")


def verify_pack(pack: Path) -> set[str]:
    """The files ``MANIFEST.json`` lists (paths relative to the pack), each checked against its size and sha256.

    Raises ``PackError`` naming the first file that is missing or differs: a truncated copy, a changed binary.
    """
    try:
        files = json.loads((pack / "MANIFEST.json").read_text())["files"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise PackError(f"{pack}/MANIFEST.json cannot be read ({exc}); pack again: bash scripts/gpu.sh pack") from None
    for name, recorded in sorted(files.items()):
        path = pack / name
        if not inside(path, pack) or not path.is_file() or path.is_symlink():
            raise PackError(f"the pack lacks {name}, which its MANIFEST.json lists; pack again: bash scripts/gpu.sh pack")
        digest = hashlib.sha256()
        with open(path, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                digest.update(block)
        if path.stat().st_size != recorded["bytes"] or digest.hexdigest() != recorded["sha256"]:
            raise PackError(f"{name} in the pack is not the file it was packed as (its sha256 is "
                            f"{digest.hexdigest()[:16]}..., MANIFEST.json records {str(recorded['sha256'])[:16]}...); "
                            "it was changed or damaged on its way: pack again (bash scripts/gpu.sh pack) and carry "
                            "the pack over again")
    return set(files)


def inside(path: Path, root: Path) -> bool:
    """Whether ``path``, ``..`` and links resolved, lies within ``root``."""
    return os.path.commonpath([os.path.realpath(path), os.path.realpath(root)]) == os.path.realpath(root)


def member_problem(member: tarfile.TarInfo, dest: Path) -> str | None:
    """Why the bundle's ``member`` may not be unpacked into ``dest``; None when it may.

    Our bundle holds regular files and folders (bin/, lib/) and nothing else, so anything else is refused rather
    than judged: a link cannot point out of ``dest`` when there is none.
    """
    if os.path.isabs(member.name) or member.name.startswith("/"):
        return "an absolute path"
    if not inside(dest / member.name, dest):
        return "a path outside the destination"
    if member.issym() or member.islnk():
        return f"a link (to {member.linkname}); the bundle holds regular files only"
    if not (member.isfile() or member.isdir()):
        return "neither a regular file nor a folder (a device or FIFO)"
    return None


def unpack_binaries(pack: Path, bin_root: Path) -> list[str]:
    """rclone (xz) and the mount-s3 bundle (tar.xz: bin/mount-s3, bin/fusermount3, lib/libfuse3.so.3)."""
    (bin_root / "bin").mkdir(parents=True, exist_ok=True)
    rclone, bundle_path = (pack / name for name in BINARIES)
    with lzma.open(rclone) as packed, open(bin_root / "bin" / "rclone", "wb") as out:
        shutil.copyfileobj(packed, out, 1 << 20)
    os.chmod(bin_root / "bin" / "rclone", 0o755)
    with tarfile.open(bundle_path, "r:xz") as bundle:
        members = bundle.getmembers()
        for member in members:  # every member is judged before the first is written
            problem = member_problem(member, bin_root)
            if problem is not None:
                raise PackError(f"bin/mount-s3.tar.xz holds {member.name!r}: {problem}; this pack was not made by "
                                "scripts/gpu.sh: nothing of it was unpacked; pack again")
        # tarfile's "data" filter (Python 3.12, and 3.11.4 on) checks again as it writes: paths, links, modes.
        data_filter = {"filter": "data"} if hasattr(tarfile, "data_filter") else {}
        files = [m for m in members if m.isfile()]
        for member in files:
            bundle.extract(member, bin_root, set_attrs=False, **data_filter)
            os.chmod(bin_root / member.name, 0o755)
    return ["bin/rclone", *(m.name for m in files)]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pack", required=True, type=Path, help="the pack (.gpu)")
    parser.add_argument("--target", required=True, type=Path, help="where the wheels go (then on PYTHONPATH)")
    parser.add_argument("--bin", required=True, type=Path, help="where bin/ and lib/ go (bin then on PATH)")
    args = parser.parse_args()
    started = time.monotonic()
    try:
        listed_files = verify_pack(args.pack)
        wheels, notes = choose_wheels(args.pack)
        used = [str(w.relative_to(args.pack)) for w in wheels] + list(BINARIES)
        unlisted = [name for name in used if name not in listed_files]
        if unlisted:
            raise PackError(f"the pack's {', '.join(unlisted)} is not in its MANIFEST.json (added after packing?), "
                            "so it cannot be checked; pack again: bash scripts/gpu.sh pack")
        install(wheels, args.target)
        binaries = unpack_binaries(args.pack, args.bin)
    except (PackError, OSError, tarfile.TarError, lzma.LZMAError) as exc:
        print(f"unpack: error: {exc}", file=sys.stderr)
        return 1
    names = ", ".join(_WHEEL.match(w.name)["name"] for w in wheels)  # type: ignore[index]
    print(f"unpack: {len(wheels)} wheels for {python_tag()} ({names}); {', '.join(notes)}; "
          f"{', '.join(binaries)}; {time.monotonic() - started:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
