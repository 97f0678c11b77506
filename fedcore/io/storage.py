"""Storage: local paths and s3://bucket/key URIs behind one set of functions.

Every function takes either form, so callers never branch. S3 goes through boto3 (see
`fedcore.io.s3_client` for the environment variables it honours: AWS_*, AWS_ENDPOINT_URL or
MLFLOW_S3_ENDPOINT_URL, FEDCORE_S3_*). Uploads store a sha256 in the object metadata and
downloads verify it. Every local write is atomic: a temp file in the same folder, then
os.replace, so a reader never sees half a file.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import tempfile
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import IO, Any

from fedcore.errors import StorageError
from fedcore.io import s3_client, s3_objects
from fedcore.io.files import MB, atomic_open, sha256_file
from fedcore.io.s3_client import endpoint_url, is_s3, parse_s3

__all__ = [
    "atomic_write", "copy_to", "download_dir", "download_file", "endpoint_url", "exists", "is_s3",
    "latest_under", "list_prefix", "parse_s3", "read_bytes", "sha256_file", "stage_prefix",
    "upload_dir", "upload_file", "write_bytes",
]

PathOrUri = str | os.PathLike[str]
_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://")
_MANIFEST = ".fedcore-stage.json"  # ETags of staged files, so a re-stage skips unchanged ones
_WORKERS = 8
_CHUNK = 1024


@contextlib.contextmanager
def atomic_write(path: PathOrUri, mode: str = "wb", encoding: str | None = None) -> Iterator[IO[Any]]:
    """Yield a temp file beside `path`; on success fsync it and os.replace it onto `path`.

    On an exception the temp file is removed and `path` is left as it was. For an s3://
    `path` the temp file is local and is uploaded (with its sha256) once complete.
    """
    if is_s3(path):
        with tempfile.TemporaryDirectory(prefix="fedcore-upload-") as tmp_dir:
            local = Path(tmp_dir) / "part"
            with open(local, mode, encoding=encoding) as f:
                yield f
            s3_objects.put_file(local, str(path), 64 * MB, 16 * MB)
        return
    with atomic_open(_local(path), mode, encoding) as f:
        yield f


def _local(path: PathOrUri) -> Path:
    s = os.fspath(path)
    m = _SCHEME.match(s)
    if m:
        if m.group(1).lower() != "file":
            raise StorageError(f"unsupported URI scheme '{m.group(1)}' in '{s}'; use a local path or s3://bucket/key")
        s = s[len("file://"):]
    return Path(s).expanduser()


def _copy_local(src: Path, dest: Path) -> Path:
    if not src.is_file():
        raise StorageError(f"no file at '{src}'; check the path")
    with open(src, "rb") as fin, atomic_write(dest) as fout:
        shutil.copyfileobj(fin, fout, MB)
    return dest


def _local_files(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*") if p.is_file() and p.name != _MANIFEST)


def _parallel(fn: Callable[[Any], Any], items: Iterable[Any]) -> list[Any]:
    # Chunks keep a million-file prefix from queueing a million futures at once.
    items, out = list(items), []
    with ThreadPoolExecutor(_WORKERS) as pool:
        for start in range(0, len(items), _CHUNK):
            out += pool.map(fn, items[start:start + _CHUNK])
    return out


def _safe_rel(rel: str, key: str) -> str:
    if not rel or rel.startswith("/") or any(p in ("", ".", "..") for p in rel.split("/")):
        raise StorageError(f"object key '{key}' cannot be mirrored into a local folder safely; rename it")
    return rel


# -- single files and objects ---------------------------------------------------------------


def upload_file(local: PathOrUri, uri: str, *, multipart_threshold: int = 64 * MB,
                chunk_size: int = 16 * MB) -> str:
    """Upload one file (multipart above `multipart_threshold` bytes) with its sha256 in metadata.

    A `uri` ending in '/' receives the file under its own name. Returns the destination.
    """
    src = _local(local)
    if not src.is_file():
        raise StorageError(f"cannot upload '{src}': no such file")
    if not is_s3(uri):
        dest = _local(uri)
        return str(_copy_local(src, dest / src.name if dest.is_dir() else dest))
    uri = uri + src.name if uri.endswith("/") else uri
    return s3_objects.put_file(src, uri, multipart_threshold, chunk_size)


def download_file(uri: PathOrUri, local: PathOrUri) -> Path:
    """Download one object to `local` atomically; ArtifactError when its stored sha256 disagrees.

    An existing folder as `local` receives the file under its own name.
    """
    dest = _local(local)
    if dest.is_dir():
        dest = dest / str(uri).rstrip("/").rsplit("/", 1)[-1]
    if not is_s3(uri):
        return _copy_local(_local(uri), dest)
    s3_objects.get_file(str(uri), dest)
    return dest


def read_bytes(uri_or_path: PathOrUri) -> bytes:
    """The whole content of a file or object, checked against its stored sha256."""
    if is_s3(uri_or_path):
        return s3_objects.get_bytes(str(uri_or_path))
    path = _local(uri_or_path)
    if not path.is_file():
        raise StorageError(f"no file at '{path}'; check the path")
    return path.read_bytes()


def write_bytes(uri_or_path: PathOrUri, data: bytes) -> str:
    """Write `data` atomically (a renamed local temp file, or one S3 PUT); returns the destination."""
    if is_s3(uri_or_path):
        return s3_objects.put_bytes(str(uri_or_path), data)
    path = _local(uri_or_path)
    with atomic_write(path) as f:
        f.write(data)
    return str(path)


def exists(uri_or_path: PathOrUri) -> bool:
    """True for an existing file, folder, object, non-empty prefix, or bucket (`s3://bucket`)."""
    if not is_s3(uri_or_path):
        return _local(uri_or_path).exists()
    uri = str(uri_or_path)
    bucket, key = parse_s3(uri)
    if not key.strip("/"):
        return s3_client.bucket_exists(bucket)
    if s3_objects.head(uri) is not None:
        return True
    with s3_client.errors(uri, "checking"):
        resp = s3_client.client().list_objects_v2(Bucket=bucket, Prefix=s3_client.dir_key(key), MaxKeys=1)
    return resp.get("KeyCount", 0) > 0


# -- folders and prefixes -------------------------------------------------------------------


def upload_dir(local_dir: PathOrUri, uri_prefix: str) -> list[str]:
    """Upload every file under `local_dir` to `uri_prefix/<relative path>`; returns the destinations."""
    root = _local(local_dir)
    if not root.is_dir():
        raise StorageError(f"'{root}' is not a directory; pass the folder to upload")
    if is_s3(uri_prefix):
        parse_s3(uri_prefix)
        s3_client.client()  # build the shared client once, before the worker threads need it
    return _parallel(lambda f: upload_file(f, s3_client.join(str(uri_prefix), f.relative_to(root).as_posix())),
                     _local_files(root))


def download_dir(uri_prefix: PathOrUri, local_dir: PathOrUri) -> Path:
    """Download every object under `uri_prefix` to `local_dir/<relative key>`; returns `local_dir`."""
    dest = _local(local_dir)
    if is_s3(uri_prefix):
        return _mirror(str(uri_prefix), dest, skip_fresh=False)
    upload_dir(uri_prefix, str(dest))
    return dest


def stage_prefix(uri_prefix: PathOrUri, cache_dir: PathOrUri) -> Path:
    """Mirror an s3:// prefix into `cache_dir/<bucket>/<prefix>` and return that folder.

    Files already there with the size and ETag recorded at the last staging are skipped;
    objects are never deleted locally. A local folder is returned as it is.
    """
    if not is_s3(uri_prefix):
        root = _local(uri_prefix)
        if not root.is_dir():
            raise StorageError(f"'{root}' is not a directory; pass a local folder or an s3:// prefix")
        return root
    bucket, key = parse_s3(str(uri_prefix))
    key = key.strip("/")
    target = _local(cache_dir) / bucket / (_safe_rel(key, key) if key else "")
    return _mirror(str(uri_prefix), target, skip_fresh=True)


def _mirror(uri_prefix: str, target: Path, skip_fresh: bool) -> Path:
    bucket, key = parse_s3(uri_prefix)
    objects, _ = s3_objects.list_objects(uri_prefix)
    if not objects:
        raise StorageError(f"nothing under '{uri_prefix}'; upload the files first (fedcore.io.upload_dir)")
    manifest = _read_manifest(target) if skip_fresh else {}

    def fetch(obj: dict[str, Any]) -> tuple[str, str]:
        rel = _safe_rel(obj["Key"][len(s3_client.dir_key(key)):], obj["Key"])
        dest = target / rel
        if manifest.get(rel) == obj["ETag"] and dest.is_file() and dest.stat().st_size == obj["Size"]:
            return rel, obj["ETag"]
        return rel, s3_objects.get_file(f"s3://{bucket}/{obj['Key']}", dest, size_hint=obj["Size"])["ETag"]

    etags = dict(_parallel(fetch, objects))
    if skip_fresh:
        with atomic_write(target / _MANIFEST, "w", encoding="utf-8") as f:
            json.dump(etags, f, sort_keys=True)
    return target


def _read_manifest(target: Path) -> dict[str, str]:
    try:
        data = json.loads((target / _MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}  # no or unreadable manifest: stage everything again
    return data if isinstance(data, dict) else {}


def list_prefix(uri: PathOrUri) -> list[str]:
    """Every file or object under a folder or prefix (recursively), sorted; [] when there is none."""
    if not is_s3(uri):
        path = _local(uri)
        if path.is_file():
            return [str(path)]
        return [str(f) for f in _local_files(path)] if path.is_dir() else []
    uri = str(uri)
    bucket, _ = parse_s3(uri)
    objects, _ = s3_objects.list_objects(uri)
    if not objects and s3_objects.head(uri) is not None:
        return [uri]
    return sorted(f"s3://{bucket}/{o['Key']}" for o in objects)


def latest_under(prefix: PathOrUri) -> str | None:
    """The child (file, folder, object or sub-prefix) of `prefix` with the greatest name, or None.

    Names starting with '.' are ignored, so for snapshots named by date or sortable
    timestamp this is the newest one.
    """
    if not is_s3(prefix):
        path = _local(prefix)
        names = [c.name for c in path.iterdir() if not c.name.startswith(".")] if path.is_dir() else []
        return str(path / max(names)) if names else None
    bucket, _ = parse_s3(str(prefix))
    objects, prefixes = s3_objects.list_objects(str(prefix), delimiter="/")
    keys = [k.rstrip("/") for k in [o["Key"] for o in objects] + prefixes]
    keys = [k for k in keys if not k.rsplit("/", 1)[-1].startswith(".")]
    return f"s3://{bucket}/{max(keys)}" if keys else None


def copy_to(src: PathOrUri, dest: PathOrUri) -> str:
    """Copy a file or folder (object or prefix) between local paths and s3:// URIs; returns `dest`."""
    if not is_s3(src):
        if _local(src).is_dir():
            upload_dir(src, str(dest))
            return str(dest)
        return upload_file(src, str(dest))
    src = str(src)
    if s3_objects.head(src) is not None:
        return s3_objects.copy_object(src, str(dest)) if is_s3(dest) else str(download_file(src, dest))
    if not is_s3(dest):
        return str(download_dir(src, dest))
    key = parse_s3(src)[1]
    objects, _ = s3_objects.list_objects(src)
    if not objects:
        raise s3_client.missing(src)
    rels = [o["Key"][len(s3_client.dir_key(key)):] for o in objects]
    _parallel(lambda r: s3_objects.copy_object(s3_client.join(src, r), s3_client.join(str(dest), r)), rels)
    return str(dest)
