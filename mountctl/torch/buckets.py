"""Reachability and bucket checks shared by ``make``, ``train`` and the checkpoint writer.

Every S3 call here goes through ``mountctl.s3env`` settings and short
timeouts, so an unreachable endpoint fails in seconds with
``EndpointUnreachable`` instead of hanging in a retry loop.
"""

from __future__ import annotations

import time
from typing import Any

from mountctl.errors import BucketNotFound, EndpointUnreachable
from mountctl.preflight import check_bucket_access
from mountctl.s3env import S3Settings, redact

__all__ = ["ensure_bucket", "list_object_sizes", "short_client"]


def short_client(settings: S3Settings) -> Any:
    """A boto3 client that gives up quickly: the calls here are small metadata requests."""
    return settings.boto3_client(connect_timeout=5, read_timeout=30, retries=2)


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
    client = short_client(settings)
    from botocore.exceptions import BotoCoreError, ClientError

    try:
        client.create_bucket(Bucket=bucket)
    except ClientError as exc:
        code = exc.response.get("Error", {}).get("Code", "")
        if code not in ("BucketAlreadyOwnedByYou", "BucketAlreadyExists"):
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


def list_object_sizes(client: Any, bucket: str, prefix: str) -> dict[str, int]:
    """Sizes of the objects directly under ``prefix``, by name relative to it."""
    sizes: dict[str, int] = {}
    paginator = client.get_paginator("list_objects_v2")
    for page in paginator.paginate(Bucket=bucket, Prefix=prefix, Delimiter="/"):
        for item in page.get("Contents", []):
            sizes[item["Key"][len(prefix):]] = int(item["Size"])
    return sizes
