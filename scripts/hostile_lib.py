"""What scripts/hostile_checks.py's checks share: the tiny config, the `fedcore` CLI call (a
subprocess, or a forked child under --fork) and the run digest."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import tempfile
import traceback
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CONFIG = str(ROOT / "configs" / "quickstart.yaml")
TINY = ["train.device=cpu", "train.rounds=4", "partition.num_clients=4", "data.max_train=400",
        "train.local_epochs=1", "train.checkpoint_every=1", "tracking.backend=none"]


def sets(overrides: list[str]) -> list[str]:
    return [x for o in overrides for x in ("--set", o)]


FORK = False  # --fork: CLI calls run in forked children (module docstring)


def fedcore(args: list[str], timeout: float = 600, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    if FORK:
        return forked(args, timeout)
    return subprocess.run([sys.executable, "-m", "fedcore", *args], capture_output=True, text=True,
                          timeout=timeout, cwd=cwd)


def forked(args: list[str], timeout: float, before: Callable[[], object] | None = None,
           after: Callable[[], object] | None = None) -> subprocess.CompletedProcess[str]:
    """`fedcore ARGS` in a forked child: `before` runs first (e.g. arming the crash hook), `after` at exit."""
    import signal

    from fedcore.cli import main

    sys.stdout.flush()
    sys.stderr.flush()
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        pid = os.fork()
        if pid == 0:  # the child: never returns
            code = 1
            try:
                os.dup2(out.fileno(), 1)
                os.dup2(err.fileno(), 2)
                signal.alarm(int(timeout))  # SIGALRM ends a hung case
                if before is not None:
                    before()
                main(args)
                code = 0
            except SystemExit as exc:
                code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
            except BaseException:
                traceback.print_exc()
            finally:
                if after is not None:
                    after()
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(code)
        _, status = os.waitpid(pid, 0)
        out.seek(0)
        err.seek(0)
        return subprocess.CompletedProcess(args, os.waitstatus_to_exitcode(status),
                                           out.read().decode(errors="replace"), err.read().decode(errors="replace"))


def last_line(text: str) -> str:
    lines = [ln for ln in text.strip().splitlines() if ln.strip()]
    return lines[-1][:160] if lines else ""


def digest(run: Path) -> str:
    """sha256 over the outputs that must match an uninterrupted run bit for bit."""
    h = hashlib.sha256()
    for name in ("model.pt", "history.csv"):
        h.update((run / name).read_bytes())
    summary = json.loads((run / "metrics.json").read_text())["summary"]
    h.update(json.dumps(summary, sort_keys=True).encode())
    return h.hexdigest()


def prepare(work: Path) -> Path:
    art = work / "data"
    if not (art / "manifest.json").is_file():
        res = fedcore(["data", "prepare", CONFIG, "--out", str(art), *sets(TINY)])
        assert res.returncode == 0, res.stderr
    return art
