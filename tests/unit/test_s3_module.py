"""The one S3 module: URIs, the not-found test, clients cached per settings, settings exported to a child chain."""

from __future__ import annotations

import os

import pytest
from botocore.exceptions import ClientError

from mountctl import InvalidSpec, s3
from mountctl.pytorch.data import synthetic
from mountctl.s3 import S3Settings

A = S3Settings(endpoint_url="http://127.0.0.1:1001", region="us-east-1", access_key_id="AKA", secret_access_key="sa")
B = S3Settings(endpoint_url="http://127.0.0.1:2002", region="eu-west-1", access_key_id="AKB", secret_access_key="sb")


def test_uri_prefix_is_canonical():
    assert str(s3.parse_s3_uri("s3://bkt/p")) == "s3://bkt/p/" == str(s3.parse_s3_uri("s3://bkt/p/"))
    assert s3.parse_s3_uri("s3://bkt").prefix == "" and s3.parse_s3_uri("s3://bkt/x/y").path == "bkt/x/y/"


@pytest.mark.parametrize("uri", ["bkt/p", "s3://B/", "s3://bkt//x", "s3://bkt/../x"])
def test_bad_uris_say_how_to_write_them(uri):
    with pytest.raises(InvalidSpec, match="s3://"):
        s3.parse_s3_uri(uri)


@pytest.mark.parametrize("code,status,expected", [
    ("NoSuchKey", 404, True), ("404", 404, True), ("NotFound", 404, True), ("NoSuchBucket", 404, True),
    ("AccessDenied", 403, False), ("InternalError", 500, False)])
def test_not_found_is_recognised_however_spelled(code, status, expected):
    error = ClientError({"Error": {"Code": code}, "ResponseMetadata": {"HTTPStatusCode": status}}, "HeadObject")
    assert s3.is_not_found(error) is expected
    assert not s3.is_not_found(ValueError("no response"))


def test_clients_are_cached_per_settings_and_bounds():
    assert s3.client(A) is s3.client(A)
    assert s3.client(A) is not s3.client(B)
    assert s3.client(B).meta.endpoint_url == "http://127.0.0.1:2002"
    assert s3.client(A, read_timeout=1) is not s3.client(A)


def test_make_uses_the_settings_of_each_call():
    assert synthetic._client(A).meta.endpoint_url == "http://127.0.0.1:1001"
    assert synthetic._client(B).meta.endpoint_url == "http://127.0.0.1:2002"


def test_export_makes_the_credential_chain_yield_the_settings_keys(monkeypatch):
    monkeypatch.setattr(os, "environ", os.environ.copy())  # the export changes this process's environment
    monkeypatch.setenv("AWS_PROFILE", "elsewhere")
    monkeypatch.setenv("AWS_SESSION_TOKEN", "stale")
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://left-alone:1")
    B.export_credentials_to_environ()
    assert (os.environ["AWS_ACCESS_KEY_ID"], os.environ["AWS_SECRET_ACCESS_KEY"]) == ("AKB", "sb")
    assert "AWS_PROFILE" not in os.environ and "AWS_SESSION_TOKEN" not in os.environ
    assert os.environ["AWS_ENDPOINT_URL"] == "http://left-alone:1"


def test_anonymous_settings_leave_the_chain_alone(monkeypatch):
    monkeypatch.setattr(os, "environ", os.environ.copy())
    monkeypatch.setenv("AWS_PROFILE", "role")
    S3Settings(endpoint_url=None, region="us-east-1").export_credentials_to_environ()
    assert os.environ["AWS_PROFILE"] == "role"


def test_a_missing_profile_named_in_the_environment_does_not_break_resolved_keys(monkeypatch, tmp_path):
    monkeypatch.setenv("AWS_PROFILE", "no-such-profile")
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    keyed = S3Settings(endpoint_url="http://127.0.0.1:3003", region="us-east-1", access_key_id="AKC",
                       secret_access_key="sc")
    assert s3.client(keyed).meta.endpoint_url == "http://127.0.0.1:3003"
