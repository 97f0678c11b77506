"""The S3 client of `fedcore.io`: URIs, the boto3 client, and boto3 errors as one-line StorageErrors.

Use `fedcore.io`; this module and `s3_objects` are its S3 half. The client honours
AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN, AWS_DEFAULT_REGION and a custom
endpoint in AWS_ENDPOINT_URL_S3, AWS_ENDPOINT_URL or MLFLOW_S3_ENDPOINT_URL (first set wins).
Tuning: FEDCORE_S3_ADDRESSING=path|virtual (default path with a custom endpoint),
FEDCORE_S3_CONNECT_TIMEOUT and FEDCORE_S3_READ_TIMEOUT in seconds, FEDCORE_S3_MAX_ATTEMPTS.
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Iterator
from functools import lru_cache
from typing import Any

from fedcore.errors import ArtifactError, StorageError
from fedcore.io.files import MB

ENDPOINT_VARS = ("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL", "MLFLOW_S3_ENDPOINT_URL")
_CLIENT_VARS = (
    "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_DEFAULT_REGION", "AWS_REGION",
    "AWS_PROFILE", "AWS_SHARED_CREDENTIALS_FILE", "AWS_CONFIG_FILE", *ENDPOINT_VARS, "FEDCORE_S3_ADDRESSING",
    "FEDCORE_S3_CONNECT_TIMEOUT", "FEDCORE_S3_READ_TIMEOUT", "FEDCORE_S3_MAX_ATTEMPTS",
)
_BUCKET = re.compile(r"^[a-z0-9][a-z0-9._-]{1,61}[a-z0-9]$")
NOT_FOUND = ("404", "NotFound", "NoSuchKey", "NoSuchBucket")
_DENIED = ("InvalidAccessKeyId", "SignatureDoesNotMatch", "AccessDenied", "InvalidToken", "ExpiredToken",
           "403")


# -- URIs --------------------------------------------------------------------------------


def is_s3(uri: Any) -> bool:
    return isinstance(uri, str) and uri.startswith("s3://")


def parse_s3(uri: str) -> tuple[str, str]:
    """Split `s3://bucket/key` into (bucket, key); the key may be empty (a bucket root)."""
    if not is_s3(uri):
        raise StorageError(f"'{uri}' is not an s3:// URI; write it as s3://bucket/key")
    bucket, _, key = uri[len("s3://"):].partition("/")
    if not _BUCKET.match(bucket):
        raise StorageError(f"bad bucket name '{bucket}' in '{uri}'; use s3://bucket/key with a bucket "
                           "of 3-63 lowercase letters, digits, dots or hyphens")
    return bucket, key


def object_key(uri: str) -> tuple[str, str]:
    """(bucket, key) of a URI that must name one object, not a prefix."""
    bucket, key = parse_s3(uri)
    if not key or key.endswith("/"):
        raise StorageError(f"'{uri}' names a prefix, not an object; add the key, e.g. s3://{bucket}/file")
    return bucket, key


def dir_key(key: str) -> str:
    # "data/mnist" must not match "data/mnist2/...", so a prefix always ends at a '/'.
    return key if not key or key.endswith("/") else key + "/"


def join(uri: str, rel: str) -> str:
    return uri.rstrip("/") + "/" + rel


# -- the client --------------------------------------------------------------------------


def endpoint_url() -> str | None:
    """The custom S3 endpoint from the environment, or None for AWS itself."""
    return next((os.environ[v] for v in ENDPOINT_VARS if os.environ.get(v)), None)


def _env_number(name: str, default: float) -> float:
    raw = os.environ.get(name)
    try:
        return float(raw) if raw else default
    except ValueError:
        raise StorageError(f"{name}='{raw}' is not a number; set seconds (or a count) or unset it") from None


def client() -> Any:
    """A boto3 S3 client for the current environment (cached while the environment is unchanged)."""
    return _make_client(tuple(os.environ.get(v) for v in _CLIENT_VARS))


@lru_cache(maxsize=8)
def _make_client(env: tuple[str | None, ...]) -> Any:
    # `env` only keys the cache; the values are read from os.environ below.
    import boto3  # lazy: boto3 for s3:// URIs only
    from botocore.config import Config  # lazy: boto3 for s3:// URIs only

    endpoint = endpoint_url()
    style = os.environ.get("FEDCORE_S3_ADDRESSING") or ("path" if endpoint else "auto")
    if style not in ("path", "virtual", "auto"):
        raise StorageError(f"FEDCORE_S3_ADDRESSING='{style}' is invalid; set it to 'path' or 'virtual'")
    config = Config(
        connect_timeout=_env_number("FEDCORE_S3_CONNECT_TIMEOUT", 5.0),
        read_timeout=_env_number("FEDCORE_S3_READ_TIMEOUT", 60.0),
        retries={"max_attempts": int(_env_number("FEDCORE_S3_MAX_ATTEMPTS", 3)), "mode": "standard"},
        s3={"addressing_style": style},
    )
    # A custom endpoint (MinIO, moto, Ceph) ignores the region, but botocore insists on one.
    region = os.environ.get("AWS_DEFAULT_REGION") or os.environ.get("AWS_REGION")
    try:
        return boto3.session.Session().client(
            "s3", endpoint_url=endpoint, region_name=region or ("us-east-1" if endpoint else None), config=config
        )
    except ValueError as err:  # e.g. botocore's "Invalid endpoint: ...": a typo in the environment
        raise StorageError(f"cannot set up the S3 client ({err}); set AWS_ENDPOINT_URL (or MLFLOW_S3_ENDPOINT_URL) "
                           "to a URL such as http://localhost:8333 and check AWS_DEFAULT_REGION") from None


def transfer_config(threshold: int = 64 * MB, chunk: int = 16 * MB) -> Any:
    from boto3.s3.transfer import TransferConfig  # lazy: boto3 for s3:// URIs only

    return TransferConfig(multipart_threshold=threshold, multipart_chunksize=chunk,
                          preferred_transfer_client="classic")


# -- errors ------------------------------------------------------------------------------


def error_code(err: Any) -> str:
    return str(err.response.get("Error", {}).get("Code", "unknown"))


def _translate(err: Exception, uri: str, action: str) -> StorageError:
    from botocore.exceptions import (  # lazy: boto3 for s3:// URIs only
        ClientError,
        ConnectionError,
        HTTPClientError,
        NoCredentialsError,
    )

    where = endpoint_url() or "AWS S3"
    if isinstance(err, NoCredentialsError):
        return StorageError(f"no S3 credentials for {action} '{uri}'; "
                            "set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY")
    if isinstance(err, ConnectionError | HTTPClientError):
        return StorageError(f"cannot reach the S3 endpoint {where} while {action} '{uri}'; start the server "
                            "or set AWS_ENDPOINT_URL (or MLFLOW_S3_ENDPOINT_URL) to a reachable one")
    if not isinstance(err, ClientError):
        return StorageError(f"S3 failed while {action} '{uri}': {str(err).splitlines()[0]}")
    code = error_code(err)
    if code in NOT_FOUND:
        return missing(uri, bucket_missing=code == "NoSuchBucket")
    if code in _DENIED:
        return StorageError(f"S3 at {where} refused {action} '{uri}' ({code}); check AWS_ACCESS_KEY_ID, "
                            "AWS_SECRET_ACCESS_KEY (and AWS_SESSION_TOKEN) and the bucket policy")
    msg = " ".join(str(err.response.get("Error", {}).get("Message", "")).splitlines()[:1])
    return StorageError(f"S3 error {code} while {action} '{uri}': {msg or 'no details'}")


def missing(uri: str, bucket_missing: bool = False) -> StorageError:
    """The error for a URI with nothing behind it, naming the bucket when that is what is missing."""
    bucket = parse_s3(uri)[0]
    # A HEAD on a missing bucket answers a bare 404 too, so ask the bucket itself.
    if bucket_missing or not _bucket_exists_or_unknown(bucket):
        return StorageError(f"bucket '{bucket}' does not exist at {endpoint_url() or 'AWS S3'}; "
                            f"create it or fix the bucket in '{uri}'")
    return StorageError(f"no object at '{uri}'; check the key (fedcore.io.list_prefix lists a prefix)")


@contextlib.contextmanager
def errors(uri: str, action: str) -> Iterator[None]:
    """Turn boto3/botocore failures inside the block into one-line StorageErrors."""
    from boto3.exceptions import S3UploadFailedError  # lazy: boto3 for s3:// URIs only
    from botocore.exceptions import BotoCoreError, ClientError  # lazy: boto3 for s3:// URIs only

    try:
        yield
    except S3UploadFailedError as err:
        # boto3 wraps the ClientError of a failed upload; report the underlying cause.
        cause = err.__cause__ or err.__context__
        raise _translate(cause if isinstance(cause, Exception) else err, uri, action) from None
    except (ClientError, BotoCoreError) as err:
        raise _translate(err, uri, action) from None


def mismatch(uri: str, want: str, got: str) -> ArtifactError:
    return ArtifactError(f"checksum mismatch for '{uri}': metadata sha256 {want[:12]}..., content "
                         f"{got[:12]}...; the object was changed or corrupted, upload it again")


# -- buckets -----------------------------------------------------------------------------


def bucket_exists(bucket: str) -> bool:
    from botocore.exceptions import ClientError  # lazy: boto3 for s3:// URIs only

    with errors(f"s3://{bucket}", "checking bucket"):
        try:
            client().head_bucket(Bucket=bucket)
        except ClientError as err:
            if error_code(err) in NOT_FOUND:
                return False
            raise
    return True


def _bucket_exists_or_unknown(bucket: str) -> bool:
    # Credentials allowed to read objects may still be denied HeadBucket; assume it exists then.
    try:
        return bucket_exists(bucket)
    except StorageError:
        return True
