"""Keys rotated in a credentials file mid-epoch: every source kind goes on and delivers every sample once.

The job reads with ``AWS_PROFILE`` and ``AWS_SHARED_CREDENTIALS_FILE`` only (no key variables).  After
the first batch a second key is added on the real server, the file switches to it, and the first key is
revoked (SeaweedFS identities added and revoked live through ``weed shell``).  The reader loop is the
training data path (``ShardDataset`` + ``EpochLoader``, 2 workers) without the model, to stay quick.
"""

from __future__ import annotations

import json
import logging
import os
import secrets
import time
import uuid

import pytest

from mountctl import resolve
from mountctl.pytorch.data.datasets.dataset import EpochLoader, ShardDataset
from mountctl.pytorch.data.index.manifest import load_manifest
from mountctl.pytorch.data.sources import MountpointOptions, open_source
from mountctl.shared import Registry

from conftest import require_fuse
from torch_support import make_tiny_dataset, read_epoch_through_a_fault

IMAGES = 96
PROFILE = "rotating"


def _write_credentials(path: str, key: str, secret: str, via: str = "file") -> None:
    """The profile's keys: in the credentials file, or (``process``) what its credential_process prints."""
    text = f"[{PROFILE}]\naws_access_key_id = {key}\naws_secret_access_key = {secret}\n" if via == "file" \
        else json.dumps({"Version": 1, "AccessKeyId": key, "SecretAccessKey": secret})
    # Replaced in one rename, as a credentials helper writes it: a reader never sees half a file.
    with open(path + ".new", "w") as f:
        f.write(text)
    os.chmod(path + ".new", 0o600)
    os.replace(path + ".new", path)


def _new_key() -> tuple[str, str]:
    return "ROT" + secrets.token_hex(8).upper(), secrets.token_urlsafe(24).replace("-", "x").replace("_", "y")


@pytest.mark.parametrize("kind,backend,via", [
    ("mountpoint", "mount-s3", "file"), ("mountpoint", "rclone", "file"), ("mountpoint", "s3fs", "file"),
    ("s3io", "auto", "file"),
    ("fsspec", "auto", "file"), ("mountpoint", "rclone", "process")],
    ids=["mountpoint-mount-s3", "mountpoint-rclone", "mountpoint-s3fs", "s3io", "fsspec",
         "mountpoint-rclone-credential-process"])
def test_rotated_and_revoked_key_mid_epoch_loses_and_repeats_no_sample(kind, backend, via, local_s3, s3_env, bucket,
                                                                       mount_root, tmp_path, monkeypatch):
    if kind == "mountpoint":
        require_fuse()
    uri = f"s3://{bucket}/data/"
    make_tiny_dataset(uri, num_images=IMAGES, image_size=32, shard_size="8KB")
    user = f"rot-{uuid.uuid4().hex[:8]}"
    key1, secret1 = _new_key()
    key2, secret2 = _new_key()
    local_s3.add_identity(user, key1, secret1)
    credentials = str(tmp_path / ("credentials" if via == "file" else "process.json"))
    _write_credentials(credentials, key1, secret1, via)
    config = tmp_path / "config"
    config.write_text(f"[profile {PROFILE}]\ncredential_process = /bin/cat {credentials}\n" if via == "process" else "")
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_PROFILE", PROFILE)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", credentials if via == "file" else str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(config))
    settings = resolve()
    assert settings.access_key_id == key1 and settings.credentials_from_chain
    assert settings.role_based == (via == "process")
    manifest = load_manifest(settings, uri)
    directory = str(mount_root / "m")

    def rotate() -> None:
        local_s3.add_identity(user, key2, secret2)
        _write_credentials(credentials, key2, secret2, via)
        local_s3.revoke_identity(user, key1)

    # The DataLoader workers (forked) inherit this handler: what they log about refreshing lands here.
    log_file = str(tmp_path / "mountctl.log")
    handler = logging.FileHandler(log_file)
    logging.getLogger("mountctl").addHandler(handler)
    try:
        options = MountpointOptions(backend=backend, mount_dir=directory)
        with open_source(kind, uri, settings, mountpoint=options) as source:
            dataset = ShardDataset(manifest, source, batch_size=4, seed=0)
            loader = EpochLoader(dataset, epoch_fn=lambda: 0, num_workers=2, timeout=120)
            started = time.monotonic()
            seen, rotated = read_epoch_through_a_fault(loader, rotate, step_s=0.1)
            if kind != "mountpoint":
                # On a quiet machine the workers can hold every remaining shard before the revocation has
                # taken hold.  A second epoch's first batch, read in this process with the keys the source
                # was opened with, meets the revoked key for certain, and its refresh is logged here.
                batches = iter(EpochLoader(dataset, epoch_fn=lambda: 1, num_workers=0))
                assert len(next(batches)["index"]) == 4
                del batches
            record = Registry().read(directory) if kind == "mountpoint" else None
            restarts = record.restarts if record is not None else None
            events = [event["event"] for event in record.events] if record is not None else []
            if via == "process":  # rclone was given the chain (env_auth), not the keys
                with open(f"/proc/{record.program_pid}/environ", "rb") as f:
                    environ = dict(item.split(b"=", 1) for item in f.read().split(b"\0") if b"=" in item)
                assert environ.get(b"RCLONE_CONFIG_MOUNTCTL_ENV_AUTH") == b"true"
                assert b"RCLONE_CONFIG_MOUNTCTL_ACCESS_KEY_ID" not in environ and b"AWS_ACCESS_KEY_ID" not in environ
    finally:
        logging.getLogger("mountctl").removeHandler(handler)
        handler.close()
        local_s3.revoke_identity(user, key2)
    with open(log_file) as f:
        output = f.read()
    print(f"\n[key rotation, {kind}/{backend}] samples {len(seen)} distinct {len(set(seen))} of {IMAGES}; epoch "
          f"{time.monotonic() - started:.2f}s ({time.monotonic() - rotated:.2f}s after the rotation); "
          f"remounts {restarts} {events}")
    first = manifest.shards[0].first_index
    assert sorted(seen) == list(range(first, first + IMAGES)), "a sample was lost or repeated"
    if kind == "mountpoint":
        assert restarts and restarts >= 1, "the mount should have been remounted with the new key"
    else:
        assert "S3 refused the credentials" in output, "the reader should have resolved the credentials again"
    assert secret1 not in output and secret2 not in output


def test_sixteen_reading_threads_refresh_once_and_lose_no_read(local_s3, s3_env, s3, bucket, tmp_path, monkeypatch):
    """Map-style read-ahead: many threads of one worker share its credentials; a rotation mid-read costs one refresh."""
    from concurrent.futures import ThreadPoolExecutor

    from mountctl.pytorch.data.sources.fsspec_s3 import FsspecReader

    objects = {f"obj-{i:02d}": os.urandom(64 << 10) for i in range(16)}
    for key, body in objects.items():
        s3.put_object(Bucket=bucket, Key=f"ra/{key}", Body=body)
    user = f"rot-{uuid.uuid4().hex[:8]}"
    key1, secret1 = _new_key()
    key2, secret2 = _new_key()
    local_s3.add_identity(user, key1, secret1)
    credentials = str(tmp_path / "credentials")
    _write_credentials(credentials, key1, secret1)
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_PROFILE", PROFILE)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", credentials)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "config"))
    names = sorted(objects)
    reader = FsspecReader(tuple(f"{bucket}/ra/{n}" for n in names), resolve())
    assert reader.read(0, 0, 16) == objects[names[0]][:16]  # the worker's client exists before the threads start
    deadline = time.monotonic() + 90

    def keep_reading(thread: int) -> int:
        """Ranged reads until the refresh has happened and five more succeeded; returns how many were checked."""
        checked, after = 0, 0
        while after < 5 and time.monotonic() < deadline:
            j, offset = (thread + checked) % len(names), (checked * 4096) % (60 << 10)
            assert reader.read(j, offset, 4096) == objects[names[j]][offset:offset + 4096]
            checked += 1
            after += reader._credentials.refreshes > 0
        return checked

    try:
        with ThreadPoolExecutor(16) as pool:
            futures = [pool.submit(keep_reading, t) for t in range(16)]
            time.sleep(0.5)
            local_s3.add_identity(user, key2, secret2)
            _write_credentials(credentials, key2, secret2)
            local_s3.revoke_identity(user, key1)
            counts = [f.result(timeout=120) for f in futures]
    finally:
        local_s3.revoke_identity(user, key2)
        reader.close()
    assert all(counts), "a thread read nothing"
    assert reader._credentials.refreshes == 1, "each refused thread refreshed on its own"
