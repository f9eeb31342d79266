"""Where S3 is and who we are there: ``s3://`` URIs, the resolved endpoint, region and credentials.

Every backend, client library, source kind and script asks ``resolve()``;
nothing else reads ``AWS_*`` variables.  Order: explicit arguments, then the
standard AWS environment chain (``AWS_ENDPOINT_URL_S3``/``AWS_ENDPOINT_URL``,
``AWS_REGION``/``AWS_DEFAULT_REGION``, ``AWS_ACCESS_KEY_ID``/
``AWS_SECRET_ACCESS_KEY``/``AWS_SESSION_TOKEN``, ``AWS_PROFILE`` through
botocore).  The resolved ``S3Settings`` then feeds every route: boto3, s3fs,
s3torchconnector and each mount program.
"""

from __future__ import annotations

import dataclasses
import hashlib
import hmac
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..errors import CredentialsError, InvalidSpec
from ..redaction import redact, remember_secret

__all__ = ["DEFAULT_REGION", "S3Uri", "parse_s3_uri", "check_endpoint", "S3Settings", "resolve",
           "refresh_credentials", "is_auth_error", "AUTH_ERROR_CODES", "CHAIN_PROFILE_VARIABLE",
           "FSSPEC_MAX_ATTEMPTS"]

DEFAULT_REGION = "us-east-1"
# Attempts per request for s3fs (Python), whose aiobotocore client mountctl's throttle hook does not reach.
FSSPEC_MAX_ATTEMPTS = 12

# S3's own bucket naming rules, relaxed for the dots some S3-compatible stores allow.
_BUCKET = re.compile(r"^[a-z0-9][a-z0-9.\-_]{1,61}[a-z0-9]$")
_ENDPOINT = re.compile(r"^https?://[^/\s]+")
# Set by ``child_env`` when the keys came from the credential chain (a profile's file, a role, a process): the
# profile to read again after a rotation ("" for the default chain), because the child gets the keys themselves.
CHAIN_PROFILE_VARIABLE = "MOUNTCTL_CREDENTIALS_PROFILE"
# What S3 (and the programs' logs) call a refusal of the credentials themselves.
# botocore's names of the providers that renew their keys themselves: a program that reads the same chain
# should be given the chain (the profile, the role's variables), not a copy of keys that will expire.
ROLE_METHODS = frozenset({"assume-role", "assume-role-with-web-identity", "container-role", "iam-role",
                          "custom-process", "sso", "login"})
AUTH_ERROR_CODES = frozenset({"AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch", "ExpiredToken",
                              "InvalidToken", "TokenRefreshRequired", "403", "Forbidden"})


# -- URIs ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class S3Uri:
    bucket: str
    prefix: str  # "" or ends with "/"

    def __str__(self) -> str:
        return f"s3://{self.bucket}/{self.prefix}"

    @property
    def path(self) -> str:
        """``bucket/prefix/`` as s3fs names it."""
        return f"{self.bucket}/{self.prefix}"

    @property
    def name(self) -> str:
        """The prefix's last part (``s3://b/data/imagenet/`` -> ``imagenet``), or the bucket's name at its root."""
        return self.prefix.rstrip("/").rpartition("/")[2] or self.bucket


def parse_s3_uri(uri: str) -> S3Uri:
    """Split ``s3://bucket[/prefix/]``; the prefix always comes back ending in ``/``.

    ``str()`` of the result is the canonical form: ``s3://b/p`` and ``s3://b/p/`` are one prefix.
    """
    if not isinstance(uri, str) or not uri.startswith("s3://"):
        raise InvalidSpec(f"{uri!r} is not an S3 URI: write it as s3://bucket/ or s3://bucket/prefix/")
    bucket, _, prefix = uri[len("s3://"):].partition("/")
    if not _BUCKET.match(bucket):
        raise InvalidSpec(
            f"{bucket!r} in {uri!r} is not a valid bucket name: use 3-63 lowercase letters, "
            "digits, dots or hyphens, e.g. s3://my-bucket/data/"
        )
    if "//" in prefix or prefix.startswith("/") or any(part in (".", "..") for part in prefix.split("/")):
        raise InvalidSpec(f"prefix {prefix!r} in {uri!r} has an empty, '.' or '..' part: write it as a/b/")
    if prefix and not prefix.endswith("/"):
        prefix += "/"
    return S3Uri(bucket, prefix)


def check_endpoint(endpoint: str) -> str:
    endpoint = endpoint.rstrip("/")
    if not _ENDPOINT.match(endpoint):
        raise InvalidSpec(f"S3 endpoint {endpoint!r} is not a URL: give it as http://host:port or https://host")
    return endpoint


# -- settings -----------------------------------------------------------------------------


@dataclass(frozen=True)
class S3Settings:
    """Resolved endpoint, region and credentials; ``repr`` never shows a secret."""

    endpoint_url: str | None
    region: str
    access_key_id: str | None = None
    secret_access_key: str | None = field(default=None, repr=False)
    session_token: str | None = field(default=None, repr=False)
    profile: str | None = None
    # The keys came from the credential chain (a credentials file, a role, a process), not from arguments or
    # AWS_ACCESS_KEY_ID: they may change while a job runs, and ``refresh_credentials`` reads them again.
    credentials_from_chain: bool = False
    # ... and from a provider that renews them (a role, web identity, SSO, ``credential_process``): mount-s3
    # and rclone then get the chain itself and renew the keys on their own.
    role_based: bool = False

    @property
    def path_style(self) -> bool:
        # Virtual-host addressing needs DNS per bucket, which custom endpoints rarely have.
        return self.endpoint_url is not None

    @property
    def has_credentials(self) -> bool:
        return bool(self.access_key_id and self.secret_access_key)

    def credentials_fingerprint(self, key: bytes) -> str:
        """A keyed one-way hash of the credentials: equal for equal credentials, useless to an attacker."""
        if not self.has_credentials:
            return "anonymous"
        material = "\0".join((self.access_key_id or "", self.secret_access_key or "", self.session_token or ""))
        return hmac.new(key, material.encode(), hashlib.sha256).hexdigest()[:16]

    def identity(self, key: bytes) -> dict[str, Any]:
        """What decides which data a request sees, with no secret in it."""
        return {"endpoint": self.endpoint_url, "region": self.region, "path_style": self.path_style,
                "credentials": self.credentials_fingerprint(key)}

    def child_env(self, base: Mapping[str, str] | None = None) -> dict[str, str]:
        """The environment for a child that reads the standard AWS variables."""
        env = dict(os.environ if base is None else base)
        for name in ("AWS_PROFILE", "AWS_DEFAULT_PROFILE"):
            env.pop(name, None)  # credentials below are already resolved from it
        env["AWS_REGION"] = env["AWS_DEFAULT_REGION"] = self.region
        for name in ("AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3"):
            if self.endpoint_url:
                env[name] = self.endpoint_url
            else:
                env.pop(name, None)
        if self.role_based:
            return self._chain_env(env)
        if self.has_credentials:
            env["AWS_ACCESS_KEY_ID"] = self.access_key_id or ""
            env["AWS_SECRET_ACCESS_KEY"] = self.secret_access_key or ""
            if self.session_token:
                env["AWS_SESSION_TOKEN"] = self.session_token
            else:
                env.pop("AWS_SESSION_TOKEN", None)
        if self.credentials_from_chain:
            env[CHAIN_PROFILE_VARIABLE] = self.profile or ""
        else:
            env.pop(CHAIN_PROFILE_VARIABLE, None)
        return env

    def _chain_env(self, env: dict[str, str]) -> dict[str, str]:
        """For a role-based chain: the child resolves (and renews) the keys itself from the same profile."""
        for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", CHAIN_PROFILE_VARIABLE):
            env.pop(name, None)
        if self.profile:
            env["AWS_PROFILE"] = self.profile
        return env

    def export_credentials_to_environ(self) -> None:
        """Make this process's credential chain yield these settings' keys.

        s3torchconnector takes endpoint and region as arguments but keys only from the
        standard chain, so the route that uses it writes the resolved keys here (never on
        a command line).  Endpoint and region variables are left alone.
        """
        if not self.has_credentials:
            return  # anonymous, or an instance role the connector finds itself
        for name in ("AWS_PROFILE", "AWS_DEFAULT_PROFILE", "AWS_SESSION_TOKEN"):
            os.environ.pop(name, None)
        os.environ["AWS_ACCESS_KEY_ID"] = self.access_key_id or ""
        os.environ["AWS_SECRET_ACCESS_KEY"] = self.secret_access_key or ""
        if self.session_token:
            os.environ["AWS_SESSION_TOKEN"] = self.session_token

    def s3fs_options(self) -> dict[str, Any]:
        """Keyword arguments for ``s3fs.S3FileSystem`` (fsspec)."""
        options: dict[str, Any] = {
            "client_kwargs": {"region_name": self.region},
            # A throttling store (503 SlowDown; to a HEAD, a bare 503) is retried with botocore's backoff
            # and jitter: its default of 5 attempts failed reads at 30 % SlowDown (tests/test_throttling.py).
            "config_kwargs": {"s3": {"addressing_style": "path" if self.path_style else "auto"},
                              "retries": {"max_attempts": FSSPEC_MAX_ATTEMPTS, "mode": "standard"}},
        }
        if self.endpoint_url:
            options["endpoint_url"] = self.endpoint_url
        if self.has_credentials:
            options["key"] = self.access_key_id
            options["secret"] = self.secret_access_key
            if self.session_token:
                options["token"] = self.session_token
        return options

    def s3torch_options(self) -> dict[str, Any]:
        """Keyword arguments for s3torchconnector's datasets, checkpoints and DCP (call in the process that uses them)."""
        from s3torchconnector import S3ClientConfig

        self.export_credentials_to_environ()
        return {"region": self.region, "endpoint": self.endpoint_url,
                "s3client_config": S3ClientConfig(force_path_style=self.path_style)}


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
        endpoint = check_endpoint(endpoint)
    profile = profile or _env(env, "AWS_PROFILE", "AWS_DEFAULT_PROFILE")
    key = access_key_id or _env(env, "AWS_ACCESS_KEY_ID")
    secret = secret_access_key or _env(env, "AWS_SECRET_ACCESS_KEY")
    token = session_token or (_env(env, "AWS_SESSION_TOKEN") if not access_key_id else None)
    region = region or _env(env, "AWS_REGION", "AWS_DEFAULT_REGION")
    # A child of a process that read the chain gets the keys, and the profile to read again here.
    chain_profile = env.get(CHAIN_PROFILE_VARIABLE)
    from_chain = chain_profile is not None and not access_key_id
    if from_chain:
        profile = profile or chain_profile or None
    role_based = False
    if not (key and secret) or not region:
        botocore_key, botocore_secret, botocore_token, botocore_region, method = _from_botocore(profile)
        if not (key and secret):
            key, secret, token = botocore_key, botocore_secret, botocore_token
            from_chain = bool(key and secret)
            role_based = from_chain and method in ROLE_METHODS
        region = region or botocore_region
    for value in (secret, token):
        remember_secret(value)
    return S3Settings(endpoint_url=endpoint, region=region or DEFAULT_REGION, access_key_id=key,
                      secret_access_key=secret, session_token=token, profile=profile,
                      credentials_from_chain=from_chain, role_based=role_based)


def refresh_credentials(settings: S3Settings) -> S3Settings:
    """``settings`` with its keys read again from the chain they came from, after S3 refused them.

    Keys rotated in a credentials file (or renewed by a role or a ``credential_process``)
    are picked up; keys given as arguments or in ``AWS_ACCESS_KEY_ID`` have nowhere else
    to come from and are returned unchanged.  The environment's keys are skipped: in a
    child they are the old ones, copied from the parent.
    """
    if not settings.credentials_from_chain:
        return settings
    key, secret, token, _, _ = _from_botocore(settings.profile, skip_environment=True)
    if not (key and secret):
        raise CredentialsError(f"AWS profile {settings.profile or 'default'!r} no longer yields credentials; "
                               "check AWS_SHARED_CREDENTIALS_FILE / ~/.aws/credentials")
    for value in (secret, token):
        remember_secret(value)
    return dataclasses.replace(settings, access_key_id=key, secret_access_key=secret, session_token=token)


# An error code or status as a word of its own: ``403`` in ``StatusCode: 403,`` or ``Forbidden: 403 ...``, never
# inside a name such as ``shard-403.tar``, ``s3://b/403/x`` or ``AccessDenied.tar`` (a dot is allowed after it only
# where it ends the sentence).
_AUTH_IN_TEXT = re.compile(r"(?<![\w./-])(?:" + "|".join(sorted(AUTH_ERROR_CODES)) + r")(?![\w/-]|\.[\w-])")


def is_auth_error(exc: BaseException) -> bool:
    """True when S3 refused the request's credentials (revoked, expired, wrong), however the library says so."""
    response = getattr(exc, "response", None)
    if isinstance(response, dict):
        code = str(response.get("Error", {}).get("Code", ""))
        status = response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        return code in AUTH_ERROR_CODES or status == 403
    if isinstance(exc, PermissionError):  # s3fs turns S3's 403 into PermissionError
        return True
    return bool(_AUTH_IN_TEXT.search(str(exc)))


def _from_botocore(profile: str | None, *, skip_environment: bool = False
                   ) -> tuple[str | None, str | None, str | None, str | None, str | None]:
    """Shared config files, SSO and instance roles, exactly as the AWS CLI finds them."""
    try:
        import botocore.session
    except ImportError:
        return None, None, None, None, None
    try:
        session = botocore.session.Session(profile=profile)
        region = session.get_config_variable("region")
        if skip_environment:
            session.get_component("credential_provider").remove("env")
        credentials = session.get_credentials()
    except Exception as exc:  # botocore raises many types for a broken profile
        raise CredentialsError(
            f"could not load AWS profile {profile!r}: {redact(str(exc))}; check ~/.aws/config or unset AWS_PROFILE"
        ) from None
    if credentials is None:
        return None, None, None, region, None
    frozen = credentials.get_frozen_credentials()
    return frozen.access_key, frozen.secret_key, frozen.token, region, getattr(credentials, "method", None)
