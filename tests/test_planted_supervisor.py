"""`mountctl mount` run from a directory another user can write never imports a package planted there.

The supervisor of every mount is a `python -m` child; started in the caller's directory, a `mountctl/` package
planted there (in /tmp, say) ran as root in its place.  Real server, real mount-s3, the real command line.
"""

from __future__ import annotations

import os
import subprocess
import sys

from mountctl.mounts.backends import BACKENDS

from conftest import missing, require_fuse

MOUNTCTL = os.path.join(os.path.dirname(sys.executable), "mountctl")


def test_mount_from_a_directory_with_a_planted_mountctl_package_never_runs_it(s3, bucket, mount_root, tmp_path):
    require_fuse()
    if not BACKENDS["mount-s3"].available():
        missing("mount-s3 is not installed; `bash scripts/setup.sh` builds it")
    s3.put_object(Bucket=bucket, Key="hello.txt", Body=b"hi")
    scratch, marker = tmp_path / "scratch", tmp_path / "planted-code-ran"
    (scratch / "mountctl").mkdir(parents=True)
    (scratch / "mountctl" / "__init__.py").write_text(f"open({str(marker)!r}, 'w').write('ran')\n")
    os.chmod(scratch, 0o1777)
    mnt = str(mount_root / "m")
    env = {**os.environ, "PYTHONPATH": ""}  # an empty PYTHONPATH also names the working directory
    done = subprocess.run([MOUNTCTL, "mount", f"s3://{bucket}/", mnt, "--backend", "mount-s3"], cwd=scratch,
                          env=env, capture_output=True, text=True, timeout=120)
    try:
        assert done.returncode == 0, done.stderr
        with open(os.path.join(mnt, "hello.txt"), "rb") as f:
            assert f.read() == b"hi"
    finally:
        subprocess.run([MOUNTCTL, "unmount", mnt], env=env, capture_output=True, timeout=120)
    assert not marker.exists(), "the supervisor imported the mountctl package planted in the working directory"
