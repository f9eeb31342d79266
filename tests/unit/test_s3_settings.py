"""The one place that resolves endpoint, region and credentials, and the redaction of secrets."""

from __future__ import annotations

import pytest

from mountctl import InvalidSpec, redact, resolve


def test_explicit_arguments_win_over_the_environment():
    env = {"AWS_ENDPOINT_URL": "http://env:1", "AWS_REGION": "eu-west-1", "AWS_ACCESS_KEY_ID": "AKENV",
           "AWS_SECRET_ACCESS_KEY": "envsecret"}
    s = resolve(endpoint_url="http://arg:2/", region="ap-south-1", environ=env)
    assert (s.endpoint_url, s.region, s.access_key_id) == ("http://arg:2", "ap-south-1", "AKENV")
    assert s.path_style


def test_service_specific_endpoint_beats_the_general_one():
    env = {"AWS_ENDPOINT_URL": "http://general:1", "AWS_ENDPOINT_URL_S3": "http://s3only:2",
           "AWS_DEFAULT_REGION": "us-west-2", "AWS_ACCESS_KEY_ID": "A", "AWS_SECRET_ACCESS_KEY": "S"}
    s = resolve(environ=env)
    assert s.endpoint_url == "http://s3only:2" and s.region == "us-west-2"


def test_aws_without_endpoint_uses_virtual_host_style_and_default_region(monkeypatch, tmp_path):
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    s = resolve(environ={"AWS_ACCESS_KEY_ID": "A", "AWS_SECRET_ACCESS_KEY": "S"})
    assert s.endpoint_url is None and not s.path_style and s.region == "us-east-1"


def test_profile_credentials_come_from_the_shared_files(monkeypatch, tmp_path):
    creds = tmp_path / "credentials"
    creds.write_text("[train]\naws_access_key_id = AKPROFILE\naws_secret_access_key = profilesecret\n")
    config = tmp_path / "config"
    config.write_text("[profile train]\nregion = eu-central-1\n")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(creds))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(config))
    s = resolve(environ={"AWS_PROFILE": "train"})
    assert (s.access_key_id, s.secret_access_key, s.region) == ("AKPROFILE", "profilesecret", "eu-central-1")
    env = s.child_env({"AWS_PROFILE": "train"})
    assert "AWS_PROFILE" not in env and env["AWS_ACCESS_KEY_ID"] == "AKPROFILE"


def test_endpoint_that_is_not_a_url_is_rejected():
    with pytest.raises(InvalidSpec, match="http://host:port"):
        resolve(environ={"AWS_ENDPOINT_URL": "localhost:9000"})


def test_repr_and_redact_hide_secrets():
    s = resolve(environ={"AWS_ACCESS_KEY_ID": "AKX", "AWS_SECRET_ACCESS_KEY": "very-secret-value",
                         "AWS_REGION": "us-east-1"})
    assert "very-secret-value" not in repr(s)
    assert redact("failed with very-secret-value in it") == "failed with *** in it"
    assert "hunter2" not in redact("secret_access_key=hunter2 other")
