"""FedCorr: LID, the adaptive proximal term, the two relabel rules, mixup, and short runs."""

import json

import numpy as np
import pytest
import torch

from fedcore.config import ExperimentConfig
from fedcore.data.build import build_federated_dataset
from fedcore.methods.fedcorr import adaptive_proximal, confident_relabel, judges, loss_level, loss_relabel, stage_split
from fedcore.methods.registry import build_method
from fedcore.run import run_experiment
from fedcore.stats.lid import lid_mle
from fedcore.train import losses


def digits_cfg(rounds: int = 4, **params) -> ExperimentConfig:
    """6 digits clients, 3 of them with 80% symmetric noise, a small MLP. The pass mechanics are
    tested with the pre-processing on top of train.rounds (budget: extra), unless told."""
    params.setdefault("budget", "extra")
    return ExperimentConfig.model_validate({
        "partition": {"kind": "dirichlet", "num_clients": 6, "alpha": 1.0},
        "noise": {"type": "symmetric", "num_noisy_clients": 3, "rate": {"kind": "fixed", "value": 0.8}},
        "model": {"name": "mlp", "width": 32},
        "train": {"rounds": rounds, "local_epochs": 1, "lr": 0.05, "device": "cpu", "checkpoint_every": 3},
        "method": {"name": "fedcorr", "params": params},
    })


def test_lid_recovers_the_dimension_of_a_flat_patch():
    rng = np.random.default_rng(0)
    basis = np.linalg.qr(rng.normal(size=(8, 8)))[0]
    two = rng.uniform(size=(1500, 2)) @ basis[:2]  # a 2-D square inside R^8
    five = rng.uniform(size=(1500, 5)) @ basis[:5]
    lid2, lid5 = np.median(lid_mle(two, k=20)), np.median(lid_mle(five, k=20))
    assert lid2 == pytest.approx(2.0, abs=0.4)
    assert lid5 == pytest.approx(5.0, abs=1.2) and lid5 > lid2 + 2


def test_lid_in_row_blocks_equals_one_block():
    x = np.random.default_rng(1).normal(size=(57, 4))
    np.testing.assert_allclose(lid_mle(x, k=10, block_entries=57 * 5), lid_mle(x, k=10), rtol=1e-12)


def test_lid_edge_cases_stay_finite():
    assert lid_mle(np.zeros((2, 3))).tolist() == [0.0, 0.0]  # no neighbourhood
    dup = np.array([[0.0, 0.0], [0.0, 0.0], [1.0, 0.0], [0.0, 2.0]])
    out = lid_mle(dup, k=20)  # k is capped at n - 1 = 3
    assert out.shape == (4,) and np.all(np.isfinite(out)) and np.all(out >= 0)


def test_adaptive_proximal_is_weighted_unsquared_norm_with_finite_gradient_at_start():
    w = [torch.tensor([3.0, 0.0], requires_grad=True), torch.tensor([[4.0]], requires_grad=True)]
    anchors = [torch.zeros(2), torch.zeros(1, 1)]
    assert float(adaptive_proximal(w, anchors, 0.5).detach()) == pytest.approx(0.5 * 5.0)
    start = [torch.zeros(2, requires_grad=True)]
    adaptive_proximal(start, [torch.zeros(2)], 2.0).backward()  # w == w_g at a client's first step
    assert torch.equal(start[0].grad, torch.zeros(2))


def test_loss_level_is_the_high_loss_share():
    loss = np.r_[np.full(70, 0.1), np.full(30, 3.0)] + np.random.default_rng(0).normal(0, 0.02, 100)
    level, flags = loss_level(loss, seed=0)
    assert level == pytest.approx(0.3)
    assert flags[70:].all() and not flags[:70].any()


def test_loss_relabel_takes_confident_predictions_among_the_highest_losses():
    labels = np.zeros(10, dtype=int)
    loss = np.array([0.1, 0.2, 5.0, 0.3, 4.0, 3.0, 0.1, 0.1, 0.1, 0.1])
    probs = np.full((10, 3), 0.1)
    probs[:, 0] = 0.8  # the model agrees with label 0 ...
    probs[2] = [0.1, 0.2, 0.7]  # ... except on sample 2 (confident: class 2)
    probs[4] = [0.3, 0.4, 0.3]  # and sample 4 (unconfident)
    probs[5] = [0.05, 0.9, 0.05]  # sample 5 is confident but not among the int(10 * 0.4 * 0.5) = 2 highest losses
    out = loss_relabel(labels, loss, probs, level=0.4, ratio=0.5, thres=0.5)
    assert out.tolist() == [0, 0, 2, 0, 0, 0, 0, 0, 0, 0]
    assert labels.tolist() == [0] * 10  # the input is not modified


def test_confident_relabel_changes_only_confident_samples():
    probs = np.array([[0.9, 0.1], [0.45, 0.55], [0.2, 0.8]])
    assert confident_relabel(np.array([1, 0, 0]), probs, 0.5).tolist() == [0, 1, 1]
    assert confident_relabel(np.array([1, 0, 0]), probs, 0.6).tolist() == [0, 0, 1]


def test_mixup_pieces_by_hand():
    x, y = torch.tensor([[1.0], [3.0]]), torch.tensor([0, 1])
    mixed, y_b = losses.mixup_inputs(x, y, 0.25, torch.tensor([1, 0]))
    assert mixed.flatten().tolist() == [2.5, 1.5] and y_b.tolist() == [1, 0]
    logits = torch.tensor([[2.0, 0.0], [0.0, 1.0]])
    assert float(losses.mixup_ce(logits, y, y_b, 1.0)) == pytest.approx(float(losses.ce(logits, y)))
    both = 0.25 * losses.ce(logits, y) + 0.75 * losses.ce(logits, y_b)
    assert float(losses.mixup_ce(logits, y, y_b, 0.25)) == pytest.approx(float(both))


@pytest.fixture(scope="module")
def fed():
    return build_federated_dataset(digits_cfg())


def test_stages_visit_every_client_once_per_pass_then_finetune_on_selected(fed, tmp_path):
    res = run_experiment(digits_cfg(rounds=4, iterations=2), tmp_path, data=fed)
    stages = [h["stage"] for h in res.history]
    assert stages == ["preprocess"] * 12 + ["finetune"] * 2 + ["train"] * 2
    assert all(h["round/clients"] == 1 for h in res.history[:12])
    verdicts = [h for h in res.history if "detect/clients_noisy" in h]
    assert [h["round"] for h in verdicts] == [6.0, 12.0]  # one LID split per pass
    extra = res.state.extra
    assert set(extra["lid_cum"]) == set(range(6))
    levels = extra["levels"]
    assert set(levels) == set(range(6)) and all(levels[c] == 0.0 for c in range(6) if c not in extra["noisy"])
    passing = sorted(c for c, v in levels.items() if v <= 0.1)
    assert extra["selected"] == (passing or [min(levels, key=levels.get)])
    for h in res.history[12:14]:
        assert h["round/clients"] <= len(extra["selected"])
    assert res.history[-1]["round/clients"] == 6
    assert "relabel/label_acc" in res.history[-1] and "noise/rate_pearson" in res.history[-1]


def test_correction_off_never_changes_a_label(fed, tmp_path):
    res = run_experiment(digits_cfg(rounds=2, iterations=2, correction=False), tmp_path, data=fed)
    assert res.history[-1]["relabel/changed"] == 0.0
    assert [h["stage"] for h in res.history].count("finetune") == 1


def test_fine_tuning_off_drops_the_stage(fed, tmp_path):
    res = run_experiment(digits_cfg(rounds=2, iterations=1, fine_tuning=False, mixup_alpha=0.0), tmp_path, data=fed)
    assert [h["stage"] for h in res.history] == ["preprocess"] * 6 + ["train"] * 2


def test_interrupted_then_resumed_run_is_bit_identical(fed, tmp_path):
    from tests.engine.test_run import Crash, model_equal

    cfg = digits_cfg(rounds=2, iterations=2)
    full = run_experiment(cfg, tmp_path / "full", data=fed)
    with pytest.raises(KeyboardInterrupt):  # mid pass 2, after the first LID split and snapshot
        run_experiment(cfg, tmp_path / "cut", data=fed, callbacks=[Crash(at=8)])
    resumed = run_experiment(cfg, tmp_path / "cut", data=fed, resume=tmp_path / "cut")
    assert json.dumps(resumed.history) == json.dumps(full.history)  # (NaN-safe: NaN != NaN)
    assert json.loads((tmp_path / "cut" / "metrics.json").read_text()) == \
        json.loads((tmp_path / "full" / "metrics.json").read_text())
    assert model_equal(tmp_path / "cut", tmp_path / "full")


def test_several_clients_per_preprocessing_round_still_visit_each_once_per_pass(fed, tmp_path):
    res = run_experiment(digits_cfg(rounds=1, iterations=2, preprocess_clients=4, fine_tuning=False), tmp_path,
                         data=fed)
    pre = [h for h in res.history if h["stage"] == "preprocess"]
    assert [h["round/clients"] for h in pre] == [4, 2, 4, 2]  # ceil(6 / 4) = 2 rounds per pass
    assert set(res.state.extra["lid_cum"]) == set(range(6))


@pytest.mark.parametrize("total", [0, 1, 2, 3, 5, 10, 17, 30, 50, 100, 1000])
def test_within_budget_the_stage_rounds_sum_to_train_rounds(total):
    pre, ft, train = stage_split(total, 10, 5, "within", 0.4, None, True)
    assert pre + ft + train == max(total, 1) and train >= 1 and min(pre, ft) >= 0
    assert pre <= 50  # never more than `iterations` passes
    if total >= 2:
        assert pre >= 1  # a tiny budget still pre-processes one round
    if 0.4 * total >= 10 or total >= 11:
        assert pre % 10 == 0 and pre >= 10  # whole passes once one fits the budget with a round to spare


def test_a_share_under_one_pass_takes_one_whole_pass_so_the_server_judges():
    # 20 clients, one a round, 40 rounds: 0.4 * 40 = 16 rounds would never finish the pass.
    assert stage_split(40, 20, 5, "within", 0.4, None, True) == (20, 10, 10)
    assert judges(20, 20) and not judges(16, 20)
    assert stage_split(20, 20, 5, "within", 0.4, None, True) == (8, 6, 6)  # no room for a pass: as before
    assert stage_split(40, 20, 5, "within", 0.0, None, True)[0] == 0  # no pre-processing asked for


def test_a_budget_without_a_whole_pass_warns(caplog):
    import logging

    from fedcore.run import make_context

    for rounds, warned in ((4, True), (12, False)):  # 6 clients a pass: 1 round, then one whole pass
        method = build_method(digits_cfg(rounds=rounds, budget="within"))
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="fedcore.methods.fedcorr"):
            method.init(make_context(method.cfg, build_federated_dataset(method.cfg), torch.device("cpu")))
        pre = next(s.rounds for s in method.stages if s.name == "preprocess")
        assert (pre < method.per_pass) == warned and ("under one pass" in caplog.text) == warned


def test_the_default_split_of_fifty_rounds_and_the_former_one():
    assert stage_split(50, 10, 5, "within", 0.4, None, True) == (20, 15, 15)
    assert stage_split(50, 10, 5, "extra", 0.4, None, True) == (50, 25, 25)  # 100 rounds in all
    assert stage_split(50, 10, 5, "within", 0.4, 5, True) == (20, 5, 25)
    assert stage_split(50, 10, 5, "within", 0.4, None, False) == (20, 0, 30)


@pytest.mark.parametrize("rounds", [1, 2, 4, 12])
def test_the_method_stages_fill_train_rounds_exactly(rounds):
    method = build_method(digits_cfg(rounds=rounds, budget="within"))
    assert sum(s.rounds for s in method.stages) == rounds and all(s.rounds > 0 for s in method.stages)


def test_a_within_budget_run_of_two_rounds_runs_two_rounds(fed, tmp_path):
    res = run_experiment(digits_cfg(rounds=2, budget="within"), tmp_path, data=fed)
    assert [h["stage"] for h in res.history] == ["preprocess", "train"]
