"""Kill the current process at the N-th file operation: fault injection for crash-safety checks.

`arm(n, under)` wraps the calls the project's atomic writer makes (`tempfile.mkstemp`, writes
to the temp file, `os.fsync`, `os.chmod`, `os.replace`) so that the n-th of them whose path lies
under `under` ends the process with `os._exit(KILLED)` instead of running: no `finally`, no
`except`, no flush, as after a SIGKILL. A write is torn (half of its bytes reach the file)
before the exit. `count_ops` runs a function with counting only, to learn how many there are.

Used by tests/engine/test_crash_safety.py and scripts/crash_resume.py; the library itself has
no hook. Run a command under it with:

    python scripts/crashhook.py N UNDER -- fedcore-args...
"""

from __future__ import annotations

import os
import sys
import tempfile
from collections.abc import Callable
from typing import Any

KILLED = 137  # what a shell reports for SIGKILL
_ops: list[str] = []


def _watched(path: Any, under: str) -> bool:
    try:
        return os.path.abspath(os.fspath(path)).startswith(under)
    except TypeError:
        return False


def arm(n: int | None, under: str | os.PathLike[str]) -> list[str]:
    """Patch the file calls; die at the n-th watched one (n None: only count). Returns the op log."""
    under = os.path.abspath(os.fspath(under))
    fd_paths: dict[int, str] = {}
    real = {"mkstemp": tempfile.mkstemp, "fdopen": os.fdopen, "fsync": os.fsync, "chmod": os.chmod,
            "replace": os.replace}

    def step(kind: str, path: Any) -> None:
        if path is None or not _watched(path, under):
            return
        _ops.append(f"{kind} {os.path.relpath(os.fspath(path), under)}")
        if n is not None and len(_ops) == n:
            sys.stdout.flush()
            os._exit(KILLED)

    def mkstemp(*args: Any, **kwargs: Any) -> tuple[int, str]:
        directory = kwargs.get("dir")
        step("create", os.path.join(os.fspath(directory), "tmp") if directory is not None else None)
        fd, path = real["mkstemp"](*args, **kwargs)
        fd_paths[fd] = path
        return fd, path

    class TornFile:
        def __init__(self, f: Any, path: str) -> None:
            self._f, self._path = f, path

        def write(self, data: Any) -> int:
            if _watched(self._path, under) and n is not None and len(_ops) + 1 == n:
                self._f.write(data[: len(data) // 2])
                self._f.flush()
            step("write", self._path)
            return self._f.write(data)

        def __getattr__(self, name: str) -> Any:
            return getattr(self._f, name)

        def __enter__(self) -> TornFile:
            self._f.__enter__()
            return self

        def __exit__(self, *exc: Any) -> Any:
            return self._f.__exit__(*exc)

    def fdopen(fd: int, *args: Any, **kwargs: Any) -> Any:
        f = real["fdopen"](fd, *args, **kwargs)
        return TornFile(f, fd_paths[fd]) if fd in fd_paths else f

    def fsync(fd: int) -> None:
        try:  # fd numbers are reused, so ask the kernel what this one is now
            path: str | None = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            path = fd_paths.get(fd)
        step("fsync", path)
        real["fsync"](fd)

    def chmod(path: Any, *args: Any, **kwargs: Any) -> None:
        step("chmod", path)
        real["chmod"](path, *args, **kwargs)

    def replace(src: Any, dst: Any, *args: Any, **kwargs: Any) -> None:
        step("replace", dst)
        real["replace"](src, dst, *args, **kwargs)

    tempfile.mkstemp, os.fdopen, os.fsync, os.chmod, os.replace = mkstemp, fdopen, fsync, chmod, replace
    return _ops


def count_ops(fn: Callable[[], Any], under: str | os.PathLike[str]) -> list[str]:
    """The watched file operations `fn` performs, in order (the patches stay for this process)."""
    ops = arm(None, under)
    fn()
    return list(ops)


if __name__ == "__main__":
    # python scripts/crashhook.py N UNDER -- ARGS: run `fedcore ARGS`, dying at watched op N (0: count only).
    n_arg, under_arg, sep, *fedcore_args = sys.argv[1:]
    assert sep == "--", "usage: crashhook.py N UNDER -- fedcore-args..."
    log = arm(int(n_arg) or None, under_arg)
    from fedcore.cli import main

    try:
        main(fedcore_args)
    finally:
        if os.environ.get("CRASHHOOK_LOG"):
            with open(os.environ["CRASHHOOK_LOG"], "w") as f:
                f.write("\n".join(log))
