"""Rotated credentials: what is read again, how an authorization failure is recognised, and how reads resume."""

from __future__ import annotations

import errno
import os

import pytest

from mountctl import s3
from mountctl.mounts.health import AuthWatch
from mountctl.mounts.resilient import ResilientReader
from mountctl.s3 import refresh_credentials, resolve
from mountctl.s3.settings import CHAIN_PROFILE_VARIABLE


def _credentials_file(path, key: str, secret: str, profile: str = "job") -> str:
    path.write_text(f"[{profile}]\naws_access_key_id = {key}\naws_secret_access_key = {secret}\n")
    return str(path)


@pytest.fixture
def profile_env(tmp_path, monkeypatch):
    for name in [n for n in os.environ if n.startswith("AWS_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", _credentials_file(tmp_path / "credentials", "KEY1", "SECRET1"))
    monkeypatch.setenv("AWS_PROFILE", "job")
    return tmp_path / "credentials"


def test_keys_from_a_profile_are_read_again_after_the_file_switches(profile_env):
    settings = resolve(endpoint_url="http://127.0.0.1:9")
    assert settings.access_key_id == "KEY1" and settings.credentials_from_chain and settings.profile == "job"
    _credentials_file(profile_env, "KEY2", "SECRET2")
    fresh = refresh_credentials(settings)
    assert (fresh.access_key_id, fresh.secret_access_key) == ("KEY2", "SECRET2")
    assert fresh.endpoint_url == settings.endpoint_url and fresh.credentials_from_chain


def test_a_child_given_the_keys_reads_the_profile_again_not_its_copied_environment(profile_env, monkeypatch):
    parent = resolve(endpoint_url="http://127.0.0.1:9")
    env = parent.child_env()
    assert "AWS_PROFILE" not in env and env[CHAIN_PROFILE_VARIABLE] == "job" and env["AWS_ACCESS_KEY_ID"] == "KEY1"
    child = resolve(environ=env)
    assert child.credentials_from_chain and child.profile == "job"
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "KEY1")  # the child's environment holds the old keys
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "SECRET1")
    _credentials_file(profile_env, "KEY2", "SECRET2")
    assert refresh_credentials(child).access_key_id == "KEY2"


def test_explicit_keys_have_nothing_to_refresh(profile_env):
    settings = resolve(endpoint_url="http://127.0.0.1:9", access_key_id="FIXED", secret_access_key="FIXEDSECRET")
    assert not settings.credentials_from_chain
    assert "MOUNTCTL_CREDENTIALS_PROFILE" not in settings.child_env()
    _credentials_file(profile_env, "KEY2", "SECRET2")
    assert refresh_credentials(settings) is settings


def test_authorization_failures_are_recognised_as_each_library_reports_them():
    from botocore.exceptions import ClientError

    revoked = ClientError({"Error": {"Code": "InvalidAccessKeyId"}, "ResponseMetadata": {"HTTPStatusCode": 403}},
                          "GetObject")
    missing = ClientError({"Error": {"Code": "NoSuchKey"}, "ResponseMetadata": {"HTTPStatusCode": 404}}, "GetObject")
    assert s3.is_auth_error(revoked) and not s3.is_auth_error(missing)
    assert s3.is_auth_error(PermissionError("Forbidden"))  # s3fs
    assert s3.is_auth_error(RuntimeError("Client error: Forbidden: 403 InvalidAccessKeyId"))  # s3torchconnector
    assert not s3.is_auth_error(RuntimeError("Client error: connection reset"))


# Lines as the programs wrote them when their key was revoked (captured from s3fs 1.90 and rclone 1.75).
S3FS_LINE = "2026-11-23T18:02:59.782Z [ERR] curl.cpp:RequestPerform(2363): HTTP response code 403, returning EPERM."
RCLONE_LINE = ("2026/11/23 18:03:07 ERROR : IO error: operation error S3: GetObject, https response error StatusCode: "
               "403, RequestID: 18EA, HostID: , api error InvalidAccessKeyId: The access key ID you provided does not "
               "exist in our records.")


@pytest.mark.parametrize("line", [S3FS_LINE, RCLONE_LINE], ids=["s3fs", "rclone"])
def test_the_auth_watch_reports_a_refusal_once_and_only_new_lines(tmp_path, line):
    log = tmp_path / "program.log"
    log.write_text("starting\nold " + line + "\n")
    watch = AuthWatch()
    watch.skip_to_end([str(log)])
    assert watch.refused([str(log)]) == ""
    with open(log, "a") as f:
        f.write("INFO: reading shard-000001.tar\n" + line + "\n")
    assert "403" in watch.refused([str(log)])
    assert watch.refused([str(log)]) == ""  # already read


def test_a_refusal_the_list_did_not_confirm_yet_is_asked_about_again_for_a_while(tmp_path, monkeypatch):
    """A revoked key is refused by the store's every part only after a moment: the program's 403 could come before
    the confirming LIST's, and the line, already read, was forgotten (a key rotation through mount-s3 once waited
    out a 120 s loader timeout). Held, it is asked about again at each probe, for a bounded time."""
    import mountctl.mounts.health as health

    clock = iter([100.0, 110.0, 100.0 + AuthWatch.UNCONFIRMED_FOR_S + 1, 200.0])
    monkeypatch.setattr(health.time, "monotonic", lambda: next(clock))
    log = tmp_path / "program.log"
    log.write_text("WARN mountpoint_s3_client: GetObject failed: 403 Forbidden\n")
    watch = AuthWatch()
    line = watch.refused([str(log)])
    assert "403" in line and watch.refused([str(log)]) == ""  # read once
    watch.hold(line)  # at 100 s: the LIST still passed
    assert watch.unconfirmed() == line  # at 110 s: asked again
    assert watch.unconfirmed() == ""  # past the bound: forgotten
    watch.hold(line)
    watch.confirmed()  # the LIST was refused: the mount is remounted, nothing is held
    assert watch.unconfirmed() == ""


def test_an_unrelated_error_in_the_log_is_not_a_refusal(tmp_path):
    log = tmp_path / "program.log"
    log.write_text("2026/11/23 ERROR : IO error: connection reset by peer\n")
    assert AuthWatch().refused([str(log)]) == ""


def test_an_end_of_file_before_the_listed_size_is_a_failed_read_not_the_end(tmp_path):
    path = tmp_path / "shard.tar"
    path.write_bytes(b"")  # what s3fs serves for a file it can no longer fetch
    reader = ResilientReader(str(path), retry_for_s=0.2, expected_size=1024)
    with pytest.raises(OSError) as caught:
        reader.read(512)
    assert caught.value.errno == errno.EIO and "byte 0 of 1024" in str(caught.value)


def test_s3_saying_the_object_is_now_shorter_makes_the_early_end_real(tmp_path):
    path = tmp_path / "shard.tar"
    path.write_bytes(b"x" * 100)
    reader = ResilientReader(str(path), retry_for_s=5, expected_size=1024, size_in_s3=lambda: 100)
    assert reader.read(4096) == b"x" * 100 and reader.read(4096) == b""


def test_a_read_that_reaches_the_size_ends_normally(tmp_path):
    path = tmp_path / "shard.tar"
    path.write_bytes(b"y" * 10)
    reader = ResilientReader(str(path), expected_size=10)
    assert reader.read(100) == b"y" * 10 and reader.read(100) == b""


class _RevokedOnce:
    """A stand-in object stream: S3 refusing a key mid-object cannot be produced on demand without a server
    (tests/test_key_rotation.py does it for real).  Serves ``data`` from an offset; the first stream opened
    with the old key fails its second read with a 403, as a revoked key does."""

    def __init__(self, data: bytes, credentials) -> None:
        self.data, self.credentials, self.opens = data, credentials, []

    def open_at(self, offset: int):
        import io

        from botocore.exceptions import ClientError

        key = self.credentials.settings.access_key_id
        self.opens.append((key, offset))
        source, reads = io.BytesIO(self.data[offset:]), [0]

        class Stream:
            def read(self, n: int) -> bytes:
                reads[0] += 1
                if key == "KEY1" and reads[0] == 2:
                    raise ClientError({"Error": {"Code": "InvalidAccessKeyId"},
                                       "ResponseMetadata": {"HTTPStatusCode": 403}}, "GetObject")
                return source.read(min(n, 7))

            def close(self) -> None:
                pass

        return Stream()


def test_a_stream_refused_mid_object_resumes_at_the_byte_reached_with_the_new_key(profile_env, monkeypatch):
    from mountctl.pytorch.data.sources import refreshing

    monkeypatch.setattr(refreshing, "_BACKOFF_S", (0.0,))
    credentials = refreshing.Credentials(resolve(endpoint_url="http://127.0.0.1:9"), "s3io")
    data = bytes(range(200))
    fake = _RevokedOnce(data, credentials)
    _credentials_file(profile_env, "KEY2", "SECRET2")
    stream = refreshing.buffered(refreshing.RefreshingStream("s3://b/shard.tar", credentials, fake.open_at), 16)
    assert stream.read() == data
    assert fake.opens == [("KEY1", 0), ("KEY2", 7)] and credentials.refreshes == 1


def test_refreshing_is_bounded_when_the_new_keys_are_refused_too(profile_env, monkeypatch):
    from botocore.exceptions import ClientError

    from mountctl.pytorch.data.sources import refreshing

    monkeypatch.setattr(refreshing, "_BACKOFF_S", (0.0,))
    credentials = refreshing.Credentials(resolve(endpoint_url="http://127.0.0.1:9"), "fsspec")

    def refused():
        raise ClientError({"Error": {"Code": "AccessDenied"}, "ResponseMetadata": {"HTTPStatusCode": 403}}, "Get")

    with pytest.raises(ClientError):
        credentials.call("s3://b/k", refused)
    assert credentials.refreshes == refreshing.MAX_REFRESHES


def _process_profile(tmp_path, monkeypatch, key: str = "PROCKEY1") -> None:
    """A profile whose keys come from a ``credential_process`` (a provider that renews them), run by botocore."""
    import json

    (tmp_path / "process.json").write_text(json.dumps({"Version": 1, "AccessKeyId": key,
                                                       "SecretAccessKey": "PROCSECRET1"}))
    (tmp_path / "config").write_text(f"[profile job]\ncredential_process = /bin/cat {tmp_path / 'process.json'}\n")
    for name in [n for n in os.environ if n.startswith("AWS_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-credentials"))
    monkeypatch.setenv("AWS_PROFILE", "job")


def test_a_role_based_chain_is_passed_to_the_programs_instead_of_its_keys(tmp_path, monkeypatch):
    from mountctl.mounts.backends import Rclone
    from mountctl.mounts.spec import MountSpec

    _process_profile(tmp_path, monkeypatch)
    settings = resolve(endpoint_url="http://127.0.0.1:9")
    assert settings.access_key_id == "PROCKEY1" and settings.role_based
    env = settings.child_env()
    assert env["AWS_PROFILE"] == "job" and "AWS_ACCESS_KEY_ID" not in env and "AWS_SECRET_ACCESS_KEY" not in env
    assert env["AWS_ENDPOINT_URL"] == "http://127.0.0.1:9"
    spec = MountSpec(uri="s3://bucket/p/", mount_dir=str(tmp_path / "m"), backend="rclone")
    rclone = Rclone().environment(spec, settings, str(tmp_path))
    assert rclone["RCLONE_CONFIG_MOUNTCTL_ENV_AUTH"] == "true" and "RCLONE_CONFIG_MOUNTCTL_ACCESS_KEY_ID" not in rclone


def test_keys_from_a_plain_credentials_file_are_handed_over_as_keys(profile_env):
    settings = resolve(endpoint_url="http://127.0.0.1:9")
    assert settings.credentials_from_chain and not settings.role_based
    assert settings.child_env()["AWS_ACCESS_KEY_ID"] == "KEY1"


def test_a_file_empty_from_its_first_byte_is_a_failed_read_while_s3_refuses_to_say_otherwise(tmp_path):
    from botocore.exceptions import ClientError

    path = tmp_path / "shard.tar"
    path.write_bytes(b"")  # s3fs, size 0 and no bytes, for an object it can no longer fetch

    def refused():
        raise ClientError({"Error": {"Code": "InvalidAccessKeyId"}, "ResponseMetadata": {"HTTPStatusCode": 403}},
                          "HeadObject")

    with pytest.raises(OSError) as caught:
        ResilientReader(str(path), retry_for_s=0.2, size_in_s3=refused).read(512)
    assert caught.value.errno == errno.EIO
    assert ResilientReader(str(path), size_in_s3=lambda: 0).read(512) == b""  # S3 says it is empty: it is
