"""Single-object S3 requests of `fedcore.io`: HEAD, listing, upload, download, copy.

Every request runs inside `s3_client.errors`, so boto3 failures surface as one-line
StorageErrors. Uploads store the content's sha256 in the object metadata; downloads and
reads verify it.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from fedcore.errors import ArtifactError
from fedcore.io.files import MB, publish, sha256_file
from fedcore.io.s3_client import (
    NOT_FOUND,
    client,
    dir_key,
    error_code,
    errors,
    mismatch,
    missing,
    object_key,
    parse_s3,
    transfer_config,
)

_SMALL = 8 * MB  # below this, one plain GET beats a managed (possibly multipart) transfer
SHA_KEY = "sha256"  # object metadata key holding the content's hex sha256


def head(uri: str) -> dict[str, Any] | None:
    """The object's HEAD response, or None when no object has exactly that key."""
    from botocore.exceptions import ClientError  # lazy: boto3 for s3:// URIs only

    bucket, key = parse_s3(uri)
    if not key or key.endswith("/"):
        return None
    with errors(uri, "checking"):
        try:
            return client().head_object(Bucket=bucket, Key=key)
        except ClientError as err:
            if error_code(err) in NOT_FOUND:
                return None
            raise


def list_objects(uri: str, delimiter: str = "") -> tuple[list[dict[str, Any]], list[str]]:
    """(objects, sub-prefixes) under the prefix `uri`, all pages; folder-marker keys are dropped."""
    bucket, key = parse_s3(uri)
    objects: list[dict[str, Any]] = []
    prefixes: list[str] = []
    with errors(uri, "listing"):
        pages = client().get_paginator("list_objects_v2").paginate(
            Bucket=bucket, Prefix=dir_key(key), Delimiter=delimiter)
        for page in pages:
            objects += [o for o in page.get("Contents", []) if not o["Key"].endswith("/")]
            prefixes += [p["Prefix"] for p in page.get("CommonPrefixes", [])]
    return objects, prefixes


def put_file(src: Path, uri: str, threshold: int, chunk: int) -> str:
    bucket, key = object_key(uri)
    extra = {"Metadata": {SHA_KEY: sha256_file(src)}}
    with errors(uri, "uploading to"):
        client().upload_file(str(src), bucket, key, ExtraArgs=extra, Config=transfer_config(threshold, chunk))
    return uri


def get_file(uri: str, dest: Path, size_hint: int | None = None) -> dict[str, Any]:
    """Download to a temp file beside `dest`, verify size and sha256, then rename.

    Returns the response metadata (ETag, ContentLength, Metadata). A `size_hint` below
    8 MiB (known from a listing) means one GET instead of a HEAD plus a managed transfer.
    """
    bucket, key = object_key(uri)
    dest.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=dest.parent, prefix=f".{dest.name}.", suffix=".part")
    os.close(fd)
    try:
        meta = _fetch(uri, bucket, key, tmp, size_hint)
        size, want = os.path.getsize(tmp), meta.get("Metadata", {}).get(SHA_KEY)
        if size != meta["ContentLength"]:
            raise ArtifactError(f"download of '{uri}' is truncated ({size} of {meta['ContentLength']} "
                                "bytes); retry and check free disk space")
        if want and (got := sha256_file(tmp)) != want:
            raise mismatch(uri, want, got)
        publish(tmp, dest)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    return meta


def _fetch(uri: str, bucket: str, key: str, tmp: str, size_hint: int | None) -> dict[str, Any]:
    if size_hint is not None and size_hint < _SMALL:
        with errors(uri, "downloading"), open(tmp, "wb") as f:
            resp = client().get_object(Bucket=bucket, Key=key)
            shutil.copyfileobj(resp["Body"], f, MB)
        return resp
    meta = head(uri)
    if meta is None:
        raise missing(uri)
    with errors(uri, "downloading"):
        client().download_file(bucket, key, tmp, Config=transfer_config())
    return meta


def get_bytes(uri: str) -> bytes:
    bucket, key = object_key(uri)
    with errors(uri, "reading"):
        resp = client().get_object(Bucket=bucket, Key=key)
        data = resp["Body"].read()
    want = resp.get("Metadata", {}).get(SHA_KEY)
    if want and (got := hashlib.sha256(data).hexdigest()) != want:
        raise mismatch(uri, want, got)
    return data


def put_bytes(uri: str, data: bytes) -> str:
    bucket, key = object_key(uri)
    with errors(uri, "writing"):
        client().put_object(Bucket=bucket, Key=key, Body=data,
                            Metadata={SHA_KEY: hashlib.sha256(data).hexdigest()})
    return uri


def copy_object(src: str, dest: str) -> str:
    """Server-side copy; the sha256 metadata travels with the object."""
    (sb, sk), (db, dk) = object_key(src), object_key(dest)
    with errors(dest, "copying to"):
        client().copy({"Bucket": sb, "Key": sk}, db, dk, Config=transfer_config())
    return dest
