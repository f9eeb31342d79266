"""The data cache of a mount, per installed mount program (real S3, real FUSE, a real small filesystem)."""

from __future__ import annotations

import contextlib
import hashlib
import os
import subprocess

import pytest

from mountctl import Mount, MountSpec
from mountctl.cache import mount_cache_dir

MIB = 1 << 20


def _read_all(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(MIB):
            digest.update(block)
    return digest.hexdigest()


@contextlib.contextmanager
def small_filesystem(path, size_mb: int):
    """A tmpfs of ``size_mb`` at ``path``: a disk that fills up on demand (needs root)."""
    path.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size_mb}m,mode=0700", "tmpfs", str(path)],
                          capture_output=True, text=True)
    if done.returncode != 0:
        pytest.fail(f"cannot mount a tmpfs for the full-disk case (root needed): {done.stderr.strip()}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


def test_full_cache_disk_never_fails_a_read(backend, bucket, s3, mount_root, tmp_path):
    # 192 MiB of objects through a cache whose disk holds 128 MiB, with a cap asked above the disk:
    # the disk runs full mid-read unless the program holds back, and every byte must come back right.
    objects = {f"part-{i}.bin": os.urandom(48 * MIB) for i in range(4)}
    for name, body in objects.items():
        s3.put_object(Bucket=bucket, Key=f"data/{name}", Body=body)
    with small_filesystem(tmp_path / "small", 128) as disk:
        spec = MountSpec(uri=f"s3://{bucket}/data/", mount_dir=str(mount_root / "m"), backend=backend,
                         cache_dir=str(disk), cache_size_mb=1000)
        with Mount(spec) as m:
            for name, body in objects.items():
                assert _read_all(os.path.join(m.path, name)) == hashlib.sha256(body).hexdigest(), name


def test_cache_directory_is_private_and_removed_with_the_mount(backend, bucket, s3, mount_root, tmp_path):
    s3.put_object(Bucket=bucket, Key="data/a.bin", Body=os.urandom(2 * MIB))
    spec = MountSpec(uri=f"s3://{bucket}/data/", mount_dir=str(mount_root / "m"), backend=backend,
                     cache_dir=str(tmp_path / "cache"), cache_size_mb=128)
    own = mount_cache_dir(spec.cache_dir, spec.mount_dir)
    with Mount(spec) as m:
        _read_all(os.path.join(m.path, "a.bin"))
        assert os.stat(own).st_mode & 0o777 == 0o700
    assert not os.path.exists(own)


def test_next_mount_of_an_overwritten_object_reads_the_new_bytes(backend, bucket, s3, mount_root, tmp_path):
    # Same size, so only a cache kept across mounts could serve the old bytes.
    old, new = os.urandom(4 * MIB), os.urandom(4 * MIB)
    s3.put_object(Bucket=bucket, Key="data/a.bin", Body=old)
    spec = MountSpec(uri=f"s3://{bucket}/data/", mount_dir=str(mount_root / "m"), backend=backend,
                     cache_dir=str(tmp_path / "cache"), cache_size_mb=128)
    with Mount(spec) as m:
        assert _read_all(os.path.join(m.path, "a.bin")) == hashlib.sha256(old).hexdigest()
    s3.put_object(Bucket=bucket, Key="data/a.bin", Body=new)
    with Mount(spec) as m:
        assert _read_all(os.path.join(m.path, "a.bin")) == hashlib.sha256(new).hexdigest()
