"""fedcore.io.storage against local folders and a real S3-compatible server (moto on 127.0.0.1)."""

from __future__ import annotations

import hashlib
import os
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import numpy as np
import pytest

from fedcore.errors import ArtifactError, StorageError
from fedcore.io import s3_client as _s3
from fedcore.io import storage
from tests.fixtures.s3 import S3Server, free_port

MiB = 1024 * 1024


def _tree(root: Path) -> dict[str, bytes]:
    files = {"a.txt": b"alpha", "sub/b.bin": bytes(range(200)), "sub/deeper/c.json": b'{"c": 3}'}
    for rel, data in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
    return files


# -- URIs ---------------------------------------------------------------------------------


@pytest.mark.parametrize(("uri", "expected"), [
    ("s3://my-bucket/a/b.txt", ("my-bucket", "a/b.txt")),
    ("s3://my.bucket-1", ("my.bucket-1", "")),
    ("s3://abc/", ("abc", "")),
])
def test_parse_s3_splits_bucket_and_key(uri: str, expected: tuple[str, str]):
    assert storage.parse_s3(uri) == expected
    assert storage.is_s3(uri)


@pytest.mark.parametrize("uri", ["s3://", "s3:///key", "s3://ab/k", "s3://Bad_Bucket/k", "s3://-bucket/k",
                                 "s3:/bucket/key", "http://bucket/key", "bucket/key"])
def test_malformed_s3_uris_raise_storage_error(uri: str):
    with pytest.raises(StorageError, match="s3://bucket/key"):
        storage.parse_s3(uri)


def test_non_s3_values_are_not_s3():
    assert not storage.is_s3(Path("s3-like/dir"))
    assert not storage.is_s3("/tmp/s3://x")


def test_unsupported_scheme_and_prefix_as_object_raise(tmp_path: Path):
    with pytest.raises(StorageError, match="unsupported URI scheme 'gs'"):
        storage.read_bytes("gs://bucket/key")
    with pytest.raises(StorageError, match="names a prefix, not an object"):
        storage.write_bytes("s3://some-bucket/dir/", b"x")


def test_file_scheme_is_a_local_path(tmp_path: Path):
    storage.write_bytes(f"file://{tmp_path}/f.bin", b"via file://")
    assert (tmp_path / "f.bin").read_bytes() == b"via file://"


def test_object_keys_that_escape_the_cache_are_refused():
    for rel in ("../x", "a/../../x", "/abs", "a//b", "./a"):
        with pytest.raises(StorageError, match="cannot be mirrored"):
            storage._safe_rel(rel, rel)
    assert storage._safe_rel("a/b.c", "a/b.c") == "a/b.c"


# -- atomic writes and local paths --------------------------------------------------------


def test_atomic_write_replaces_whole_file_and_keeps_old_on_error(tmp_path: Path):
    target = tmp_path / "deep" / "out.txt"
    with storage.atomic_write(target, "w", encoding="utf-8") as f:
        f.write("first")
    with pytest.raises(RuntimeError, match="boom"):
        with storage.atomic_write(target, "w", encoding="utf-8") as f:
            f.write("half of the second")
            raise RuntimeError("boom")
    assert target.read_text() == "first"
    assert sorted(p.name for p in target.parent.iterdir()) == ["out.txt"]


def test_atomic_write_gives_the_permissions_of_a_plain_open(tmp_path: Path):
    plain = tmp_path / "plain"
    plain.write_bytes(b"x")
    with storage.atomic_write(tmp_path / "atomic") as f:
        f.write(b"x")
    assert (tmp_path / "atomic").stat().st_mode == plain.stat().st_mode


def test_local_variants_of_every_function(tmp_path: Path):
    src = tmp_path / "src"
    files = _tree(src)
    assert storage.exists(src / "a.txt") and not storage.exists(src / "nope")
    assert storage.read_bytes(src / "sub/b.bin") == files["sub/b.bin"]
    assert storage.write_bytes(tmp_path / "w/x.bin", b"xyz") == str(tmp_path / "w/x.bin")
    assert storage.list_prefix(src) == [str(src / r) for r in sorted(files)]
    assert storage.latest_under(src) == str(src / "sub")
    assert storage.latest_under(tmp_path / "missing") is None
    assert storage.upload_file(src / "a.txt", str(tmp_path / "up.txt")) == str(tmp_path / "up.txt")
    assert storage.download_file(tmp_path / "up.txt", tmp_path / "down.txt").read_bytes() == b"alpha"
    storage.upload_dir(src, str(tmp_path / "copy"))
    assert storage.download_dir(tmp_path / "copy", tmp_path / "copy2") == tmp_path / "copy2"
    storage.copy_to(src, tmp_path / "copy3")
    for d in ("copy", "copy2", "copy3"):
        assert {r: (tmp_path / d / r).read_bytes() for r in files} == files
    assert storage.stage_prefix(src, tmp_path / "cache") == src
    with pytest.raises(StorageError, match="no file at"):
        storage.read_bytes(tmp_path / "nope")
    with pytest.raises(StorageError, match="not a directory"):
        storage.stage_prefix(tmp_path / "nope", tmp_path / "cache")


# -- S3 round trips -----------------------------------------------------------------------


def test_bytes_round_trip_and_sha256_metadata(s3_server: S3Server, s3_bucket: str):
    uri = f"s3://{s3_bucket}/runs/r1/report.json"
    assert storage.write_bytes(uri, b'{"acc": 0.9}') == uri
    assert storage.read_bytes(uri) == b'{"acc": 0.9}'
    meta = s3_server.client().head_object(Bucket=s3_bucket, Key="runs/r1/report.json")["Metadata"]
    assert meta == {"sha256": hashlib.sha256(b'{"acc": 0.9}').hexdigest()}
    assert storage.exists(uri) and storage.exists(f"s3://{s3_bucket}/runs") and storage.exists(f"s3://{s3_bucket}")
    assert not storage.exists(f"s3://{s3_bucket}/runs/r2")
    assert not storage.exists("s3://no-such-bucket-here")


def test_atomic_write_to_s3_uploads_only_when_complete(s3_server: S3Server, s3_bucket: str):
    uri = f"s3://{s3_bucket}/notes.txt"
    with pytest.raises(RuntimeError, match="interrupted"):
        with storage.atomic_write(uri, "w", encoding="utf-8") as f:
            f.write("partial")
            raise RuntimeError("interrupted")
    assert not storage.exists(uri)
    with storage.atomic_write(uri, "w", encoding="utf-8") as f:
        f.write("complete")
    assert storage.read_bytes(uri) == b"complete"


def test_file_round_trip_single_part(s3_server: S3Server, s3_bucket: str, tmp_path: Path):
    (tmp_path / "w.pt").write_bytes(b"weights" * 100)
    uri = storage.upload_file(tmp_path / "w.pt", f"s3://{s3_bucket}/models/")
    assert uri == f"s3://{s3_bucket}/models/w.pt"
    out = storage.download_file(uri, tmp_path / "out" / "w.pt")
    assert out.read_bytes() == b"weights" * 100
    assert sorted(p.name for p in out.parent.iterdir()) == ["w.pt"]  # no temp file left behind


def test_multipart_upload_above_threshold(s3_server: S3Server, s3_bucket: str, tmp_path: Path):
    # moto enforces S3's 5 MiB minimum part size, so 5 MiB + 1 KiB makes exactly two parts.
    data = np.random.default_rng(0).bytes(5 * MiB + 1024)
    (tmp_path / "big.bin").write_bytes(data)
    uri = f"s3://{s3_bucket}/big.bin"
    storage.upload_file(tmp_path / "big.bin", uri, multipart_threshold=5 * MiB, chunk_size=5 * MiB)
    head = s3_server.client().head_object(Bucket=s3_bucket, Key="big.bin")
    assert head["ETag"].strip('"').endswith("-2")
    assert head["Metadata"]["sha256"] == hashlib.sha256(data).hexdigest()
    assert storage.download_file(uri, tmp_path / "back.bin").read_bytes() == data


def test_checksum_mismatch_is_detected_and_leaves_nothing(s3_server: S3Server, s3_bucket: str, tmp_path):
    uri = f"s3://{s3_bucket}/ckpt.pt"
    storage.write_bytes(uri, b"genuine")
    good_sha = hashlib.sha256(b"genuine").hexdigest()
    # Someone overwrites the content but keeps the old metadata.
    s3_server.client().put_object(Bucket=s3_bucket, Key="ckpt.pt", Body=b"tampered",
                                  Metadata={"sha256": good_sha})
    with pytest.raises(ArtifactError, match="checksum mismatch for 's3://.*/ckpt.pt'"):
        storage.download_file(uri, tmp_path / "ckpt.pt")
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(ArtifactError, match="checksum mismatch"):
        storage.read_bytes(uri)


def test_object_without_sha_metadata_still_downloads(s3_server: S3Server, s3_bucket: str, tmp_path: Path):
    s3_server.client().put_object(Bucket=s3_bucket, Key="foreign.txt", Body=b"from elsewhere")
    out = storage.download_file(f"s3://{s3_bucket}/foreign.txt", tmp_path / "f")
    assert out.read_bytes() == b"from elsewhere"


def test_dir_round_trip_list_and_copy(s3_server: S3Server, s3_bucket: str, tmp_path: Path):
    files = _tree(tmp_path / "src")
    prefix = f"s3://{s3_bucket}/data/set"
    assert sorted(storage.upload_dir(tmp_path / "src", prefix)) == [f"{prefix}/{r}" for r in sorted(files)]
    storage.write_bytes(f"s3://{s3_bucket}/data/set2/other", b"not under data/set")
    assert storage.list_prefix(prefix) == [f"{prefix}/{r}" for r in sorted(files)]
    assert storage.list_prefix(f"{prefix}/a.txt") == [f"{prefix}/a.txt"]
    storage.download_dir(prefix, tmp_path / "dl")
    storage.copy_to(prefix, f"s3://{s3_bucket}/mirror")
    storage.copy_to(f"s3://{s3_bucket}/mirror", tmp_path / "dl2")
    for d in ("dl", "dl2"):
        assert {r: (tmp_path / d / r).read_bytes() for r in files} == files
    copied = s3_server.client().head_object(Bucket=s3_bucket, Key="mirror/a.txt")["Metadata"]
    assert copied["sha256"] == hashlib.sha256(b"alpha").hexdigest()


def test_latest_under_picks_greatest_child_name(s3_server: S3Server, s3_bucket: str):
    for key in ("snap/2024-01-05/x", "snap/2024-03-01/y", "snap/2024-02-10.json", "snap/.tmp-9999/z"):
        storage.write_bytes(f"s3://{s3_bucket}/{key}", b"1")
    assert storage.latest_under(f"s3://{s3_bucket}/snap") == f"s3://{s3_bucket}/snap/2024-03-01"
    assert storage.latest_under(f"s3://{s3_bucket}/empty/") is None


def test_mlflow_endpoint_variable_is_honoured(s3_server: S3Server, s3_bucket: str, monkeypatch):
    monkeypatch.delenv("AWS_ENDPOINT_URL")
    monkeypatch.setenv("MLFLOW_S3_ENDPOINT_URL", s3_server.endpoint)
    storage.write_bytes(f"s3://{s3_bucket}/k", b"v")
    assert s3_server.client().get_object(Bucket=s3_bucket, Key="k")["Body"].read() == b"v"
    assert _s3.client().meta.config.s3["addressing_style"] == "path"


# -- staging ------------------------------------------------------------------------------


def _inodes(root: Path, rels) -> dict[str, int]:
    return {r: (root / r).stat().st_ino for r in rels}


def test_stage_prefix_mirrors_then_skips_unchanged_files(s3_server: S3Server, s3_bucket: str, tmp_path: Path):
    files = _tree(tmp_path / "src")
    storage.upload_dir(tmp_path / "src", f"s3://{s3_bucket}/ds/mnist")
    local = storage.stage_prefix(f"s3://{s3_bucket}/ds/mnist", tmp_path / "cache")
    assert local == tmp_path / "cache" / s3_bucket / "ds" / "mnist"
    assert {r: (local / r).read_bytes() for r in files} == files
    before = _inodes(local, files)

    assert storage.stage_prefix(f"s3://{s3_bucket}/ds/mnist/", tmp_path / "cache") == local
    assert _inodes(local, files) == before  # nothing was rewritten

    storage.write_bytes(f"s3://{s3_bucket}/ds/mnist/a.txt", b"ALPHA")  # same size, new ETag
    (local / "sub/b.bin").write_bytes(b"truncated")  # local size no longer matches
    storage.stage_prefix(f"s3://{s3_bucket}/ds/mnist", tmp_path / "cache")
    after = _inodes(local, files)
    assert (local / "a.txt").read_bytes() == b"ALPHA" and after["a.txt"] != before["a.txt"]
    assert (local / "sub/b.bin").read_bytes() == files["sub/b.bin"]
    assert after["sub/deeper/c.json"] == before["sub/deeper/c.json"]


def test_stage_prefix_without_manifest_downloads_again(s3_server: S3Server, s3_bucket: str, tmp_path: Path):
    _tree(tmp_path / "src")
    storage.upload_dir(tmp_path / "src", f"s3://{s3_bucket}/p")
    local = storage.stage_prefix(f"s3://{s3_bucket}/p", tmp_path / "cache")
    before = (local / "a.txt").stat().st_ino
    (local / ".fedcore-stage.json").unlink()
    storage.stage_prefix(f"s3://{s3_bucket}/p", tmp_path / "cache")
    assert (local / "a.txt").stat().st_ino != before


def test_stage_prefix_detects_tampered_objects(s3_server: S3Server, s3_bucket: str, tmp_path: Path):
    storage.write_bytes(f"s3://{s3_bucket}/ds/x.bin", b"original")
    s3_server.client().put_object(Bucket=s3_bucket, Key="ds/x.bin", Body=b"replaced",
                                  Metadata={"sha256": hashlib.sha256(b"original").hexdigest()})
    with pytest.raises(ArtifactError, match="checksum mismatch for 's3://.*/ds/x.bin'"):
        storage.stage_prefix(f"s3://{s3_bucket}/ds", tmp_path / "cache")
    assert [p.name for p in (tmp_path / "cache" / s3_bucket / "ds").iterdir()] == []


def test_download_into_an_existing_folder_keeps_the_name(s3_server: S3Server, s3_bucket: str, tmp_path: Path):
    storage.write_bytes(f"s3://{s3_bucket}/m/final.pt", b"sd")
    assert storage.download_file(f"s3://{s3_bucket}/m/final.pt", tmp_path) == tmp_path / "final.pt"
    assert (tmp_path / "final.pt").read_bytes() == b"sd"


def test_stage_prefix_of_empty_prefix_says_what_to_do(s3_server: S3Server, s3_bucket: str, tmp_path: Path):
    with pytest.raises(StorageError, match="nothing under .*upload the files first"):
        storage.stage_prefix(f"s3://{s3_bucket}/nothing-here", tmp_path / "cache")


# -- failures -----------------------------------------------------------------------------


def test_missing_bucket_and_key_are_named(s3_server: S3Server, s3_bucket: str, tmp_path: Path):
    (tmp_path / "f").write_bytes(b"x")
    for call in (lambda: storage.read_bytes("s3://no-such-bucket-x/k"),
                 lambda: storage.download_file("s3://no-such-bucket-x/k", tmp_path / "o"),
                 lambda: storage.upload_file(tmp_path / "f", "s3://no-such-bucket-x/k")):
        with pytest.raises(StorageError, match="bucket 'no-such-bucket-x' does not exist"):
            call()
    with pytest.raises(StorageError, match=f"no object at 's3://{s3_bucket}/absent'"):
        storage.download_file(f"s3://{s3_bucket}/absent", tmp_path / "o")


def test_missing_credentials_name_the_variables(s3_server: S3Server, s3_bucket: str, tmp_path, monkeypatch):
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.delenv(name)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    with pytest.raises(StorageError, match="no S3 credentials.*AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY"):
        storage.read_bytes(f"s3://{s3_bucket}/k")


def _quick_env(monkeypatch, endpoint: str) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "k")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "s")
    monkeypatch.setenv("AWS_ENDPOINT_URL", endpoint)
    monkeypatch.setenv("FEDCORE_S3_CONNECT_TIMEOUT", "1")
    monkeypatch.setenv("FEDCORE_S3_READ_TIMEOUT", "1")
    monkeypatch.setenv("FEDCORE_S3_MAX_ATTEMPTS", "1")


def test_unreachable_endpoint_gives_one_line_storage_error(monkeypatch):
    _quick_env(monkeypatch, f"http://127.0.0.1:{free_port()}")  # nothing listens there
    with pytest.raises(StorageError, match="cannot reach the S3 endpoint .* set AWS_ENDPOINT_URL") as err:
        storage.read_bytes("s3://some-bucket/k")
    assert "\n" not in str(err.value)


def test_silent_endpoint_times_out_into_storage_error(monkeypatch):
    # The kernel completes the handshake for a listening socket; nobody ever answers.
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(4)
        _quick_env(monkeypatch, f"http://127.0.0.1:{sock.getsockname()[1]}")
        with pytest.raises(StorageError, match="cannot reach the S3 endpoint"):
            storage.exists("s3://some-bucket/k")


class _Refuse(BaseHTTPRequestHandler):
    def _deny(self) -> None:
        body = b"<Error><Code>InvalidAccessKeyId</Code><Message>The key does not exist.</Message></Error>"
        self.send_response(403)
        self.send_header("Content-Type", "application/xml")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_PUT = do_HEAD = do_POST = _deny

    def log_message(self, *args) -> None:
        pass


def test_refused_credentials_name_the_variables(monkeypatch):
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Refuse)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        _quick_env(monkeypatch, f"http://127.0.0.1:{server.server_address[1]}")
        refused = r"refused reading .*\(InvalidAccessKeyId\); check AWS_ACCESS_KEY_ID"
        with pytest.raises(StorageError, match=refused):
            storage.read_bytes("s3://some-bucket/k")
    finally:
        server.shutdown()
        server.server_close()


def test_bad_tuning_variables_are_user_errors(monkeypatch):
    monkeypatch.setenv("FEDCORE_S3_ADDRESSING", "sideways")
    with pytest.raises(StorageError, match="FEDCORE_S3_ADDRESSING='sideways'"):
        storage.read_bytes("s3://some-bucket/k")
    monkeypatch.setenv("FEDCORE_S3_ADDRESSING", "path")
    monkeypatch.setenv("FEDCORE_S3_CONNECT_TIMEOUT", "soon")
    with pytest.raises(StorageError, match="FEDCORE_S3_CONNECT_TIMEOUT='soon' is not a number"):
        storage.read_bytes("s3://some-bucket/k")


def test_malformed_endpoint_is_a_one_line_user_error(monkeypatch):
    # botocore raises a plain ValueError ("Invalid endpoint") while building the client.
    _quick_env(monkeypatch, "seaweedfs:8333")
    with pytest.raises(StorageError, match="Invalid endpoint: seaweedfs:8333.*set AWS_ENDPOINT_URL") as err:
        storage.read_bytes("s3://some-bucket/k")
    assert "\n" not in str(err.value)


def test_no_temp_files_left_by_a_failed_download(s3_server: S3Server, s3_bucket: str, tmp_path: Path):
    with pytest.raises(StorageError):
        storage.download_file(f"s3://{s3_bucket}/absent", tmp_path / "x" / "o")
    leftovers = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert leftovers == [] and os.listdir(tmp_path) in ([], ["x"])
