"""Local file primitives shared by `fedcore.io.storage`, checkpoints, run outputs and dataset artifacts.

One place decides how a finished file lands: written to a temp file beside it, fsynced,
given the permissions a plain open() would give (temp files are created 0600, which would
hide run outputs from the other users or pods that share a volume), then renamed onto the
destination, so a reader never sees half a file.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

MB = 1024 * 1024


def sha256_file(path: str | os.PathLike[str]) -> str:
    """Hex sha256 of a local file, read in 1 MiB chunks."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(MB):
            h.update(chunk)
    return h.hexdigest()


def _read_umask() -> int:
    # Setting the umask to read it is process-wide, so do it once, at import, before any
    # worker thread could create a file during the window.
    umask = os.umask(0o022)
    os.umask(umask)
    return umask


_UMASK = _read_umask()


def fsync_dir(path: str | os.PathLike[str]) -> None:
    """Flush a folder's entries (a rename into it) to disk; a no-op where folders cannot be opened."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass  # some filesystems refuse fsync on a folder; the rename itself is still atomic
    finally:
        os.close(fd)


def publish(tmp: str | os.PathLike[str], dest: str | os.PathLike[str]) -> None:
    """Rename a finished temp file onto `dest` with the permissions a plain open() would give.

    The folder is fsynced after the rename so that, after a power cut, `dest` holds either the
    old or the new file, never an empty one (the data was fsynced before the rename).
    """
    os.chmod(tmp, 0o666 & ~_UMASK)
    os.replace(tmp, dest)
    fsync_dir(Path(dest).parent)


def publish_dir(tmp: str | os.PathLike[str]) -> None:
    """Give a mkdtemp() folder (0700) the permissions a plain mkdir() would give."""
    os.chmod(tmp, 0o777 & ~_UMASK)


@contextlib.contextmanager
def atomic_open(path: str | os.PathLike[str], mode: str = "wb", encoding: str | None = None) -> Iterator[IO[Any]]:
    """Yield a temp file beside `path` (parents created); on success fsync and publish it onto
    `path`. On an exception the temp file is removed and `path` is left as it was."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, mode, encoding=encoding) as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        publish(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes) -> None:
    """Write `data` to `path` atomically (see `atomic_open`)."""
    with atomic_open(path, "wb") as f:
        f.write(data)
