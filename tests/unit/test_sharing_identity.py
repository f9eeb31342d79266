"""Which requests may share one node mount: same options and same resolved S3, never judged by the secret itself."""

from __future__ import annotations

import json

import pytest

from mountctl import InvalidSpec, MountSpec
from mountctl.s3 import S3Settings
from mountctl.shared.client import default_mount_dir, identity_differences, sharing_identity

A = S3Settings(endpoint_url="http://127.0.0.1:1001", region="us-east-1", access_key_id="AKA",
               secret_access_key="secret-a-unit")
B = S3Settings(endpoint_url="http://127.0.0.1:2002", region="us-east-1", access_key_id="AKA",
               secret_access_key="secret-a-unit")


def test_requests_to_different_endpoints_get_different_default_dirs():
    assert default_mount_dir("s3://same/", "auto", A) != default_mount_dir("s3://same/", "auto", B)


@pytest.mark.parametrize("change", [
    {"region": "eu-west-1"},
    {"secret_access_key": "another-secret"},
    {"session_token": "a-token"},
    {"endpoint_url": None},
])
def test_any_resolved_difference_gives_another_default_dir(change):
    other = S3Settings(**{**A.__dict__, **change})
    assert default_mount_dir("s3://same/", "auto", A) != default_mount_dir("s3://same/", "auto", other)


def test_same_request_gets_the_same_default_dir():
    again = S3Settings(**A.__dict__)
    assert default_mount_dir("s3://same/p/", "rclone", A) == default_mount_dir("s3://same/p/", "rclone", again)


def test_trailing_slash_does_not_make_another_mount():
    assert default_mount_dir("s3://bkt/p", "auto", A) == default_mount_dir("s3://bkt/p/", "auto", A)
    assert MountSpec(uri="s3://bkt/p", mount_dir="/m").uri == "s3://bkt/p/"


def test_mount_options_are_part_of_the_identity():
    read_only = MountSpec(uri="s3://bkt/", mount_dir="/m")
    writable = MountSpec(uri="s3://bkt/", mount_dir="/m", read_only=False)
    assert identity_differences(sharing_identity(read_only, A), sharing_identity(writable, A)) == [
        "read_only (True there, False requested)"]


def test_time_bounds_do_not_prevent_sharing():
    slow = MountSpec(uri="s3://bkt/", mount_dir="/m", mount_timeout_s=99)
    assert identity_differences(sharing_identity(slow, A), sharing_identity(MountSpec(uri="s3://bkt/", mount_dir="/m"), A)) == []


def test_differences_name_the_endpoint_and_hide_the_credentials():
    spec = MountSpec(uri="s3://bkt/", mount_dir="/m")
    other_key = S3Settings(**{**B.__dict__, "secret_access_key": "secret-b-unit"})
    found = identity_differences(sharing_identity(spec, A), sharing_identity(spec, other_key))
    assert found == ["the credentials", "endpoint ('http://127.0.0.1:1001' there, 'http://127.0.0.1:2002' requested)"]


def test_identity_holds_no_secret_and_is_keyed():
    identity = json.dumps(sharing_identity(MountSpec(uri="s3://bkt/", mount_dir="/m"), A))
    assert "secret-a-unit" not in identity and "AKA" not in identity
    assert A.credentials_fingerprint(b"k" * 32) != A.credentials_fingerprint(b"j" * 32)


def test_spec_options_are_keyword_only():
    with pytest.raises(TypeError):
        MountSpec("s3://bkt/", "/m")  # type: ignore[misc]
    with pytest.raises(InvalidSpec):
        MountSpec(uri="s3://bkt/", mount_dir="/m", backend="goofys")
