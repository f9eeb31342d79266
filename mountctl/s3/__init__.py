"""S3 in one place: ``settings`` resolves where the store is and with which keys, ``objects`` talks to it.

Every backend, client library, source kind and script asks ``resolve()``; nothing else reads ``AWS_*``
variables, and every listing of a prefix goes through ``list_objects``. This package is public (``mountctl.s3``).
"""

from __future__ import annotations

from .objects import (
    StoredObject,
    check_bucket_access,
    client,
    ensure_bucket,
    is_not_found,
    is_precondition_failed,
    list_object_sizes,
    list_objects,
    object_etag_now,
    object_exists,
    object_head_now,
    object_size,
    object_size_now,
    plain_etag,
    read_range,
    short_client,
)
from .settings import (
    DEFAULT_REGION,
    S3Settings,
    S3Uri,
    is_auth_error,
    parse_s3_uri,
    refresh_credentials,
    resolve,
)

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
    "StoredObject",
    "list_objects",
    "list_object_sizes",
    "object_size",
    "object_exists", "object_size_now",
    "plain_etag", "object_etag_now", "object_head_now", "is_precondition_failed", "read_range",
]
