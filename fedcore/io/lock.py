"""One writer per run dir: an advisory lock (`fcntl.flock`) on `<dir>/.fedcore.lock`.

A run, a resume, a pipeline stage and `fedcore tracking sync` hold it for as long as they
write the folder; a second process is refused at once with the holder's pid, instead of
silently overwriting the first one's checkpoints and outputs. The kernel drops the lock when
its holder dies, however it dies, so a killed run never leaves a stale lock behind. The lock
file holds the holder's pid and is removed on release (after a check that closes the
unlink/reopen race: a lock taken on a file that is no longer at the path is retried).

Locks are re-entrant within a process: `fedcore run` takes it before checking the folder and
`run_experiment` takes it again for library callers.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import logging
import os
from collections.abc import Iterator
from pathlib import Path

from fedcore.errors import StorageError, UserError

LOCK_NAME = ".fedcore.lock"
log = logging.getLogger(__name__)
_held: dict[str, list[int]] = {}  # real path of the folder -> [fd, depth]
_UNSUPPORTED = (errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL)


class RunDirBusy(UserError):
    """Another process is writing this run dir."""


def holder_pid(folder: str | os.PathLike[str]) -> int | None:
    """Pid written in the folder's lock file, or None."""
    try:
        return int(Path(folder, LOCK_NAME).read_text().strip() or "x")
    except (OSError, ValueError):
        return None


def _make_dir(folder: Path) -> bool:
    """Create `folder` (and parents); True when it did not exist before."""
    if folder.is_dir():
        return False
    try:
        folder.mkdir(parents=True)
    except FileExistsError:
        if not folder.is_dir():
            raise StorageError(f"'{folder}' is a file; pass a folder for the run") from None
        return False
    except OSError as err:
        raise StorageError(f"cannot create the folder '{folder}' ({err.strerror}); "
                           "choose a writable path") from None
    return True


def _try_lock(folder: Path) -> int | None:
    """An fd holding the lock on folder's lock file; None where the filesystem has no locks."""
    path = folder / LOCK_NAME
    while True:
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as err:
            raise StorageError(f"cannot create the lock file '{path}' ({err.strerror}); "
                               "choose a writable folder") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            pid = holder_pid(folder)
            raise RunDirBusy(f"'{folder}' is in use by another fedcore process (pid {pid or 'unknown'}); "
                             "wait for it to finish, or choose another folder") from None
        except OSError as err:
            os.close(fd)
            if err.errno in _UNSUPPORTED:
                log.warning("the filesystem of '%s' has no file locks; nothing stops a second writer", folder)
                return None
            raise
        try:
            same = os.stat(path).st_ino == os.fstat(fd).st_ino
        except FileNotFoundError:
            same = False
        if same:
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
            return fd
        os.close(fd)  # the holder removed the file as we opened it: lock the new one


@contextlib.contextmanager
def run_dir_lock(folder: str | os.PathLike[str]) -> Iterator[Path]:
    """Hold the run-dir lock of `folder` (created if missing) for the block.

    A folder this call created is removed again when the block leaves it empty, so bad input
    refused early leaves no empty run dir behind. Raises RunDirBusy when another process holds it.
    """
    folder = Path(folder)
    created = _make_dir(folder)
    key = os.path.realpath(folder)
    if key in _held:
        _held[key][1] += 1
        try:
            yield folder
        finally:
            _held[key][1] -= 1
        return
    try:
        fd = _try_lock(folder)
    except BaseException:
        _remove_if_empty(folder, created)
        raise
    _held[key] = [fd if fd is not None else -1, 1]
    try:
        yield folder
    finally:
        del _held[key]
        if fd is not None:
            with contextlib.suppress(OSError):
                os.unlink(folder / LOCK_NAME)  # while still holding it: see the module docstring
            os.close(fd)
        _remove_if_empty(folder, created)


def _remove_if_empty(folder: Path, created: bool) -> None:
    if created:
        with contextlib.suppress(OSError):
            folder.rmdir()  # fails, as it should, when anything was written there
