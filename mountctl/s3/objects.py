"""Talking to the store: one boto3 client per settings, bucket checks, the one listing helper, and the answers
(not found, precondition failed, an object's size and ETag now) every caller reads the same way."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..backoff import install_throttle_backoff, is_throttled
from ..errors import BucketNotFound, CredentialsError, EndpointUnreachable, S3Error
from ..redaction import redact
from .settings import S3Settings

__all__ = ["client", "short_client", "store_throttling", "is_not_found",
           "check_bucket_access", "ensure_bucket", "StoredObject", "list_objects", "list_object_sizes",
           "object_size", "object_size_now", "object_exists", "plain_etag", "object_etag_now", "object_head_now",
           "is_precondition_failed", "read_range"]


# -- clients --------------------------------------------------------------------------------

_clients: dict[tuple[Any, ...], Any] = {}
_clients_lock = threading.Lock()


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


_loader: Any = None


def _shared_loader() -> Any:
    """One botocore data loader for every client of this process and of the processes it forks.

    Each new botocore session parses S3's service model and endpoint rules again (0.1-0.5 s idle, about
    1 s in a DataLoader worker of a busy 2-core machine: most of a mount route's first training batch, whose
    first open asks S3 for the shard's ETag). The loader only caches what it read from botocore's own data
    files, so a worker forked after the parent's first client inherits them parsed.
    """
    global _loader
    if _loader is None:
        import botocore.loaders

        _loader = botocore.loaders.create_loader()
    return _loader


def _new_client(settings: S3Settings, connect_timeout: float, read_timeout: float, retries: int) -> Any:
    import boto3
    import botocore.session
    from botocore.config import Config

    if settings.has_credentials:
        # The keys are resolved already: a profile named in AWS_PROFILE must not be read again
        # (a missing one would fail the client even though it is not needed).
        core = botocore.session.Session(session_vars={"profile": (None, None, None, None)})
    else:
        core = botocore.session.Session(profile=settings.profile)
    loader = _shared_loader()
    core.register_component("data_loader", loader)
    session = boto3.session.Session(botocore_session=core)
    # boto3 appends its own data folder to the loader's search path at every session: keep one of each
    loader.search_paths[:] = list(dict.fromkeys(loader.search_paths))
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


@dataclass(frozen=True)
class StoredObject:
    """One object as a LIST reports it: its size, and its ETag with the quotes stripped (None if the store sent
    none). Keys are given relative to the listed prefix, as the dict's keys of ``list_objects``."""

    size: int
    etag: str | None


def list_objects(s3: Any, bucket: str, prefix: str, *, recursive: bool = True,
                 on_page: Callable[[int], None] | None = None) -> dict[str, StoredObject]:
    """Every object under ``prefix`` (one paged LIST), by key relative to it; ``recursive=False`` stops at the
    first ``/`` below the prefix. ``on_page`` hears the count so far after each page (a progress line).

    The one listing of a prefix: every caller reads size and ETag the same way, quotes stripped."""
    found: dict[str, StoredObject] = {}
    pages = s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix,
                                                         **({} if recursive else {"Delimiter": "/"}))
    for page in pages:
        for item in page.get("Contents", []):
            etag = item.get("ETag")
            found[item["Key"][len(prefix):]] = StoredObject(int(item["Size"]), plain_etag(etag) if etag else None)
        if on_page is not None:
            on_page(len(found))
    return found


def list_object_sizes(s3: Any, bucket: str, prefix: str) -> dict[str, int]:
    """Sizes of the objects directly under ``prefix``, by name relative to it."""
    return {name: stored.size for name, stored in list_objects(s3, bucket, prefix, recursive=False).items()}


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


def object_head_now(s3: Any, bucket: str, key: str) -> tuple[str, int] | None:
    """The object's (ETag, size) now from one HEAD, or None only when the store answers that it has no such object;
    raises while the store does not answer."""
    head = _head_now(s3, bucket, key)
    return None if head is None else (plain_etag(str(head.get("ETag", ""))), int(head["ContentLength"]))


def read_range(s3: Any, bucket: str, key: str, offset: int, length: int, *, if_match: str | None = None
               ) -> tuple[bytes, str]:
    """``length`` (at least 1) bytes at ``offset`` from one ranged GET, and the ETag of the version they are of.

    With ``if_match`` (a quoted ETag, ``VersionPin.if_match``) S3 answers another version with 412
    (``is_precondition_failed``) rather than its bytes: the pin costs no request of its own.
    """
    pinned = {"IfMatch": if_match} if if_match else {}
    response = s3.get_object(Bucket=bucket, Key=key, Range=f"bytes={offset}-{offset + length - 1}", **pinned)
    body = response["Body"]
    try:
        data = bytes(body.read())
    finally:
        body.close()
    return data, plain_etag(str(response.get("ETag", "")))


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
