"""FedSIR end to end on noisy digits, its switches, and the pieces it shares with FedNoRo."""

import inspect
import json
from pathlib import Path

import pytest
import torch

from fedcore.data.build import build_federated_dataset
from fedcore.errors import ConfigError
from fedcore.methods import fednoro, fedsir
from fedcore.methods.registry import validate_method_config
from fedcore.registries import load_config
from fedcore.run import run_experiment
from fedcore.train import losses
from tests.methods.test_fednoro import digits_cfg

PRESET = Path(__file__).resolve().parents[2] / "configs" / "fedsir_digits.yaml"
FAST = {"identify_epochs": 5, "relabel_every": 2, "min_class_n": 5}


@pytest.fixture(scope="module")
def fed():
    return build_federated_dataset(digits_cfg("fedsir"))


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """The digits 0.9 preset itself, cut to 3 train rounds with a relabel event every 2."""
    cfg = load_config(PRESET, ["train.rounds=3", "method.params.relabel_every=2"])
    return run_experiment(cfg, tmp_path_factory.mktemp("fedsir"))


def test_identify_then_train_with_relabel_events(run):
    h = run.history
    assert [r["stage"] for r in h] == ["identify", "relabel", "train", "train"]
    assert [r["round"] for r in h if "detect/client_f1" in r] == [1.0]
    # Relabel in the relabel stage's round and every relabel_every rounds after: rounds 2 and 4.
    assert [r["round"] for r in h if "relabel/precision" in r] == [2.0, 4.0]
    for key in ("relabel/recall", "relabel/damage", "relabel/changed", "relabel/agree_rate"):
        assert all(key in r for r in h if "relabel/precision" in r)


def test_identification_on_the_preset_scene(run):
    # 90% symmetric noise makes a noisy client's labels independent of its images.
    scene = json.loads((run.out_dir / "scene.json").read_text())
    assert run.history[0]["detect/client_f1"] == 1.0
    assert run.state.extra["noisy"] == [c["client"] for c in scene["clients"] if c["noisy"]]


def test_descriptors_kept_for_the_scatter_plot(run):
    rows = run.state.extra["descriptors"]
    assert [r["client"] for r in rows] == list(range(10))
    assert all(set(r) == {"client", "mu", "e", "clean_posterior"} for r in rows)
    noisy = set(run.state.extra["noisy"])
    assert max(r["mu"] for r in rows if r["client"] not in noisy) < min(r["mu"] for r in rows if r["client"] in noisy)


def test_relabel_switch_off_sends_no_labels(fed, tmp_path):
    res = run_experiment(digits_cfg("fedsir", rounds=2, **FAST, relabel=False), tmp_path, data=fed)
    assert not any("relabel/precision" in r for r in res.history)
    assert [r["stage"] for r in res.history] == ["identify", "train", "train"]  # no relabel stage


def test_stages_run_one_process_each_as_in_the_pipeline_match_one_run(fed, tmp_path):
    """identify -> relabel -> train as three processes resuming each other's checkpoints
    (what the pipeline's tasks do) give the history and weights of one in-process run."""
    cfg = digits_cfg("fedsir", rounds=4, **FAST)
    stages = [s.name for s in fedsir.FedSIR(cfg, fedsir.FedSIRParams(**FAST)).stages]
    assert stages == ["identify", "relabel", "train"]
    whole = run_experiment(cfg, tmp_path / "whole", data=fed)
    prev = None
    for stage in stages:
        part = run_experiment(cfg, tmp_path / stage, data=fed, resume=prev, stages=[stage])
        prev = tmp_path / stage
    assert part.history == whole.history
    assert [r["round"] for r in part.history if "relabel/precision" in r] == [2.0, 4.0]
    a, b = (torch.load(d / "model.pt") for d in (tmp_path / "train", tmp_path / "whole"))
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_relabel_event_rounds_by_hand():
    assert [r for r in range(45) if fedsir.relabel_event(r, 20)] == [0, 20, 40]  # the paper
    assert [r for r in range(45) if fedsir.relabel_event(r, 20, 20)] == [20, 40]  # the public code
    assert [r for r in range(10) if fedsir.relabel_event(r, 3, 2)] == [2, 5, 8]


def test_public_code_choices_run_with_a_late_first_relabel(fed, tmp_path):
    code = {"relabel_from": 2, "prior_labels": "original", "consensus_weight": "n_gap_s1", "consensus_min_n": 10,
            "client_residual_dim": 12, "kd_soften_student": False, "daagg_distance": "per_tensor"}
    res = run_experiment(digits_cfg("fedsir", rounds=3, **FAST, **code), tmp_path, data=fed)
    assert [r["stage"] for r in res.history] == ["identify", "train", "train", "train"]  # no relabel stage
    assert [r["round"] for r in res.history if "relabel/precision" in r] == [4.0]  # train round 2 only


@pytest.mark.parametrize("gate", ["principal_only", "residual_only"])
def test_gate_ablations_run(fed, tmp_path, gate):
    res = run_experiment(digits_cfg("fedsir", rounds=1, **FAST, gate=gate), tmp_path, data=fed)
    assert "relabel/changed" in res.history[-1]


def test_unknown_gate_is_a_config_error():
    with pytest.raises(ConfigError, match="gate"):
        validate_method_config(digits_cfg("fedsir", gate="vote"))


def test_fednoro_and_fedsir_share_one_la_kd_daagg(fed, tmp_path, monkeypatch):
    assert fedsir.FedSIR.aggregate is fednoro.FedNoRo.aggregate is fednoro.NoiseAwareMethod.aggregate
    assert fedsir.FedSIR.before_local is fednoro.FedNoRo.before_local
    # Neither method file writes its own loss or aggregation maths.
    for mod in (fedsir, fednoro):
        src = inspect.getsource(mod)
        for token in ("log_softmax", "kl_div", "cross_entropy(logits", "exp(-"):
            assert token not in src, (mod.__name__, token)
    calls = {"la_kd": 0, "daagg": 0}
    real_kd, real_w = losses.la_kd, fednoro.daagg_weights

    def spy_kd(*a, **k):
        calls["la_kd"] += 1
        return real_kd(*a, **k)

    def spy_w(*a, **k):
        calls["daagg"] += 1
        return real_w(*a, **k)

    monkeypatch.setattr(losses, "la_kd", spy_kd)
    monkeypatch.setattr(fednoro, "daagg_weights", spy_w)
    for method, params in (("fedsir", FAST), ("fednoro", {"warmup_rounds": 1})):
        calls.update(la_kd=0, daagg=0)
        run_experiment(digits_cfg(method, rounds=2, **params), tmp_path / method, data=fed)
        assert calls["la_kd"] > 0 and calls["daagg"] > 0, method
