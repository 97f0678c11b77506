"""FedNoRo: detection maths, the shared noise-aware loss, and a short run on noisy digits."""

import numpy as np
import pytest
import torch

from fedcore.config import ExperimentConfig
from fedcore.data.build import build_federated_dataset
from fedcore.methods import fednoro
from fedcore.methods.fednoro import class_mean_losses, detect_noisy_clients, noise_aware_loss
from fedcore.run import run_experiment
from fedcore.stats.gmm import minmax
from fedcore.train import losses


def digits_cfg(method: str, rounds: int = 4, **params) -> ExperimentConfig:
    """10 digits clients, 7 of them with 90% symmetric noise, a small MLP."""
    return ExperimentConfig.model_validate({
        "partition": {"kind": "bernoulli_dirichlet", "num_clients": 10, "p": 1.0, "alpha": 0.5},
        "noise": {"type": "symmetric", "num_noisy_clients": 7, "clean_cover": True,
                  "rate": {"kind": "fixed", "value": 0.9}},
        "model": {"name": "mlp", "width": 32},
        "train": {"rounds": rounds, "optimizer": "adam", "lr": 1e-3, "device": "cpu"},
        "method": {"name": method, "params": params},
    })


def test_class_mean_losses_by_hand():
    out = class_mean_losses(np.array([1.0, 3.0, 2.0]), np.array([0, 0, 2]), 4)
    np.testing.assert_allclose(out, [2.0, np.nan, 2.0, np.nan])


def test_detection_splits_high_loss_clients_and_fills_gaps():
    rng = np.random.default_rng(0)
    x = np.vstack([rng.normal(0.3, 0.05, (3, 5)), rng.normal(2.0, 0.05, (7, 5))])
    x[0, 1] = x[5, 2] = np.nan  # absent classes take the lowest loss of that class
    for scaling, votes, n_init in (("minmax", 9, 1), ("zscore", 1, 9)):  # the code's fit, and the older one
        noisy = detect_noisy_clients(x, seed=0, n_init=n_init, scaling=scaling, votes=votes)
        assert noisy.tolist() == [False] * 3 + [True] * 7, scaling


def test_detection_takes_the_majority_of_the_seeds(monkeypatch):
    """Seeds 5..9 vote; seed 7 alone calls client 0 noisy as well: the majority set wins."""
    seen = []

    def fake_posterior(x, seed, n_init, order_dim):
        seen.append(seed)
        np.testing.assert_allclose(x.min(axis=0), 0.0)  # min-max scaled per class
        np.testing.assert_allclose(x.max(axis=0), 1.0)
        q = np.array([0.9, 0.8, 0.1, 0.2])
        if seed == 7:
            q[0] = 0.3
        return q, None

    monkeypatch.setattr(fednoro, "clean_posterior", fake_posterior)
    table = np.array([[0.1, 0.5], [0.2, 0.4], [2.0, 1.5], [1.8, 1.9]])
    noisy = detect_noisy_clients(table, seed=5, votes=5)
    assert seen == [5, 6, 7, 8, 9]
    assert noisy.tolist() == [False, False, True, True]
    # Seed 7 voting alone gives its own set: the earlier verdict came from the vote.
    seen.clear()
    assert detect_noisy_clients(table, seed=7, votes=1).tolist() == [True, False, True, True]


def test_minmax_scales_a_constant_class_to_zero():
    np.testing.assert_allclose(minmax(np.array([[1.0, 2.0], [3.0, 2.0]])), [[0.0, 0.0], [1.0, 0.0]])


def test_absent_class_prior_is_minus_inf_and_the_loss_stays_finite():
    prior = losses.class_log_prior(torch.tensor([0, 0, 0, 1]), 3, absent="neg_inf")
    assert prior[2] == float("-inf")
    np.testing.assert_allclose(prior[:2].exp().numpy(), [0.75, 0.25])
    gen = torch.Generator().manual_seed(2)
    s = torch.randn(4, 3, generator=gen, requires_grad=True)
    t, y = torch.randn(4, 3, generator=gen), torch.tensor([0, 1, 0, 0])
    for tau, soften in ((1.0, False), (1.0, True), (0.0, False)):
        loss = noise_aware_loss(s, y, prior, tau, t, w_kd=0.5, T=0.8, soften_student=soften)
        loss.backward()
        assert torch.isfinite(loss) and torch.isfinite(s.grad).all(), (tau, soften)
        if tau:  # the absent class's logit gets no gradient: its probability is exactly 0
            assert torch.all(s.grad[:, 2] == 0)
        s.grad = None
    # The KL term of the absent class is p_t log p_t (log q taken as 0, as in FedNoRo's code).
    one = losses.la_kd(torch.zeros(1, 3), torch.zeros(1, 3), torch.tensor([0]), prior, w_kd=1.0, T=1.0,
                       soften_student=False)
    p = 1 / 3
    by_hand = p * np.log(p / 0.75) + p * np.log(p / 0.25) + p * np.log(p)
    assert float(one) == pytest.approx(by_hand, rel=1e-6)


def test_la_kd_softens_only_the_teacher_by_hand():
    """Student logits 0, prior (1/4, 3/4): q = (1/4, 3/4); teacher (0, ln 3) at T = 0.8."""
    prior = torch.log(torch.tensor([0.25, 0.75]))
    student, teacher, y = torch.zeros(1, 2), torch.tensor([[0.0, np.log(3.0)]]), torch.tensor([0])
    p1 = 3 ** 1.25 / (1 + 3 ** 1.25)
    p = np.array([1 - p1, p1])
    kl = float((p * np.log(p / np.array([0.25, 0.75]))).sum())
    want = 0.3 * kl + 0.7 * np.log(4.0)
    got = losses.la_kd(student, teacher, y, prior, w_kd=0.3, T=0.8, soften_student=False)
    assert float(got) == pytest.approx(want, rel=1e-6)
    # Softening the student too (the older choice) gives q = softmax(log(1/4, 3/4) / 0.8) instead.
    q = np.array([0.25, 0.75]) ** 1.25
    q /= q.sum()
    old = 0.3 * float((p * np.log(p / q)).sum()) + 0.7 * np.log(4.0)
    assert float(losses.la_kd(student, teacher, y, prior, 0.3, T=0.8, soften_student=True)) == pytest.approx(old)


def test_fednoro_defaults_follow_the_code_and_fedsir_keeps_the_older_ones():
    from fedcore.methods.fedsir import FedSIRParams

    p = fednoro.FedNoRoParams()
    assert (p.detect_scaling, p.detect_votes, p.gmm_n_init) == ("minmax", 9, 1)
    assert (p.kd_soften_student, p.absent_prior, p.daagg_distance) == (False, "neg_inf", "per_tensor")
    s = FedSIRParams()
    assert (s.kd_soften_student, s.absent_prior, s.daagg_distance) == (True, "one", "flat")


def test_la_with_uniform_prior_equals_ce():
    gen = torch.Generator().manual_seed(0)
    logits, y = torch.randn(6, 4, generator=gen), torch.tensor([0, 1, 2, 3, 0, 1])
    uniform = losses.class_log_prior(torch.arange(4), 4)
    assert noise_aware_loss(logits, y, uniform, tau=1.0) == pytest.approx(float(losses.ce(logits, y)))
    skewed = losses.class_log_prior(torch.tensor([0, 0, 0, 1]), 4)
    assert noise_aware_loss(logits, y, skewed, tau=0.0) == pytest.approx(float(losses.ce(logits, y)))


def test_kd_mask_mixes_la_kd_and_la_by_fraction():
    gen = torch.Generator().manual_seed(1)
    s, t, y = torch.randn(4, 3, generator=gen), torch.randn(4, 3, generator=gen), torch.tensor([0, 1, 2, 0])
    prior = losses.class_log_prior(torch.tensor([0, 0, 1, 2]), 3)
    mask = torch.tensor([True, False, False, True])
    kd = losses.la_kd(s, t, y, prior, 0.3, T=0.8, reduction="none")
    la = losses.la_ce(s, y, prior, reduction="none")
    expected = (kd[0] + kd[3] + la[1] + la[2]) / 4  # = 1/2 mean(LA-KD on KD set) + 1/2 mean(LA on the rest)
    got = noise_aware_loss(s, y, prior, 1.0, t, w_kd=0.3, T=0.8, kd_mask=mask)
    assert float(got) == pytest.approx(float(expected))
    assert float(noise_aware_loss(s, y, prior, 1.0, t, 0.3, 0.8, None)) == pytest.approx(float(kd.mean()))
    assert float(noise_aware_loss(s, y, prior, 1.0, t, 0.0, 0.8, mask)) == pytest.approx(float(la.mean()))


@pytest.fixture(scope="module")
def fed():
    return build_federated_dataset(digits_cfg("fednoro"))


def test_fednoro_detects_once_after_warmup(fed, tmp_path):
    res = run_experiment(digits_cfg("fednoro", rounds=5, warmup_rounds=3), tmp_path, data=fed)
    stages = [h["stage"] for h in res.history]
    assert stages == ["warmup"] * 3 + ["identify", "train"]  # identification is a stage (a task) of its own
    detected = [h for h in res.history if "detect/client_f1" in h]
    assert len(detected) == 1 and detected[0]["round"] == 4.0
    # Three warm-up rounds are too few for a reliable split; only its bookkeeping is checked here.
    assert detected[0]["detect/clients_noisy"] == len(res.state.extra["noisy"])
    assert set(res.state.extra["noisy"]) <= set(range(10))
    assert np.isfinite(res.summary["final/acc"])


def test_stages_run_one_process_each_match_one_run(fed, tmp_path):
    """warmup -> identify -> train as three processes resuming each other's checkpoints (the
    pipeline's tasks) give the history and weights of one in-process run."""
    cfg = digits_cfg("fednoro", rounds=5, warmup_rounds=2)
    whole = run_experiment(cfg, tmp_path / "whole", data=fed)
    prev = None
    for stage in ("warmup", "identify", "train"):
        part = run_experiment(cfg, tmp_path / stage, data=fed, resume=prev, stages=[stage])
        prev = tmp_path / stage
    assert part.history == whole.history and part.state.extra["noisy"] == whole.state.extra["noisy"]
    a, b = (torch.load(d / "model.pt") for d in (tmp_path / "train", tmp_path / "whole"))
    assert all(torch.equal(a[k], b[k]) for k in a)
