"""The one place that decides which S3 endpoint, region and credentials to use.

Every backend, client library and script asks ``resolve()``; nothing else
reads ``AWS_*`` variables.  Order: explicit arguments, then the standard AWS
environment chain (``AWS_ENDPOINT_URL_S3``/``AWS_ENDPOINT_URL``, ``AWS_REGION``/
``AWS_DEFAULT_REGION``, ``AWS_ACCESS_KEY_ID``/``AWS_SECRET_ACCESS_KEY``/
``AWS_SESSION_TOKEN``, ``AWS_PROFILE`` through botocore).
"""

from __future__ import annotations

import os
import re
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["S3Settings", "resolve", "redact", "remember_secret"]

DEFAULT_REGION = "us-east-1"

_secrets: set[str] = set()
_secrets_lock = threading.Lock()
# Catches secrets we were never told about, e.g. in a mount program's log line.
_SECRET_ASSIGNMENT = re.compile(
    r"(?i)(secret[_-]?access[_-]?key|session[_-]?token|aws_secret_access_key|secret_key|password)"
    r"(\s*[=:]\s*|\"\s*:\s*\")([^\s\",']+)"
)


def remember_secret(value: str | None) -> None:
    """Make ``redact`` hide this value wherever it appears later."""
    if value and len(value) >= 4:
        with _secrets_lock:
            _secrets.add(value)


def redact(text: str) -> str:
    """Hide every known secret and anything that looks like a secret assignment."""
    with _secrets_lock:
        known = sorted(_secrets, key=len, reverse=True)
    for secret in known:
        text = text.replace(secret, "***")
    return _SECRET_ASSIGNMENT.sub(lambda m: m.group(1) + m.group(2) + "***", text)


@dataclass(frozen=True)
class S3Settings:
    """Resolved endpoint, region and credentials; ``repr`` never shows a secret."""

    endpoint_url: str | None
    region: str
    access_key_id: str | None = None
    secret_access_key: str | None = field(default=None, repr=False)
    session_token: str | None = field(default=None, repr=False)
    profile: str | None = None

    @property
    def path_style(self) -> bool:
        # Virtual-host addressing needs DNS per bucket, which custom endpoints rarely have.
        return self.endpoint_url is not None

    @property
    def has_credentials(self) -> bool:
        return bool(self.access_key_id and self.secret_access_key)

    def child_env(self, base: Mapping[str, str] | None = None) -> dict[str, str]:
        """The environment for a child that reads the standard AWS variables."""
        env = dict(os.environ if base is None else base)
        for name in ("AWS_PROFILE", "AWS_DEFAULT_PROFILE"):
            env.pop(name, None)  # credentials below are already resolved from it
        env["AWS_REGION"] = self.region
        env["AWS_DEFAULT_REGION"] = self.region
        if self.endpoint_url:
            env["AWS_ENDPOINT_URL"] = self.endpoint_url
            env["AWS_ENDPOINT_URL_S3"] = self.endpoint_url
        if self.has_credentials:
            env["AWS_ACCESS_KEY_ID"] = self.access_key_id or ""
            env["AWS_SECRET_ACCESS_KEY"] = self.secret_access_key or ""
            if self.session_token:
                env["AWS_SESSION_TOKEN"] = self.session_token
            else:
                env.pop("AWS_SESSION_TOKEN", None)
        return env

    def boto3_client(self, *, connect_timeout: float = 5, read_timeout: float = 60, retries: int = 3) -> Any:
        import boto3
        from botocore.config import Config

        config = Config(
            region_name=self.region,
            connect_timeout=connect_timeout,
            read_timeout=read_timeout,
            retries={"max_attempts": retries, "mode": "standard"},
            s3={"addressing_style": "path" if self.path_style else "auto"},
            max_pool_connections=32,
        )
        return boto3.client(
            "s3",
            endpoint_url=self.endpoint_url,
            aws_access_key_id=self.access_key_id,
            aws_secret_access_key=self.secret_access_key,
            aws_session_token=self.session_token,
            config=config,
        )

    def s3fs_options(self) -> dict[str, Any]:
        """Keyword arguments for ``s3fs.S3FileSystem`` (fsspec)."""
        options: dict[str, Any] = {
            "client_kwargs": {"region_name": self.region},
            "config_kwargs": {"s3": {"addressing_style": "path" if self.path_style else "auto"}},
        }
        if self.endpoint_url:
            options["endpoint_url"] = self.endpoint_url
        if self.has_credentials:
            options["key"] = self.access_key_id
            options["secret"] = self.secret_access_key
            if self.session_token:
                options["token"] = self.session_token
        return options


def _env(environ: Mapping[str, str], *names: str) -> str | None:
    for name in names:
        value = environ.get(name)
        if value:
            return value
    return None


def resolve(
    *,
    endpoint_url: str | None = None,
    region: str | None = None,
    access_key_id: str | None = None,
    secret_access_key: str | None = None,
    session_token: str | None = None,
    profile: str | None = None,
    environ: Mapping[str, str] | None = None,
) -> S3Settings:
    """Resolve settings from explicit arguments, then the AWS environment chain."""
    env = os.environ if environ is None else environ
    endpoint = endpoint_url or _env(env, "AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL")
    if endpoint:
        endpoint = endpoint.rstrip("/")
        if not re.match(r"^https?://[^/\s]+", endpoint):
            from .errors import InvalidSpec

            raise InvalidSpec(
                f"S3 endpoint {endpoint!r} is not a URL: give it as http://host:port or https://host"
            )
    profile = profile or _env(env, "AWS_PROFILE", "AWS_DEFAULT_PROFILE")
    key = access_key_id or _env(env, "AWS_ACCESS_KEY_ID")
    secret = secret_access_key or _env(env, "AWS_SECRET_ACCESS_KEY")
    token = session_token or (_env(env, "AWS_SESSION_TOKEN") if not access_key_id else None)
    region = region or _env(env, "AWS_REGION", "AWS_DEFAULT_REGION")
    if not (key and secret) or not region:
        botocore_key, botocore_secret, botocore_token, botocore_region = _from_botocore(profile)
        if not (key and secret):
            key, secret, token = botocore_key, botocore_secret, botocore_token
        region = region or botocore_region
    for value in (secret, token):
        remember_secret(value)
    return S3Settings(
        endpoint_url=endpoint,
        region=region or DEFAULT_REGION,
        access_key_id=key,
        secret_access_key=secret,
        session_token=token,
        profile=profile,
    )


def _from_botocore(profile: str | None) -> tuple[str | None, str | None, str | None, str | None]:
    """Shared config files, SSO and instance roles, exactly as the AWS CLI finds them."""
    try:
        import botocore.session
    except ImportError:
        return None, None, None, None
    try:
        session = botocore.session.Session(profile=profile)
        region = session.get_config_variable("region")
        credentials = session.get_credentials()
    except Exception as exc:  # botocore raises many types for a broken profile
        from .errors import CredentialsError

        raise CredentialsError(
            f"could not load AWS profile {profile!r}: {redact(str(exc))}; "
            "check ~/.aws/config or unset AWS_PROFILE"
        ) from None
    if credentials is None:
        return None, None, None, region
    frozen = credentials.get_frozen_credentials()
    return frozen.access_key, frozen.secret_key, frozen.token, region
