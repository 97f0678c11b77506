"""A fork server for kfp.local's tasks: each task starts from a process that has already imported
kfp, torch, mlflow and fedcore, instead of paying those imports again (about 4 s of CPU a task,
and most of a short task's time: `make run` has 16 tasks).

kfp.local's SubprocessRunner starts every task as `sh -c '... python3 -m kfp.dsl.executor_main
...'`, with `python3` replaced by `sys.executable`. `serving()` starts the server, points
`sys.executable` at a small client script while the pipeline runs, and stops the server after.
The client sends its argv, environment and working directory, and passes its stdin, stdout and
stderr, to the server, which forks: the child becomes the task (the same interpreter and modules,
but its own process, environment, directory and output) and returns its exit status to the
client. A client that finds no server execs the real interpreter, so a task never depends on it.

The server imports modules only; it runs no torch op and starts no thread, since a forked child
inherits neither a thread nor an initialized OpenMP pool safely. `FEDCORE_FORKSERVER=0` turns it off.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Iterator
from pathlib import Path

# What a task's process imports anyway; the rest of fedcore comes with these.
PRELOAD = ("kfp.dsl.executor_main", "torch", "mlflow", "matplotlib.pyplot", "sklearn.mixture",
           "fedcore.pipeline.ops", "fedcore.pipeline.evaluation", "fedcore.pipeline.runs", "fedcore.run",
           "components")
_HEADER = 8  # bytes of the request's length, sent with the three file descriptors

CLIENT = '''#!{python} -S
# fedcore's kfp.local fork-server client (pipelines/forkserver.py); written per run.
import json, os, socket, sys
REAL = {python!r}
try:
    s = socket.socket(socket.AF_UNIX)
    s.connect({address!r})
except OSError:
    os.execv(REAL, [REAL, *sys.argv[1:]])
body = json.dumps({{"argv": sys.argv[1:], "env": dict(os.environ), "cwd": os.getcwd()}}).encode()
socket.send_fds(s, [len(body).to_bytes({header}, "big")], [0, 1, 2])
s.sendall(body)
reply = b""
while chunk := s.recv(64):
    reply += chunk
sys.exit(int(reply) if reply.strip().lstrip(b"-").isdigit() else 1)
'''


def enabled() -> bool:
    return os.environ.get("FEDCORE_FORKSERVER", "1") not in ("0", "false", "no") and hasattr(socket, "send_fds")


@contextlib.contextmanager
def serving(preload: tuple[str, ...] = PRELOAD, wait_s: float = 0.0) -> Iterator[Path | None]:
    """Start a server, make sys.executable its client for the block, stop it after; yields the
    client's path (None when turned off). Tasks that start before the server listens (its imports
    take a few seconds) run plainly; wait_s: how long to wait for it first (tests)."""
    if not enabled():
        yield None
        return
    folder = Path(tempfile.mkdtemp(prefix="fedcore-fs-"))  # short: a socket path holds 107 bytes
    address, client = folder / "sock", folder / "python"
    real = sys.executable
    client.write_text(CLIENT.format(python=real, address=str(address), header=_HEADER))
    client.chmod(0o755)
    server = subprocess.Popen([real, "-m", "pipelines.forkserver", str(address), *preload],
                              stdin=subprocess.DEVNULL, start_new_session=True)
    deadline = time.monotonic() + wait_s
    while not address.exists() and server.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    sys.executable = str(client)
    try:
        yield client
    finally:
        sys.executable = real
        server.terminate()
        try:
            server.wait(10)
        except subprocess.TimeoutExpired:
            server.kill()
        shutil.rmtree(folder, ignore_errors=True)


def serve(address: str, preload: list[str]) -> None:
    """The server's loop: import `preload`, then fork one child per connection, forever."""
    import importlib

    import matplotlib

    matplotlib.use("Agg")
    for name in preload:
        importlib.import_module(name)
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # children are reaped by the kernel
    srv = socket.socket(socket.AF_UNIX)
    srv.bind(address + ".tmp")
    srv.listen(64)
    os.replace(address + ".tmp", address)  # clients see the address only once it accepts
    while True:
        conn, _ = srv.accept()
        if os.fork() == 0:
            srv.close()
            _child(conn)
        conn.close()


def _child(conn: socket.socket) -> None:
    """Become the client's task; never returns."""
    code = 1
    try:
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)  # a task waits for its own subprocesses
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        head, fds, _, _ = socket.recv_fds(conn, _HEADER, 3)
        size, body = int.from_bytes(head, "big"), b""
        while len(body) < size:
            body += conn.recv(size - len(body))
        req = json.loads(body)
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
            os.close(fd)
        sys.stdout = open(1, "w", buffering=1, closefd=False)  # noqa: SIM115 (the task's own stdio)
        sys.stderr = open(2, "w", buffering=1, closefd=False)  # noqa: SIM115
        # The preloaded modules came from the server's sys.path: a task that would find its modules
        # elsewhere (another directory or PYTHONPATH) runs in a fresh interpreter instead.
        same_path = req["cwd"] == os.getcwd() and req["env"].get("PYTHONPATH") == os.environ.get("PYTHONPATH")
        os.chdir(req["cwd"])
        os.environ.clear()
        os.environ.update(req["env"])
        code = _run(req["argv"], fresh=not same_path)
    except SystemExit as done:
        code = done.code if isinstance(done.code, int) else (0 if done.code is None else 1)
    except BaseException:  # the task's traceback goes to its own log, as a plain process's would
        traceback.print_exc()
        code = 1
    finally:
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
        with contextlib.suppress(OSError):
            conn.sendall(str(code).encode())
        os._exit(code)


def _run(argv: list[str], fresh: bool = False) -> int:
    """`-m module args...` in this process, as `python -m` would; any other form, or `fresh`, in a
    fresh interpreter."""
    import runpy

    if fresh or len(argv) < 2 or argv[0] != "-m":
        return subprocess.call([os.path.realpath(sys.executable), *argv])
    sys.argv = [argv[1], *argv[2:]]
    runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
    return 0


if __name__ == "__main__":
    serve(sys.argv[1], sys.argv[2:])
