"""S3 in one place: settings resolution, URIs, clients, bucket checks and the not-found test.

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
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .backoff import install_throttle_backoff, is_throttled
from .errors import BucketNotFound, CredentialsError, EndpointUnreachable, InvalidSpec, S3Error
from .redaction import redact, remember_secret

__all__ = [
    "DEFAULT_REGION",
    "S3Uri",
    "parse_s3_uri",
    "S3Settings",
    "resolve",
    "refresh_credentials",
    "is_auth_error",
    "client",
    "short_client",
    "is_not_found",
    "check_bucket_access",
    "ensure_bucket",
    "list_object_sizes",
    "object_size",
    "object_exists", "object_size_now",
    "plain_etag", "object_etag_now", "is_precondition_failed",
]

DEFAULT_REGION = "us-east-1"

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
        if self.role_based:
            return self._chain_env(env)
        env["AWS_REGION"] = self.region
        env["AWS_DEFAULT_REGION"] = self.region
        for name in ("AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3"):
            if self.endpoint_url:
                env[name] = self.endpoint_url
            else:
                env.pop(name, None)
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
        env["AWS_REGION"] = env["AWS_DEFAULT_REGION"] = self.region
        for name in ("AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3"):
            if self.endpoint_url:
                env[name] = self.endpoint_url
            else:
                env.pop(name, None)
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


# -- clients --------------------------------------------------------------------------------

_clients: dict[tuple[Any, ...], Any] = {}
_clients_lock = threading.Lock()
# Attempts per request for s3fs (Python), whose aiobotocore client mountctl's throttle hook does not reach.
FSSPEC_MAX_ATTEMPTS = 12


def client(settings: S3Settings, *, connect_timeout: float = 5, read_timeout: float = 60, retries: int = 3,
           wait_out_throttling: bool = True) -> Any:
    """A boto3 S3 client for these settings and bounds, made once per process and reused.

    It retries throttled requests (503 SlowDown) until the outage bound, whatever ``retries``
    says for other errors; ``wait_out_throttling=False`` gives a client that reports them.
    """
    # boto3 clients are thread-safe but not fork-safe: key by pid so a forked worker makes its own.
    key = (os.getpid(), settings, connect_timeout, read_timeout, retries, wait_out_throttling)
    with _clients_lock:
        found = _clients.get(key)
        if found is None:
            found = _new_client(settings, connect_timeout, read_timeout, retries)
            if wait_out_throttling:
                install_throttle_backoff(found, _where(settings))
            _clients[key] = found
        return found


def store_throttling(settings: S3Settings, bucket: str, prefix: str = "", *, requests: int = 20,
                     within_s: float = 10.0) -> bool:
    """Whether the store answers SlowDown now: up to ``requests`` one-key LISTs in ``within_s``, stopping at the
    first that does.

    A store that throttles a share p of requests goes unseen with probability (1 - p) ** requests: at 30 %,
    6 LISTs missed it one time in 8 (a mount through a throttling store failed at its timeout in a CI run),
    20 miss it one time in 1,250.
    """
    from botocore.exceptions import BotoCoreError, ClientError

    raw = client(settings, connect_timeout=2, read_timeout=5, retries=1, wait_out_throttling=False)
    deadline = time.monotonic() + within_s
    for _ in range(requests):
        if time.monotonic() >= deadline:
            return False
        try:
            raw.list_objects_v2(Bucket=bucket, Prefix=prefix, MaxKeys=1)
        except ClientError as exc:
            if is_throttled(str(exc.response.get("Error", {}).get("Code", "")),
                            exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")):
                return True
            return False
        except BotoCoreError:
            return False
    return False


def _new_client(settings: S3Settings, connect_timeout: float, read_timeout: float, retries: int) -> Any:
    import boto3
    import botocore.session
    from botocore.config import Config

    if settings.has_credentials:
        # The keys are resolved already: a profile named in AWS_PROFILE must not be read again
        # (a missing one would fail the client even though it is not needed).
        session = boto3.session.Session(botocore_session=botocore.session.Session(
            session_vars={"profile": (None, None, None, None)}))
    else:
        session = boto3.session.Session(profile_name=settings.profile)
    config = Config(
        region_name=settings.region,
        connect_timeout=connect_timeout,
        read_timeout=read_timeout,
        retries={"max_attempts": retries, "mode": "standard"},
        s3={"addressing_style": "path" if settings.path_style else "auto"},
        max_pool_connections=32,
    )
    return session.client("s3", endpoint_url=settings.endpoint_url, aws_access_key_id=settings.access_key_id,
                        aws_secret_access_key=settings.secret_access_key, aws_session_token=settings.session_token,
                        config=config)


def short_client(settings: S3Settings) -> Any:
    """A client that gives up quickly: for small metadata requests."""
    return client(settings, connect_timeout=5, read_timeout=30, retries=2)


def is_not_found(exc: BaseException) -> bool:
    """True for S3's 'no such key/bucket' answers, however the store spells them."""
    response = getattr(exc, "response", None)
    if not isinstance(response, dict):
        return False
    code = str(response.get("Error", {}).get("Code", ""))
    status = response.get("ResponseMetadata", {}).get("HTTPStatusCode")
    return code in ("404", "NoSuchKey", "NotFound", "NoSuchBucket") or status == 404


# -- checks ---------------------------------------------------------------------------------


def _where(settings: S3Settings) -> str:
    return settings.endpoint_url or f"AWS S3 ({settings.region})"


def check_bucket_access(settings: S3Settings, bucket: str, prefix: str = "", *, timeout_s: float = 5.0) -> None:
    """One LIST with short timeouts, so errors name the real cause before anything else starts.

    A FUSE program that cannot reach its bucket often mounts anyway and fails every
    read later (s3fs even reports success first).
    """
    from botocore.exceptions import BotoCoreError, ClientError, EndpointConnectionError, NoCredentialsError

    where = _where(settings)
    s3 = client(settings, connect_timeout=timeout_s, read_timeout=timeout_s, retries=1)
    try:
        s3.list_objects_v2(Bucket=bucket, Prefix=prefix, MaxKeys=1)
    except ClientError as exc:
        code = str(exc.response.get("Error", {}).get("Code", ""))
        status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        if is_not_found(exc):
            raise BucketNotFound(f"bucket {bucket!r} does not exist at {where}; create it "
                                 f"(e.g. `aws s3 mb s3://{bucket}`) or fix the URI") from None
        if code in ("InvalidAccessKeyId", "SignatureDoesNotMatch", "AccessDenied", "403", "ExpiredToken",
                    "InvalidToken") or status == 403:
            raise CredentialsError(
                f"S3 at {where} refused access to bucket {bucket!r} ({code}); check AWS_ACCESS_KEY_ID/"
                "AWS_SECRET_ACCESS_KEY or AWS_PROFILE (for the local server: eval \"$(mountctl local-s3 env)\")"
            ) from None
        raise S3Error(f"S3 at {where} answered {code or status} for bucket {bucket!r}: {redact(str(exc))}") from None
    except NoCredentialsError:
        raise CredentialsError(
            "no AWS credentials found; set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or AWS_PROFILE, "
            "or run eval \"$(mountctl local-s3 env)\" for the embedded local S3"
        ) from None
    except EndpointConnectionError:
        raise EndpointUnreachable(f"nothing answers at S3 endpoint {where}; check AWS_ENDPOINT_URL, or start "
                                  "the local server with `mountctl local-s3 start`") from None
    except BotoCoreError as exc:
        raise EndpointUnreachable(f"could not talk to S3 at {where}: {redact(str(exc))}") from None


def ensure_bucket(settings: S3Settings, bucket: str, *, create: bool, timeout_s: float = 30.0) -> bool:
    """Make sure ``bucket`` exists; return True when this call created it.

    Creating is allowed only on a custom endpoint (the embedded local S3 or
    another S3-compatible store): on AWS, bucket names, regions and policies
    are the account owner's decision, so a missing bucket is an error there.
    """
    try:
        check_bucket_access(settings, bucket)
        return False
    except BucketNotFound:
        if not (create and settings.endpoint_url):
            raise BucketNotFound(
                f"bucket {bucket!r} does not exist in AWS S3 ({settings.region}); create it first, e.g. "
                f"`aws s3 mb s3://{bucket} --region {settings.region}`, or point AWS_ENDPOINT_URL at "
                "another S3 endpoint"
            ) from None
    from botocore.exceptions import BotoCoreError, ClientError

    try:
        short_client(settings).create_bucket(Bucket=bucket)
    except ClientError as exc:
        if exc.response.get("Error", {}).get("Code", "") not in ("BucketAlreadyOwnedByYou", "BucketAlreadyExists"):
            raise BucketNotFound(f"could not create bucket {bucket!r} at {settings.endpoint_url}: "
                                 f"{redact(str(exc))}") from None
    except BotoCoreError as exc:
        raise EndpointUnreachable(f"could not create bucket {bucket!r} at {settings.endpoint_url}: "
                                  f"{redact(str(exc))}") from None
    # Some S3-compatible stores show a new bucket a moment after creating it.
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            check_bucket_access(settings, bucket)
            return True
        except BucketNotFound:
            if time.monotonic() > deadline:
                raise BucketNotFound(f"bucket {bucket!r} was created at {settings.endpoint_url} but did not "
                                     f"appear within {timeout_s:g}s; try again") from None
            time.sleep(0.1)


def list_object_sizes(s3: Any, bucket: str, prefix: str) -> dict[str, int]:
    """Sizes of the objects directly under ``prefix``, by name relative to it."""
    sizes: dict[str, int] = {}
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix, Delimiter="/"):
        for item in page.get("Contents", []):
            sizes[item["Key"][len(prefix):]] = int(item["Size"])
    return sizes


def _head(s3: Any, bucket: str, key: str) -> dict[str, Any] | None:
    """One HEAD of the object, or None when there is no such object."""
    from botocore.exceptions import ClientError

    try:
        return dict(s3.head_object(Bucket=bucket, Key=key))
    except ClientError as exc:
        if is_not_found(exc):
            return None
        raise


def _head_now(s3: Any, bucket: str, key: str) -> dict[str, Any] | None:
    """``_head``, but None only when the store answers that it has no such object; raises otherwise.

    An outage is not a deletion: a connection error propagates, and "no such object" counts
    only when the bucket answers too (a store coming back can briefly say it has no bucket).
    """
    head = _head(s3, bucket, key)
    if head is None:
        s3.head_bucket(Bucket=bucket)  # raises unless the store answers for the bucket
    return head


def object_size(s3: Any, bucket: str, key: str) -> int | None:
    """The object's size, or None when there is no such object."""
    head = _head(s3, bucket, key)
    return None if head is None else int(head["ContentLength"])


def object_size_now(s3: Any, bucket: str, key: str) -> int | None:
    """The object's size, or None only when the store answers that it has no such object; raises otherwise."""
    head = _head_now(s3, bucket, key)
    return None if head is None else int(head["ContentLength"])


def plain_etag(value: str) -> str:
    """An ETag as S3 sends it (quoted, sometimes weak ``W/"..."``) reduced to the bare value manifests record."""
    value = value.strip()
    if value.startswith("W/"):
        value = value[2:]
    return value.strip('"')


def object_etag_now(s3: Any, bucket: str, key: str) -> str | None:
    """The object's ETag now (quotes stripped), or None only when the store answers that it has no such object.

    Raises while the store does not answer: a version that cannot be read is not a changed one.
    """
    head = _head_now(s3, bucket, key)
    return None if head is None else plain_etag(str(head.get("ETag", "")))


def is_precondition_failed(exc: BaseException | None) -> bool:
    """True when S3 refused a request's ``If-Match`` (412 PreconditionFailed), through any library's wrapping.

    botocore raises a ClientError with the code; s3fs turns it into an OSError (EINVAL) and then into its
    ``FileExpired``, keeping the original as the cause: the chain of causes is searched.
    """
    seen = 0
    while exc is not None and seen < 8:
        response = getattr(exc, "response", None)
        if isinstance(response, dict):
            code = str(response.get("Error", {}).get("Code", ""))
            if code in ("PreconditionFailed", "412") \
                    or response.get("ResponseMetadata", {}).get("HTTPStatusCode") == 412:
                return True
        if type(exc).__name__ == "FileExpired" or "pre-conditions you specified did not hold" in str(exc):
            return True
        exc = exc.__cause__ or exc.__context__
        seen += 1
    return False


def object_exists(s3: Any, bucket: str, key: str) -> bool:
    """Whether the store has the object, by its own answer; raises when it does not answer clearly."""
    return object_size_now(s3, bucket, key) is not None
