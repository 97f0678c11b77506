"""Files and storage URIs in one place: local paths, s3:// objects, atomic writes.

Import from here (`from fedcore.io import atomic_write, read_bytes`); the modules behind it:

- `files`: local primitives: sha256 of a file, the one temp-file/fsync/rename writer
  (`atomic_open`, `atomic_write_bytes`) and `publish` for temp files made elsewhere;
- `storage`: one set of functions for local paths and s3:// URIs alike (read, write, copy,
  list, upload/download folders, stage an s3:// prefix into a local cache);
- `s3_client` (URIs, the boto3 client, boto3 errors as one-line StorageErrors) and
  `s3_objects` (single-object requests with sha256 checks): the S3 half of `storage`.
"""

from fedcore.io.files import MB, atomic_open, atomic_write_bytes, publish, publish_dir, sha256_file
from fedcore.io.s3_client import endpoint_url, is_s3, parse_s3
from fedcore.io.storage import (
    atomic_write,
    copy_to,
    download_dir,
    download_file,
    exists,
    latest_under,
    list_prefix,
    read_bytes,
    stage_prefix,
    upload_dir,
    upload_file,
    write_bytes,
)

__all__ = [
    "MB", "atomic_open", "atomic_write", "atomic_write_bytes", "copy_to", "download_dir", "download_file",
    "endpoint_url", "exists", "is_s3", "latest_under", "list_prefix", "parse_s3", "publish", "publish_dir",
    "read_bytes", "sha256_file", "stage_prefix", "upload_dir", "upload_file", "write_bytes",
]
