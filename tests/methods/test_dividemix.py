"""FL-DivideMix: the MixMatch pieces by hand, co-divide, the ensemble, and a short run."""

import numpy as np
import pytest
import torch

from fedcore.config import ExperimentConfig
from fedcore.data.build import build_federated_dataset
from fedcore.methods.dividemix import MeanTwin, warmup_loss
from fedcore.methods.registry import build_method
from fedcore.run import make_context, run_experiment
from fedcore.train import losses
from fedcore.train.local import Batch
from fedcore.train.mixmatch import clean_probability, co_guess, mixmatch_batch, mixmatch_loss, refine_labels, sharpen


def test_clean_probability_is_high_for_low_losses_and_scale_free():
    rng = np.random.default_rng(0)
    loss = np.r_[rng.normal(0.2, 0.05, 80), rng.normal(2.5, 0.3, 20)]
    w = clean_probability(loss, seed=0)
    assert (w[:80] > 0.5).all() and (w[80:] < 0.5).all()
    np.testing.assert_allclose(clean_probability(10 * loss + 3, seed=0), w, atol=1e-6)  # min-max scaled
    assert clean_probability(np.full(5, 0.7), seed=0).tolist() == [1.0] * 5  # no spread: all clean


def test_sharpen_guess_and_refine_by_hand():
    p = torch.tensor([[0.6, 0.4]])
    torch.testing.assert_close(sharpen(p, 0.5), torch.tensor([[0.36 / 0.52, 0.16 / 0.52]]))
    torch.testing.assert_close(sharpen(p, 1.0), p)
    torch.testing.assert_close(co_guess(torch.tensor([[0.8, 0.2]]), torch.tensor([[0.4, 0.6]]), 1.0), p)
    own = torch.tensor([[0.1, 0.9], [0.1, 0.9]])
    out = refine_labels(torch.tensor([0, 0]), torch.tensor([1.0, 0.0]), own, 1.0)
    torch.testing.assert_close(out, torch.tensor([[1.0, 0.0], [0.1, 0.9]]))  # w = 1: the label; w = 0: own guess


def test_mixmatch_batch_orders_labelled_first_and_mixes_with_the_larger_weight():
    v1, v2 = torch.tensor([[1.0], [2.0], [3.0]]), torch.tensor([[10.0], [20.0], [30.0]])
    t = torch.eye(3)
    lab = torch.tensor([True, False, True])
    ident = torch.arange(6)
    x, tt, n = mixmatch_batch((v1, v2), t, lab, 0.3, ident)  # identity perm: no mixing
    assert n == 4 and x.flatten().tolist() == [1.0, 3.0, 10.0, 30.0, 2.0, 20.0]
    assert tt.argmax(1).tolist() == [0, 2, 0, 2, 1, 1]
    swap = torch.tensor([1, 0, 2, 3, 4, 5])
    x, _, _ = mixmatch_batch((v1, v2), t, lab, 0.3, swap)  # lam 0.3 is used as 0.7
    assert x.flatten()[:2].tolist() == pytest.approx([0.7 * 1 + 0.3 * 3, 0.7 * 3 + 0.3 * 1])


def test_mixmatch_loss_parts():
    gen = torch.Generator().manual_seed(0)
    logits, t = torch.randn(6, 4, generator=gen), torch.softmax(torch.randn(6, 4, generator=gen), -1)
    loss, parts = mixmatch_loss(logits, t, 4, lambda_u=3.0)
    lx = losses.soft_ce(logits[:4], t[:4])
    lu = ((torch.softmax(logits[4:], -1) - t[4:]) ** 2).mean()
    assert float(parts["x"]) == pytest.approx(float(lx)) and float(parts["u"]) == pytest.approx(float(lu))
    assert float(loss) == pytest.approx(float(lx + 3.0 * lu + parts["prior"]))
    flat, parts = mixmatch_loss(torch.zeros(4, 4, requires_grad=True), t[:4], 0, lambda_u=1.0)
    assert float(parts["prior"]) == pytest.approx(0.0, abs=1e-7) and float(parts["x"]) == 0.0  # uniform, no labelled
    flat.backward()  # an empty part keeps the graph
    _, parts = mixmatch_loss(logits, t, 6, 1.0, prior_penalty=False)
    assert float(parts["prior"]) == 0.0 and float(parts["u"]) == 0.0


def test_warmup_confidence_penalty_subtracts_the_entropy():
    logits, y = torch.tensor([[2.0, 0.0]]), torch.tensor([0])
    p = torch.softmax(logits, -1)
    entropy = float(-(p * p.log()).sum())
    assert float(warmup_loss(logits, y, True)) == pytest.approx(float(losses.ce(logits, y)) - entropy)


def cfg(rounds: int = 4, **params) -> ExperimentConfig:
    return ExperimentConfig.model_validate({
        "partition": {"kind": "dirichlet", "num_clients": 4, "alpha": 1.0},
        "noise": {"type": "symmetric", "noisy_client_fraction": 0.5, "rate": {"kind": "fixed", "value": 0.6}},
        "model": {"name": "mlp", "width": 32},
        "train": {"rounds": rounds, "local_epochs": 1, "lr": 0.05, "device": "cpu"},
        "method": {"name": "dividemix", "params": {"warmup_rounds": 2, **params}},
    })


@pytest.fixture(scope="module")
def fed():
    return build_federated_dataset(cfg())


def test_short_run_warms_up_then_divides_and_evaluates_the_ensemble(fed, tmp_path):
    res = run_experiment(cfg(), tmp_path, data=fed)
    assert [h["stage"] for h in res.history] == ["warmup"] * 2 + ["train"] * 2
    last = res.history[-1]
    for key in ("detect/sample_f1", "noise/rate_pearson", "dividemix/loss_x", "dividemix/labelled_a"):
        assert np.isfinite(last[key]), key
    assert "detect/sample_f1" not in res.history[1]  # no division during warm-up


def test_each_network_trains_on_the_peers_division(fed):
    c = cfg(rounds=1, warmup_rounds=0, prior_penalty=False)
    method = build_method(c)
    method.init(make_context(c, fed, torch.device("cpu")))
    model = method.model
    x = torch.randn(6, *method.ctx.store.in_shape)
    batch = Batch(pos=torch.arange(6), x=torch.cat([x, x]), y=torch.tensor([0, 1, 2, 3, 4, 5]))
    task = type("T", (), {"stage": "train", "rng": np.random.default_rng(0), "gen": torch.Generator().manual_seed(0)})
    # b's division calls everything noisy -> a gets only unlabelled rows, which weigh 0 here.
    extras = {"w": {"a": torch.ones(6), "b": torch.zeros(6)}, "lambda_u": 0.0, "sums": {}}
    model.zero_grad()
    method.loss(model, batch, task, extras).backward()
    grad = {n: sum(float(p.grad.abs().sum()) for p in getattr(model, n).parameters() if p.grad is not None)
            for n in ("a", "b")}
    assert grad["a"] == 0.0 and grad["b"] > 0.0


def test_the_evaluated_model_is_the_mean_of_both_networks():
    a, b = torch.nn.Linear(3, 2), torch.nn.Linear(3, 2)
    x = torch.randn(4, 3)
    torch.testing.assert_close(MeanTwin(a, b)(x), (a(x) + b(x)) / 2)
