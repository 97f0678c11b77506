"""FL-DivideMix: the MixMatch pieces by hand, co-divide, the ensemble, and a short run."""

import math

import numpy as np
import pytest
import torch

from fedcore.config import ExperimentConfig
from fedcore.data.build import build_federated_dataset
from fedcore.engine.types import OptimSpec
from fedcore.methods import dividemix
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


# -- the local round in DivideMix's procedure (dividemix.local_round) ---------------------------------------


def local_setup(fed, epochs: int = 3, **params):
    """The method, the first client's data and labels, its params and spec, and a view function."""
    c = cfg(rounds=1, warmup_rounds=0, **params)
    c = c.model_copy(update={"train": c.train.model_copy(update={"local_epochs": epochs})})
    method = build_method(c)
    method.init(make_context(c, fed, torch.device("cpu")))
    data = method.ctx.clients[0]
    views = lambda pos: torch.cat([data.x(pos)] * 2)  # noqa: E731 - the plain input twice
    spec = method.optim_spec(type("T", (), {"instructions": {}})())
    return method, data, method.params, spec, views


def run_local(method, data, p, spec, views):
    nets = {"a": method.model.a, "b": method.model.b}
    return dividemix.local_round(nets, data, data.labels, p, spec, views, 1.0, np.random.default_rng(0),
                                       torch.Generator().manual_seed(0), seed=0)


@pytest.mark.parametrize("split_every, fits", [("epoch", 2 * 3), ("round", 2)])
def test_the_division_is_refitted_each_local_epoch_on_both_networks(fed, monkeypatch, split_every, fits):
    calls = []

    def mock_gmm(loss, seed, max_iter):
        calls.append(len(loss))
        return np.full(len(loss), 0.9)

    monkeypatch.setattr(dividemix, "clean_probability", mock_gmm)
    method, data, p, spec, views = local_setup(fed, epochs=3, split_every=split_every)
    run_local(method, data, p, spec, views)
    assert len(calls) == fits and set(calls) == {data.n}  # per net: one fit per epoch (or per round)


def test_separate_batches_draw_b_labelled_and_b_unlabelled_for_ceil_labelled_over_b_steps():
    labelled, unlabelled = torch.arange(0, 70), torch.arange(70, 90)  # 70 labelled, 20 unlabelled
    pairs = list(dividemix.separate_batches(labelled, unlabelled, 32, torch.Generator().manual_seed(0)))
    assert len(pairs) == 3  # ceil(70 / 32)
    assert [len(pl) for pl, _ in pairs] == [32, 32, 6] and [len(pu) for _, pu in pairs] == [20, 20, 20]
    assert sorted(torch.cat([pl for pl, _ in pairs]).tolist()) == list(range(70))  # each labelled once
    assert all(set(pu.tolist()) <= set(range(70, 90)) for _, pu in pairs)
    many = list(dividemix.separate_batches(torch.arange(10), torch.arange(10, 110), 4, torch.Generator()))
    assert [len(pu) for _, pu in many] == [4, 4, 4]  # a large unlabelled set gives full batches
    assert list(dividemix.separate_batches(torch.arange(0), torch.arange(5), 4, torch.Generator())) == []


def test_the_step_count_of_a_constructed_division(fed, monkeypatch):
    method, data, p, spec, views = local_setup(fed, epochs=2)
    n_lab = data.n // 3
    w = np.r_[np.full(n_lab, 0.9), np.full(data.n - n_lab, 0.1)]  # the first third clean for both nets
    monkeypatch.setattr(dividemix, "clean_probability", lambda loss, seed, max_iter: w)
    _, metrics = run_local(method, data, p, spec, views)
    per_net = math.ceil(n_lab / spec.batch_size)
    lone = int(n_lab % spec.batch_size == 1 and data.n - n_lab == 0)  # a 1-sample step is skipped
    assert metrics["train/steps"] == 2 * 2 * (per_net - lone)  # 2 epochs x 2 nets
    assert metrics["dividemix/labelled_a"] == pytest.approx(n_lab / data.n)
    split = p.model_copy(update={"batching": "split"})
    _, metrics = run_local(method, data, split, spec, views)
    assert metrics["train/steps"] == 2 * 2 * math.ceil(data.n / spec.batch_size)  # batches of the whole set


@pytest.mark.parametrize("lifetime, fresh", [("epoch", True), ("round", False)])
def test_a_fresh_optimizer_each_epoch_starts_with_empty_momentum(lifetime, fresh):
    net = torch.nn.Linear(3, 2)
    pool = dividemix.OptimizerPool({"a": net}, OptimSpec(lr=0.1, momentum=0.9, weight_decay=0.0), lifetime)
    for epoch in range(3):
        opt = pool.get("a", epoch)
        assert pool.get("a", epoch) is opt  # one optimizer through the epoch
        buffers = [opt.state[q].get("momentum_buffer") for q in net.parameters()]
        assert all(b is None for b in buffers) == (fresh or epoch == 0)
        opt.zero_grad()
        net(torch.randn(4, 3)).sum().backward()
        opt.step()


def test_the_train_stage_has_no_weight_decay_by_default_and_the_former_round_stays_reachable(fed, tmp_path):
    method, data, p, spec, views = local_setup(fed, epochs=1)
    assert p.train_weight_decay == 0.0 and not method.joint()
    seen = []
    real = dividemix.make_optimizer
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(dividemix, "make_optimizer", lambda params, s: seen.append(s.weight_decay) or real(params, s))
        run_local(method, data, p, spec, views)
    assert seen == [0.0, 0.0] and spec.weight_decay > 0
    former = {"split_every": "round", "batching": "split", "optimizer_lifetime": "round"}
    assert build_method(cfg(**former)).joint()
    res = run_experiment(cfg(**former), tmp_path, data=fed)
    assert np.isfinite(res.history[-1]["dividemix/loss_x"])


def test_the_lambda_u_ramp_starts_at_one_step_in_the_first_train_round():
    method = build_method(cfg(rounds=30, rampup_rounds=16))
    task = lambda rnd: type("T", (), {"rnd": rnd})()  # noqa: E731
    assert method._ramp(task(2)) == pytest.approx(1 / 16)  # rounds 0-1 warm up
    assert method._ramp(task(17)) == 1.0 and method._ramp(task(25)) == 1.0
