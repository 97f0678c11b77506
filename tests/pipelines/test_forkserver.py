"""pipelines.forkserver: a task forked from the server behaves as the plain process it replaces
(argv, environment, directory, stdout and stderr, exit status), and a task never needs the server."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from pipelines import forkserver

ROOT = Path(__file__).resolve().parents[2]
PROBE = ["-m", "tests.pipelines.fs_probe", "a", "b c"]


def _task(client: str, cwd: Path = ROOT, **env: str) -> subprocess.CompletedProcess:
    # kfp.local starts a task as `sh -c "... <sys.executable> -m kfp.dsl.executor_main ..."`.
    return subprocess.run([client, *PROBE], cwd=cwd, env={**os.environ, **env}, capture_output=True, text=True,
                          timeout=60)


def _fields(out: str) -> dict[str, str]:
    return dict(part.split("=", 1) for part in out.split("args=")[0].split())


def test_a_task_is_forked_from_the_server_with_its_own_env_output_and_exit_status(monkeypatch):
    monkeypatch.chdir(ROOT)
    real = sys.executable
    with forkserver.serving(wait_s=120) as client:
        assert client is not None and sys.executable == str(client)
        done = _task(str(client), PROBE="x1", PROBE_EXIT="3")
        server_pid = _fields(done.stdout)["ppid"]
        again = _task(str(client), PROBE="x2")
    assert sys.executable == real
    assert done.returncode == 3 and again.returncode == 0
    assert "probe=x1" in done.stdout and "args=['a', 'b c']" in done.stdout and done.stderr.strip() == "to stderr"
    # Both ran as children of one long-lived process (the server); a plain task's parent is this test.
    assert server_pid != str(os.getpid())
    assert _fields(again.stdout)["ppid"] == server_pid and "probe=x2" in again.stdout
    assert _fields(done.stdout)["cwd"] == str(ROOT)


def test_a_task_from_another_directory_runs_plainly_and_one_without_a_server_too(tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)
    with forkserver.serving(wait_s=120) as client:
        elsewhere = _task(str(client), cwd=tmp_path, PYTHONPATH=str(ROOT), PROBE="moved")
        kept = client.read_text()
    assert elsewhere.returncode == 0 and _fields(elsewhere.stdout)["cwd"] == str(tmp_path)
    assert "probe=moved" in elsewhere.stdout
    orphan = tmp_path / "python"  # the same client once its server has gone: it execs the interpreter
    orphan.write_text(kept)
    orphan.chmod(0o755)
    plain = _task(str(orphan), PROBE="alone", PROBE_EXIT="4")
    assert plain.returncode == 4 and "probe=alone" in plain.stdout


def test_turned_off_it_leaves_the_interpreter_alone(monkeypatch):
    monkeypatch.setenv("FEDCORE_FORKSERVER", "0")
    before = sys.executable
    with forkserver.serving() as client:
        assert client is None and sys.executable == before
