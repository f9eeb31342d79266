"""``s3.is_auth_error``: a refusal of the credentials, told apart from a message that merely names a 403 object.

Messages are as each library words them (botocore's ClientError, s3fs's PermissionError, s3torchconnector's and the
mount programs' text); a store cannot be made to return them on demand for a key named ``shard-403.tar`` with any
other error, so the strings are written out here.
"""

from __future__ import annotations

import pytest
from botocore.exceptions import ClientError

from mountctl import s3

pytestmark = pytest.mark.unit


@pytest.mark.parametrize("message", [
    "reading object s3://data/own/shard-403.tar failed: OSError: [Errno 107] Transport endpoint is not connected",
    "Client error: Request ID: None, service error: NoSuchKey for s3://data/own/shard-403.tar",
    "shard s3://data/403/train-000001.tar changed since it was indexed",
    "Client error: connection reset reading train-000403.tar",
    "object AccessDenied.tar is truncated",
])
def test_a_message_that_names_a_403_object_is_not_an_auth_error(message):
    assert not s3.is_auth_error(RuntimeError(message))


@pytest.mark.parametrize("message", [
    "Client error: Forbidden: 403 InvalidAccessKeyId",  # s3torchconnector
    "HTTP response code 403, returning EPERM.",  # s3fs-fuse's log
    "operation error S3: GetObject, https response error StatusCode: 403, RequestID: 18EA, api error "
    "InvalidAccessKeyId: The access key ID you provided does not exist in our records.",  # rclone's log
    "Client error: Forbidden: Access Denied reading s3://data/own/shard-403.tar",
    "An error occurred (403) when calling the HeadObject operation: Forbidden",  # botocore's text
    "ExpiredToken: The provided token has expired.",
])
def test_a_real_refusal_is_an_auth_error_in_each_library_s_words(message):
    assert s3.is_auth_error(RuntimeError(message))


def test_a_client_error_is_judged_by_its_code_and_status_not_its_text():
    forbidden = ClientError({"Error": {"Code": "403", "Message": "Forbidden"},
                             "ResponseMetadata": {"HTTPStatusCode": 403}}, "HeadObject")
    missing = ClientError({"Error": {"Code": "NoSuchKey", "Message": "shard-403.tar"},
                           "ResponseMetadata": {"HTTPStatusCode": 404}}, "GetObject")
    assert s3.is_auth_error(forbidden) and not s3.is_auth_error(missing)
