"""Ask S3 directly whether a mount can work, so that errors name the real cause.

A FUSE program that cannot reach its bucket often mounts anyway and fails
every read later (s3fs even reports success first).  One HEAD and one LIST
with short timeouts turn that into BucketNotFound, CredentialsError or
EndpointUnreachable before any daemon starts.
"""

from __future__ import annotations

from .errors import BucketNotFound, CredentialsError, EndpointUnreachable, MountError
from .s3env import S3Settings, redact

__all__ = ["check_bucket_access"]


def check_bucket_access(settings: S3Settings, bucket: str, prefix: str = "", *, timeout_s: float = 5.0) -> None:
    from botocore.exceptions import BotoCoreError, ClientError, EndpointConnectionError, NoCredentialsError

    where = settings.endpoint_url or f"AWS S3 ({settings.region})"
    client = settings.boto3_client(connect_timeout=timeout_s, read_timeout=timeout_s, retries=1)
    try:
        client.list_objects_v2(Bucket=bucket, Prefix=prefix, MaxKeys=1)
    except ClientError as exc:
        code = str(exc.response.get("Error", {}).get("Code", ""))
        status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        if code in ("NoSuchBucket", "404") or status == 404:
            raise BucketNotFound(
                f"bucket {bucket!r} does not exist at {where}; create it "
                f"(e.g. `aws s3 mb s3://{bucket}`) or fix the URI"
            ) from None
        if code in ("InvalidAccessKeyId", "SignatureDoesNotMatch", "AccessDenied", "403", "ExpiredToken",
                    "InvalidToken") or status == 403:
            raise CredentialsError(
                f"S3 at {where} refused access to bucket {bucket!r} ({code}); check AWS_ACCESS_KEY_ID/"
                "AWS_SECRET_ACCESS_KEY or AWS_PROFILE (for the local server: "
                "eval \"$(mountctl local-s3 env)\")"
            ) from None
        raise MountError(f"S3 at {where} answered {code or status} for bucket {bucket!r}: "
                         f"{redact(str(exc))}") from None
    except NoCredentialsError:
        raise CredentialsError(
            "no AWS credentials found; set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or AWS_PROFILE, "
            "or run eval \"$(mountctl local-s3 env)\" for the embedded local S3"
        ) from None
    except EndpointConnectionError:
        raise EndpointUnreachable(
            f"nothing answers at S3 endpoint {where}; check AWS_ENDPOINT_URL, or start the local "
            "server with `mountctl local-s3 start`"
        ) from None
    except BotoCoreError as exc:
        raise EndpointUnreachable(f"could not talk to S3 at {where}: {redact(str(exc))}") from None
