"""Examples run without a URI, like `resnet.py bench` and `demo`: on the embedded local S3, data made there.

The test session's own server is the embedded one here (``$MOUNTCTL_HOME`` is the session's), so the
examples find it running, use it and leave it running.
"""

from __future__ import annotations

import json

from conftest import fuse_mounts_under, require_fuse
from torch_support import run_example


def output(done) -> dict:
    assert done.returncode == 0, done.stderr[-3000:]
    assert "no URI given: using s3://mountctl/examples/" in done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_checkpoint_example_without_a_uri_uses_the_embedded_s3(s3_env, s3):
    result = output(run_example("checkpoint_s3.py"))
    assert result["checkpoint"].startswith("s3://mountctl/examples/checkpoints/")
    assert s3.list_objects_v2(Bucket="mountctl", Prefix="examples/checkpoints/")["KeyCount"] >= 1


def test_imagefolder_example_without_a_uri_makes_its_images_on_the_embedded_s3(s3_env, mount_root):
    require_fuse()
    result = output(run_example("imagefolder_over_mount.py"))
    assert result["images"] == 64 and result["classes"] == ["c0000", "c0001", "c0002", "c0003"]
    assert not fuse_mounts_under(str(mount_root))
