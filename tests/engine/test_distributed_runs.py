"""Real multi-process runs (gloo on the CPU, launched by torchrun): equal to one process.

Each test launches `fedcore run --nproc 2` (or torchrun directly) as a subprocess and compares
its run dir with a one-process run of the same config on the same FederatedDataset artifact:
final params bit for bit, history and metrics.json exactly.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from fedcore.data.build import build
from fedcore.engine.distributed import torchrun_argv
from fedcore.registries import load_config
from fedcore.run import run_experiment

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
TINY = ["train.device=cpu", "train.local_epochs=1", "train.client_fraction=0.5", "train.threads=1"]
CASES = {
    # one stage; 6 clients, 3 per round over 2 ranks (uneven shares)
    "fedavg": ("configs/quickstart.yaml", [*TINY, "train.rounds=3", "partition.num_clients=6"]),
    # identify (every client uploads descriptors) -> train, relabeling every round into client state
    "fedsir": ("configs/fedsir_digits.yaml", [*TINY, "train.rounds=2", "method.params.identify_epochs=1",
                                              "method.params.relabel_every=1", "method.params.gmm_n_init=2"]),
    # pretrain -> train; the absorption layer is personal (kept per client, never aggregated)
    "fedrg": ("configs/fedrg_digits_sym_localized.yaml", [*TINY, "train.rounds=2", "train.stage_rounds.pretrain=1",
                                                          "partition.num_clients=6"]),
}


def _env() -> dict[str, str]:
    path = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    return {**os.environ, "PYTHONPATH": os.pathsep.join([*path, str(ROOT)]), "OMP_NUM_THREADS": "1"}


def _fedcore(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "fedcore", *args], cwd=ROOT, env=_env(),
                          capture_output=True, text=True, timeout=600)


def _sets(overrides: list[str]) -> list[str]:
    return [a for o in overrides for a in ("--set", o)]


def _same_run(a: Path, b: Path) -> None:
    pa, pb = torch.load(a / "model.pt"), torch.load(b / "model.pt")
    assert pa.keys() == pb.keys()
    assert all(torch.equal(pa[k], pb[k]) for k in pa), "final params differ"
    assert (a / "history.csv").read_text() == (b / "history.csv").read_text()
    assert json.loads((a / "metrics.json").read_text()) == json.loads((b / "metrics.json").read_text())


@pytest.fixture(scope="module")
def artifacts(tmp_path_factory):
    root = tmp_path_factory.mktemp("dist-data")
    return {m: build(load_config(c, o)).save(root / m) for m, (c, o) in CASES.items()}


@pytest.mark.parametrize("method", list(CASES))
def test_two_processes_equal_one(tmp_path, artifacts, method):
    config, overrides = CASES[method]
    one = run_experiment(load_config(config, overrides), tmp_path / "one", data=artifacts[method])
    two = _fedcore("run", config, "--out", str(tmp_path / "two"), "--data", str(artifacts[method]), "--nproc", "2",
                   "--no-progress", *_sets(overrides))
    assert two.returncode == 0, two.stderr[-3000:]
    _same_run(tmp_path / "one", tmp_path / "two")
    assert one.state.rnd == json.loads((tmp_path / "two" / "metrics.json").read_text())["rounds"]
    # rank 0 alone wrote the run dir: one set of outputs, no stray per-rank files
    assert sorted(p.name for p in (tmp_path / "two").iterdir()) == sorted(p.name for p in (tmp_path / "one").iterdir())


def test_a_killed_rank_fails_the_run_and_its_checkpoint_resumes_at_another_world_size(tmp_path, artifacts):
    config, overrides = CASES["fedavg"]
    overrides = [*overrides, "train.checkpoint_every=1"]
    cut = tmp_path / "cut"
    argv = torchrun_argv(2, "tests.engine.dist_kill", [config, str(cut), str(artifacts["fedavg"]), "1", "2",
                                                        *overrides])
    died = subprocess.run(argv, cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=600)
    assert died.returncode != 0
    assert "Signals.SIGKILL" in died.stderr or "SIGKILL" in died.stderr, died.stderr[-3000:]
    assert not (cut / "metrics.json").exists()
    assert (cut / "checkpoints" / "latest.pt").is_file()
    # resumed in one process from rank 0's checkpoint: the same run as one never cut
    cfg = load_config(config, overrides)
    run_experiment(cfg, tmp_path / "full", data=artifacts["fedavg"])
    run_experiment(cfg, cut, data=artifacts["fedavg"], resume=cut)
    _same_run(cut, tmp_path / "full")


def test_a_one_process_checkpoint_resumes_on_two_processes(tmp_path, artifacts):
    config, overrides = CASES["fedavg"]
    run_experiment(load_config(config, [*overrides, "train.rounds=2"]), tmp_path / "grown", data=artifacts["fedavg"])
    more = _fedcore("run", config, "--resume", str(tmp_path / "grown"), "--data", str(artifacts["fedavg"]),
                    "--nproc", "2", "--no-progress", *_sets(overrides))
    assert more.returncode == 0, more.stderr[-3000:]
    run_experiment(load_config(config, overrides), tmp_path / "full", data=artifacts["fedavg"])
    _same_run(tmp_path / "grown", tmp_path / "full")
