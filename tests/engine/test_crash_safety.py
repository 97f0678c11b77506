"""Crash safety: a kill at any file operation of a checkpoint leaves a run that resumes bit-identically,
crafted checkpoints run no code, and the run-dir lock keeps a second writer out."""

from __future__ import annotations

import importlib.util
import io
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from fedcore.cli.run import check_run_dir
from fedcore.data.build import build
from fedcore.engine.checkpoint import MAGIC, encode, load_checkpoint
from fedcore.errors import ArtifactError, UserError
from fedcore.io import RunDirBusy, run_dir_lock
from fedcore.registries import load_config
from fedcore.run import run_experiment

ROOT = Path(__file__).resolve().parents[2]
CONFIG = str(ROOT / "configs" / "quickstart.yaml")
# Two rounds, a periodic checkpoint at round 2, then the stage end (stage-train.pt, latest.pt).
TINY = ["train.device=cpu", "train.rounds=2", "partition.num_clients=4", "data.max_train=200",
        "train.local_epochs=1", "train.checkpoint_every=2", "train.client_fraction=0.5", "tracking.backend=none"]


def _crashhook():
    spec = importlib.util.spec_from_file_location("crashhook", ROOT / "scripts" / "crashhook.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def artifact(tmp_path_factory):
    return build(load_config(CONFIG, TINY)).save(tmp_path_factory.mktemp("data") / "art")


def outputs(run: Path) -> tuple[bytes, bytes, dict]:
    summary = json.loads((run / "metrics.json").read_text())["summary"]
    return (run / "model.pt").read_bytes(), (run / "history.csv").read_bytes(), summary


def forked(fn) -> int:
    """Run `fn` in a forked child (which inherits the imported modules); its exit status."""
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        try:
            fn()
        finally:
            os._exit(0)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)


def test_a_kill_at_any_checkpoint_file_operation_resumes_bit_identically(tmp_path, artifact):
    cfg = load_config(CONFIG, TINY)
    reference = outputs(run_experiment(cfg, tmp_path / "ref", data=artifact).out_dir)
    hook = _crashhook()
    log = tmp_path / "ops.txt"

    def count() -> None:
        ops = hook.count_ops(lambda: run_experiment(cfg, tmp_path / "count", data=artifact), tmp_path / "count")
        log.write_text("\n".join(ops))

    assert forked(count) == 0
    ops = log.read_text().splitlines()
    points = [i for i, op in enumerate(ops, 1) if op.split(" ", 1)[1].startswith("checkpoints")]
    # create, write, fsync, chmod, rename, folder fsync: for latest.pt (round 2), stage-train.pt, latest.pt
    assert len(points) == 18 and sum(op.startswith("replace checkpoints/") for op in ops) == 3
    for n in points:
        out = tmp_path / f"kill-{n}"
        code = forked(lambda: (hook.arm(n, out), run_experiment(cfg, out, data=artifact)))  # noqa: B023
        assert code == hook.KILLED, f"op {n} ({ops[n - 1]}) did not kill the run"
        try:
            check_run_dir(out, None)  # what `fedcore run` says about the folder now
            resume = None  # no checkpoint landed yet: a fresh run is the way forward
        except UserError as err:
            assert f"--resume {out}" in str(err)
            resume = out
        assert outputs(run_experiment(cfg, out, data=artifact, resume=resume).out_dir) == reference, ops[n - 1]
        assert not list((out / "checkpoints").glob(".*.tmp")), "a killed writer's temp file was left behind"


def test_resume_takes_the_checkpoint_that_got_furthest(tmp_path, artifact, caplog):
    # A kill between writing stage-train.pt and latest.pt leaves latest.pt one step behind.
    cfg = load_config(CONFIG, [*TINY, "train.checkpoint_every=1"])
    run = run_experiment(cfg, tmp_path / "r", data=artifact).out_dir
    ck = run / "checkpoints"
    stage = (ck / "stage-train.pt").read_bytes()
    payload = load_checkpoint(run)
    assert payload["state"]["rnd"] == 2 and payload["loop"]["stage_index"] == 1
    older = load_checkpoint(ck / "latest.pt")
    older["state"]["rnd"], older["loop"]["stage_index"] = 1, 0
    buf = io.BytesIO()
    torch.save(older, buf)
    (ck / "latest.pt").write_bytes(encode({"format": 2, "rnd": 1, "stage_index": 0}, buf.getvalue()))
    assert load_checkpoint(run)["loop"]["stage_index"] == 1 and (ck / "stage-train.pt").read_bytes() == stage
    # A damaged latest.pt is skipped for the furthest verified one, never silently: a warning names it.
    (ck / "latest.pt").write_bytes(stage[:-10])
    with caplog.at_level("WARNING", logger="fedcore.engine.checkpoint"):
        assert load_checkpoint(run)["loop"]["stage_index"] == 1
    (warned,) = [r.getMessage() for r in caplog.records]
    assert re.search(r"latest.pt' is corrupt \(sha256 mismatch\); resuming from '.*stage-train.pt' \(round 2\)",
                     warned)


class _CreatesFile:
    def __init__(self, path: Path) -> None:
        self.path = path

    def __reduce__(self):
        return (open, (str(self.path), "w"))  # unpickling would create the file


@pytest.mark.parametrize("container", ["format2", "legacy"])
def test_a_crafted_checkpoint_is_refused_and_runs_no_code(tmp_path, artifact, capsys, container):
    from fedcore.cli import main

    marker = tmp_path / "pwned"
    buf = io.BytesIO()
    torch.save({"format": 2, "evil": _CreatesFile(marker)}, buf)
    ck = tmp_path / "victim" / "checkpoints" / "latest.pt"
    ck.parent.mkdir(parents=True)
    ck.write_bytes(encode({"format": 2, "rnd": 1, "stage_index": 0}, buf.getvalue()) if container == "format2"
                   else buf.getvalue())
    assert not marker.exists()
    with pytest.raises(SystemExit) as exc:
        main(["run", CONFIG, "--out", str(tmp_path / "out"), "--data", str(artifact), "--no-progress",
              "--resume", str(tmp_path / "victim"), *[x for o in TINY for x in ("--set", o)]])
    err = capsys.readouterr().err.strip()
    assert exc.value.code == 2 and len(err.splitlines()) == 1
    assert re.search(r"holds more than tensors and plain data \(it asks for '(io|builtins)\.open'\); fedcore "
                     "refuses to load it", err)
    assert not marker.exists()
    assert not (tmp_path / "out").exists()


def test_format_2_files_carry_their_own_checksum(tmp_path, artifact):
    cfg = load_config(CONFIG, TINY)
    run = run_experiment(cfg, tmp_path / "r", data=artifact).out_dir
    data = (run / "checkpoints" / "latest.pt").read_bytes()
    assert data.startswith(MAGIC) and not list((run / "checkpoints").glob("*.sha256"))
    flipped = bytearray(data)
    flipped[len(flipped) // 2] ^= 1
    (run / "checkpoints" / "stage-train.pt").write_bytes(bytes(flipped))
    with pytest.raises(ArtifactError, match="corrupt"):
        load_checkpoint(run / "checkpoints" / "stage-train.pt")


# -- the run-dir lock ---------------------------------------------------------------------------

HOLD = ("import sys; from fedcore.io import run_dir_lock\n"
        "with run_dir_lock(sys.argv[1]):\n    print('held', flush=True)\n    sys.stdin.read()\n")
ENV = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}


def _holder(folder: Path) -> subprocess.Popen[str]:
    proc = subprocess.Popen([sys.executable, "-c", HOLD, str(folder)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            text=True, env=ENV)
    assert proc.stdout.readline().strip() == "held"
    return proc


def test_a_second_writer_is_refused_with_the_holders_pid(tmp_path, artifact, capsys):
    from fedcore.cli import main

    out = tmp_path / "run"
    holder = _holder(out)
    try:
        other = subprocess.run([sys.executable, "-m", "fedcore", "run", CONFIG, "--out", str(out), "--data",
                                str(artifact), "--no-progress", *[x for o in TINY for x in ("--set", o)]],
                               capture_output=True, text=True, env=ENV)
        assert other.returncode == 2
        assert other.stderr.strip().splitlines()[-1] == (
            f"error: '{out}' is in use by another fedcore process (pid {holder.pid}); "
            "wait for it to finish, or choose another folder")
        with pytest.raises(RunDirBusy, match=f"pid {holder.pid}"):
            run_experiment(load_config(CONFIG, TINY), out, data=artifact)
        with pytest.raises(SystemExit) as exc:
            main(["tracking", "sync", str(out)])
        assert exc.value.code == 2 and f"pid {holder.pid}" in capsys.readouterr().err
    finally:
        holder.stdin.close()
        holder.wait(timeout=30)
    with run_dir_lock(out):  # released at exit; the lock file goes with it
        with run_dir_lock(out):  # re-entrant within a process
            pass
    assert not (out / ".fedcore.lock").exists()


def test_a_killed_holder_leaves_no_stale_lock(tmp_path):
    holder = _holder(tmp_path / "run")
    holder.kill()
    holder.wait(timeout=30)
    with run_dir_lock(tmp_path / "run"):
        assert (tmp_path / "run" / ".fedcore.lock").read_text().strip() == str(os.getpid())


def test_refused_input_leaves_no_empty_run_dir(tmp_path, capsys):
    from fedcore.cli import main

    with pytest.raises(SystemExit) as exc:
        main(["run", CONFIG, "--out", str(tmp_path / "run"), "--data", str(tmp_path / "nothing"), "--no-progress",
              *[x for o in TINY for x in ("--set", o)]])
    assert exc.value.code == 2 and not (tmp_path / "run").exists()
    capsys.readouterr()
    with pytest.raises(SystemExit) as exc:
        main(["run", CONFIG, "--out", "/dev/null/x", "--no-progress", *[x for o in TINY for x in ("--set", o)]])
    err = capsys.readouterr().err.strip()
    assert exc.value.code == 2 and err.startswith("error: cannot create the folder '/dev/null/x'")
