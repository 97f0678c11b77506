"""A pipeline stage on several processes (`ops.run_stage(..., nproc=2)`, what a pod with two GPUs
runs) writes the same run dir as on one."""

from __future__ import annotations

import json

import pytest
import torch

from fedcore.data.build import build
from fedcore.pipeline import ops
from fedcore.pipeline.inputs import RunInputs
from fedcore.pipeline.plan import stage_names
from fedcore.registries import load_config

CONFIG = "configs/fedrg_digits_sym_localized.yaml"  # pretrain -> train, personal absorption layer
# Sequential reference: ranks train their shares sequentially, so that is what they must equal.
TINY = ["train.device=cpu", "train.executor=sequential", "train.local_epochs=1",
        "train.client_fraction=0.5", "train.threads=1",
        "train.rounds=2", "train.stage_rounds.pretrain=1", "partition.num_clients=6"]


def test_cpu_stages_run_in_one_process():
    assert ops.stage_processes(load_config(CONFIG, TINY)) == 1


@pytest.mark.slow
def test_a_stage_on_two_processes_resumes_the_previous_stage_and_equals_one_process(tmp_path, monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    cfg = load_config(CONFIG, TINY)
    data = build(cfg).save(tmp_path / "data")
    inp, stages = RunInputs(cfg.to_dict()), list(stage_names(cfg))
    ops.run_stage(inp, "pretrain", stages, data, None, tmp_path / "pretrain", nproc=1)
    ops.run_stage(inp, "train", stages, data, tmp_path / "pretrain", tmp_path / "one", nproc=1)
    ops.run_stage(inp, "train", stages, data, tmp_path / "pretrain", tmp_path / "two", nproc=2)
    one, two = torch.load(tmp_path / "one" / "model.pt"), torch.load(tmp_path / "two" / "model.pt")
    assert one.keys() == two.keys() and all(torch.equal(one[k], two[k]) for k in one)
    m1 = json.loads((tmp_path / "one" / "metrics.json").read_text())
    m2 = json.loads((tmp_path / "two" / "metrics.json").read_text())
    assert (m1.pop("executor"), m2.pop("executor")) == ("sequential", "distributed")
    assert m1 == m2
    assert (tmp_path / "one" / "history.csv").read_text() == (tmp_path / "two" / "history.csv").read_text()
