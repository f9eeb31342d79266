"""The GPU pack's unpacker refuses what the pack would not hold (issue 50, 1.3): a member outside the destination,
a link, a device, a file that is not the one packed.  Small real packs built in tmp_path with tarfile and lzma, laid
out as scripts/gpu.sh lays them out; nothing is faked."""

from __future__ import annotations

import hashlib
import importlib.util
import io
import json
import lzma
import tarfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _load_unpack():
    spec = importlib.util.spec_from_file_location("gpu_unpack", ROOT / "benchmarks" / "gpu" / "unpack.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


unpack = _load_unpack()

GOOD = (("bin/mount-s3", b"#!/bin/sh\necho mount-s3\n"), ("bin/fusermount3", b"#!/bin/sh\n"),
        ("lib/libfuse3.so.3", b"\x7fELF not really\n"))


def _member(name: str, data: bytes = b"", kind: bytes = tarfile.REGTYPE, link: str = "") -> tuple[tarfile.TarInfo,
                                                                                                   bytes]:
    info = tarfile.TarInfo(name)
    info.type, info.linkname, info.size, info.mode = kind, link, len(data) if kind == tarfile.REGTYPE else 0, 0o755
    return info, data


def _pack(root: Path, members: list[tuple[tarfile.TarInfo, bytes]]) -> Path:
    """A pack as gpu.sh writes it (no wheels): bin/rclone.xz, bin/mount-s3.tar.xz, the lists, MANIFEST.json."""
    pack = root / ".gpu"
    (pack / "bin").mkdir(parents=True)
    (pack / "wheels").mkdir()
    (pack / "bin" / "rclone.xz").write_bytes(lzma.compress(b"#!/bin/sh\necho rclone\n"))
    with tarfile.open(pack / "bin" / "mount-s3.tar.xz", "w:xz") as bundle:
        for info, data in members:
            bundle.addfile(info, io.BytesIO(data) if info.isfile() else None)
    for name in ("wheels.txt", "wheels-if-older.txt"):
        (pack / name).write_text("# none\n")
    files = {str(p.relative_to(pack)): {"bytes": p.stat().st_size, "sha256": hashlib.sha256(p.read_bytes()).hexdigest()}
             for p in sorted(pack.rglob("*")) if p.is_file()}
    (pack / "MANIFEST.json").write_text(json.dumps({"files": files}))
    return pack


def _nothing_written_outside(root: Path, before: set[Path]) -> None:
    assert {p for p in root.rglob("*")} - before <= {p for p in (root / "dest").rglob("*")} | {root / "dest"}


def test_a_pack_as_gpu_sh_makes_it_unpacks_its_binaries_executable(tmp_path: Path) -> None:
    pack = _pack(tmp_path, [_member(name, data) for name, data in GOOD])
    assert unpack.verify_pack(pack) >= {"bin/rclone.xz", "bin/mount-s3.tar.xz", "wheels.txt"}
    written = unpack.unpack_binaries(pack, tmp_path / "dest")
    assert written == ["bin/rclone", *(name for name, _ in GOOD)]
    for name, data in GOOD:
        assert (tmp_path / "dest" / name).read_bytes() == data
        assert (tmp_path / "dest" / name).stat().st_mode & 0o777 == 0o755
    assert (tmp_path / "dest" / "bin" / "rclone").read_bytes() == b"#!/bin/sh\necho rclone\n"


@pytest.mark.parametrize(("member", "problem"), [
    (_member("bin/../../x", b"planted\n"), "outside the destination"),
    (_member("bin/../../../tmp/planted-by-a-pack", b"planted\n"), "outside the destination"),
    (_member("/tmp/planted-by-a-pack", b"planted\n"), "an absolute path"),
    (_member("bin/passwd", kind=tarfile.SYMTYPE, link="/etc/passwd"), "a link"),
    (_member("bin/up", kind=tarfile.SYMTYPE, link="../../.."), "a link"),
    (_member("bin/hard", kind=tarfile.LNKTYPE, link="../../x"), "a link"),
    (_member("bin/fuse", kind=tarfile.CHRTYPE), "a device or FIFO"),
], ids=["dot-dot", "dot-dot-deep", "absolute", "symlink-out", "symlink-up", "hardlink", "device"])
def test_a_bundle_member_outside_the_destination_or_not_a_file_refuses_the_pack_before_any_is_written(
        tmp_path: Path, member: tuple[tarfile.TarInfo, bytes], problem: str) -> None:
    pack = _pack(tmp_path, [_member(*GOOD[0]), member, _member(*GOOD[1])])
    before = set(tmp_path.rglob("*"))
    with pytest.raises(unpack.PackError) as refused:
        unpack.unpack_binaries(pack, tmp_path / "dest")
    assert repr(member[0].name) in str(refused.value) and problem in str(refused.value)
    assert not (tmp_path / "dest" / "bin" / "mount-s3").exists()  # judged before the first member was written
    _nothing_written_outside(tmp_path, before)
    assert not Path("/tmp/planted-by-a-pack").exists()


@pytest.mark.parametrize("damaged", ["bin/rclone.xz", "bin/mount-s3.tar.xz", "wheels.txt"])
def test_a_file_that_differs_from_the_manifests_sha256_refuses_the_pack_naming_it(tmp_path: Path,
                                                                                   damaged: str) -> None:
    pack = _pack(tmp_path, [_member(name, data) for name, data in GOOD])
    data = bytearray((pack / damaged).read_bytes())
    data[len(data) // 2] ^= 0x01  # one bit, same size: only the hash tells
    (pack / damaged).write_bytes(bytes(data))
    with pytest.raises(unpack.PackError) as refused:
        unpack.verify_pack(pack)
    assert str(refused.value).startswith(f"{damaged} in the pack is not the file it was packed as")


def test_a_file_the_manifest_lists_but_the_pack_lacks_refuses_it(tmp_path: Path) -> None:
    pack = _pack(tmp_path, [_member(name, data) for name, data in GOOD])
    (pack / "bin" / "rclone.xz").unlink()
    with pytest.raises(unpack.PackError, match="the pack lacks bin/rclone.xz"):
        unpack.verify_pack(pack)


def test_the_command_refuses_a_damaged_pack_before_installing_anything(tmp_path: Path, monkeypatch, capsys) -> None:
    pack = _pack(tmp_path, [_member(name, data) for name, data in GOOD])
    (pack / "bin" / "mount-s3.tar.xz").write_bytes(b"not the bundle")
    monkeypatch.setattr("sys.argv", ["unpack.py", "--pack", str(pack), "--target", str(tmp_path / "site"),
                                     "--bin", str(tmp_path / "dest")])
    assert unpack.main() == 1
    assert "unpack: error: bin/mount-s3.tar.xz in the pack is not the file it was packed as" in capsys.readouterr().err
    assert not (tmp_path / "site").exists() and not (tmp_path / "dest").exists()


def test_a_wheel_added_after_packing_is_refused_unchecked(tmp_path: Path, monkeypatch, capsys) -> None:
    """A wheel dropped into wheels/ after MANIFEST.json was written would be installed without a hash to check."""
    pack = _pack(tmp_path, [_member(name, data) for name, data in GOOD])
    (pack / "wheels.txt").write_text("planted\n")
    manifest = json.loads((pack / "MANIFEST.json").read_text())
    manifest["files"]["wheels.txt"] = {"bytes": 8, "sha256": hashlib.sha256(b"planted\n").hexdigest()}
    (pack / "MANIFEST.json").write_text(json.dumps(manifest))
    (pack / "wheels" / "planted-1.0-py3-none-any.whl").write_bytes(b"PK")
    monkeypatch.setattr("sys.argv", ["unpack.py", "--pack", str(pack), "--target", str(tmp_path / "site"),
                                     "--bin", str(tmp_path / "dest")])
    assert unpack.main() == 1
    assert "wheels/planted-1.0-py3-none-any.whl is not in its MANIFEST.json" in capsys.readouterr().err
    assert not (tmp_path / "site").exists()
