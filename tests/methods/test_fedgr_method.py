"""FedGR as a method: each ablation switch removes its term, R vanishes when local == global,
and a few rounds on noisy digits report every promised metric (no accuracy claims here)."""

import numpy as np
import pytest
import torch

from fedcore.config import ExperimentConfig
from fedcore.data.build import build_federated_dataset
from fedcore.engine.sampler import client_rngs
from fedcore.engine.types import ClientTask, ClientUpdate, RoundPlan, ServerState
from fedcore.methods.registry import build_method
from fedcore.run import make_context, run_experiment
from fedcore.train.local import Batch


def digits_cfg(rounds: int = 4, warmup: int = 2, **params) -> ExperimentConfig:
    """Six digits clients, all noisy with symmetric U(0.3, 0.9) noise, a small MLP."""
    return ExperimentConfig.model_validate({
        "data": {"max_train": 600},
        "partition": {"kind": "dirichlet", "num_clients": 6, "alpha": 1.0},
        "noise": {"type": "symmetric", "rate": {"kind": "uniform", "min": 0.3, "max": 0.9}},
        "model": {"name": "mlp", "width": 16},
        "train": {"rounds": rounds, "warmup_rounds": warmup, "device": "cpu", "batch_size": 32},
        "method": {"name": "fedgr", "params": params},
    })


@pytest.fixture(scope="module")
def fed():
    return build_federated_dataset(digits_cfg())


def make_method(fed, **params):
    cfg = digits_cfg(**params)
    method = build_method(cfg)
    state = method.init(make_context(cfg, fed, torch.device("cpu")))
    return method, state


def task_for(method, state, cid=0, rnd=5, sieve=None):
    """A post-warm-up task with fresh generators, so repeated calls draw the same views."""
    rng, gen = client_rngs(0, rnd, cid)
    n = method.ctx.clients[cid].n
    sieve = sieve or {cid: {"q": np.linspace(0.0, 1.0, n), "rate": 0.2}}
    return ClientTask(cid=cid, params=state.params, data=method.ctx.clients[cid], instructions={"sieve": sieve},
                      state={}, rng=rng, gen=gen, rnd=rnd, stage="train")


def objective(method, state, perturb: float = 0.05, **kw):
    """(total loss, unweighted terms) on the client's first 16 samples, with the student
    moved `perturb` away from the global model so that R is not trivially zero."""
    task = task_for(method, state, **kw)
    extras = method.before_local(task)
    pos = torch.arange(16)
    x = method.make_x(task)(pos)
    with torch.no_grad():
        for p in method.model.parameters():
            p.add_(perturb)
    batch = Batch(pos=pos, x=x, y=task.data.labels[pos])
    terms = method.loss_terms(method.model, batch, extras)
    total = method.loss(method.model, batch, task, extras)
    method.model.load_state_dict(state.params)
    return float(total.detach()), {k: float(v.detach()) for k, v in terms.items()}


def test_rep_reg_is_zero_when_local_equals_global(fed):
    method, state = make_method(fed)
    _, terms = objective(method, state, perturb=0.0)
    assert terms["r"] == pytest.approx(0.0, abs=1e-6)
    _, moved = objective(method, state, perturb=0.05)
    assert moved["r"] > 1e-4


@pytest.mark.parametrize(("switch", "term", "weight"), [("ema_distill", "b", "lambda_b"), ("rep_reg", "r", "lambda_r")])
def test_regularizer_switch_removes_exactly_its_term(fed, switch, term, weight):
    full, terms = objective(*make_method(fed))
    off, off_terms = objective(*make_method(fed, **{switch: False}))
    assert term in terms and term not in off_terms
    assert terms[term] > 0 and off != pytest.approx(full)
    # Same views and targets otherwise: the totals differ by exactly lambda * term.
    lam = getattr(make_method(fed)[0].params, weight)
    assert full - off == pytest.approx(lam * terms[term], rel=1e-4)


def test_refine_switch_changes_the_self_training_term(fed):
    # tau_conf=0 makes every pseudo-label confident, so the low-rate tier keeps its q < .5
    # samples with soft targets, while selection without refining drops them.
    on, on_terms = objective(*make_method(fed, tau_conf=0.0))
    off, off_terms = objective(*make_method(fed, tau_conf=0.0, refine=False))
    assert on_terms["sr"] != pytest.approx(off_terms["sr"]) and on != pytest.approx(off)


def test_sieving_switch_fits_per_client_mixtures(fed):
    # Client 0 uploads only small surrogates, client 1 only large ones.
    rng = np.random.default_rng(0)
    answers = [ClientUpdate(cid=0, num_examples=20, uploads={"lbar": rng.normal(0.2, 0.05, 20)}),
               ClientUpdate(cid=1, num_examples=20, uploads={"lbar": rng.normal(3.0, 0.3, 20)})]
    plans = {}
    for sieving in (True, False):
        method, state = make_method(fed, sieving=sieving, rate_estimator="threshold")
        plans[sieving] = method.after_probe(state, RoundPlan("train", cohort=[0, 1], probe=[0, 1]), answers)
    pooled, local = (plans[s].instructions["sieve"] for s in (True, False))
    assert (pooled[0]["rate"], pooled[1]["rate"]) == (0.0, 1.0)
    assert 0.0 < local[1]["rate"] < 1.0  # alone, an all-noisy client looks half clean
    # ...and the different estimates change the client's loss.
    method, state = make_method(fed, tau_conf=0.0)
    n = method.ctx.clients[0].n
    q_pooled = {0: {"q": np.ones(n), "rate": 0.0}}
    q_local = {0: {"q": np.where(np.arange(n) % 2 == 0, 1.0, 0.0), "rate": 0.5}}
    assert objective(method, state, sieve=q_pooled)[0] != pytest.approx(objective(method, state, sieve=q_local)[0])


def test_warmup_rounds_train_plain_ce_and_probe_nothing(fed):
    method, state = make_method(fed)
    assert method.plan_round(state, 0).probe is None and method.plan_round(state, 1).probe is None
    plan = method.plan_round(state.replace(rnd=2), 2)
    assert plan.probe is not None and list(plan.probe) == list(plan.cohort)
    rng, gen = client_rngs(0, 0, 0)
    task = ClientTask(0, state.params, method.ctx.clients[0], {}, {}, rng, gen, 0, "train")
    assert method.before_local(task) == {"warmup": True}


def test_probe_and_main_phase_see_the_same_weak_view(fed):
    method, state = make_method(fed)
    probe = method.client_probe(task_for(method, state, sieve={0: None}))
    extras = method.before_local(task_for(method, state))
    np.testing.assert_allclose(probe.uploads["lbar"], extras["state"]["window"][:, 0])


def test_short_run_reports_the_promised_metrics(fed, tmp_path):
    res = run_experiment(digits_cfg(rounds=4, warmup=2), tmp_path, data=fed)
    warm, post = res.history[:2], res.history[2:]
    assert [h["stage"] for h in res.history] == ["warmup"] * 2 + ["train"] * 2  # warm-up: a task of its own
    assert all("noise/rate_pearson" not in h for h in warm)
    for h in post:
        for key in ("noise/rate_pearson", "noise/rate_mae", "detect/sample_precision", "detect/sample_recall",
                    "detect/sample_f1", "detect/sample_label_nmi", "detect/sample_noise_nmi",
                    "refine/mask_rate", "train/memorization", "test/acc"):
            assert np.isfinite(h[key]), key
        assert sum(k.startswith("noise/rate_est/client_") for k in h) == 6
    assert isinstance(res.state, ServerState) and set(res.state.extra["sieve"]) == set(range(6))
    assert (tmp_path / "metrics.json").is_file()


def test_warmup_and_train_as_two_processes_match_one_run(fed, tmp_path):
    """warmup -> train resumed from the warm-up's checkpoint (the pipeline's two tasks) give
    the history and weights of one in-process run."""
    cfg = digits_cfg(rounds=4, warmup=2)
    assert [s.name for s in build_method(cfg).stages] == ["warmup", "train"]
    whole = run_experiment(cfg, tmp_path / "whole", data=fed)
    run_experiment(cfg, tmp_path / "warmup", data=fed, stages=["warmup"])
    part = run_experiment(cfg, tmp_path / "train", data=fed, resume=tmp_path / "warmup", stages=["train"])
    assert part.history == whole.history
    a, b = (torch.load(d / "model.pt") for d in (tmp_path / "train", tmp_path / "whole"))
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_stage_budgets_follow_the_warmup_length():
    assert [(s.name, s.rounds) for s in build_method(digits_cfg(rounds=4, warmup_rounds=0)).stages] == [("train", 4)]
    assert [(s.name, s.rounds) for s in build_method(digits_cfg(rounds=2, warmup=3)).stages] == [("warmup", 2)]


@pytest.mark.parametrize("switch", ["sieving", "refine", "ema_distill", "rep_reg"])
def test_every_ablation_runs(fed, tmp_path, switch):
    res = run_experiment(digits_cfg(rounds=3, warmup=2, **{switch: False}), tmp_path, data=fed)
    assert np.isfinite(res.summary["final/acc"]) and "noise/rate_pearson" in res.history[-1]



def test_probe_and_sieve_align_losses_posteriors_and_rates_with_the_samples(fed):
    """End to end through probe -> pooled GMM -> per-client q and r_k, with a global model fitted
    to the *true* labels (on weak views, the view the probe scores): the uploaded surrogates must
    rank the truly noisy samples high (they are CE against the given labels, in local order), the
    flagged q < 0.5 samples must be the high-loss end of the pool (the clean component is the
    low-loss one), and each r_k must be mean(1 - q) over that client's own samples. Catches a
    flipped orientation, a misaligned client or sample order, or a surrogate computed against
    the wrong labels."""
    method, state = make_method(fed)
    clients = method.ctx.clients
    aug, gen = method.augmenter(), torch.Generator().manual_seed(0)
    x01 = torch.cat([c.x01() for c in clients])
    y_true = torch.as_tensor(np.concatenate([fed.truth.y_true[np.asarray(i)] for i in fed.client_indices]))
    model = method.model.train()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    for _ in range(20):
        for idx in torch.randperm(len(y_true), generator=gen).split(32):
            x = clients[0].store.normalize(aug.weak(x01[idx], gen))
            loss = torch.nn.functional.cross_entropy(model(x), y_true[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
    oracle = state.replace(params={k: v.detach().clone() for k, v in model.state_dict().items()})
    cids = list(range(len(clients)))
    answers = [method.client_probe(task_for(method, oracle, cid=c, sieve={c: None})) for c in cids]
    sieve = method.after_probe(oracle, RoundPlan("train", cohort=cids, probe=cids), answers).instructions["sieve"]
    lbar = np.concatenate([a.uploads["lbar"] for a in answers])
    q = np.concatenate([np.asarray(sieve[c]["q"]) for c in cids])
    noisy = np.concatenate([fed.truth.is_noisy_sample[np.asarray(fed.client_indices[c])] for c in cids])
    # AUC of the surrogate for "noisy": the share of (noisy, clean) pairs ranked correctly.
    auc = (lbar[noisy][:, None] > lbar[~noisy][None, :]).mean()
    assert auc > 0.85
    flagged = q < 0.5  # the flagged samples are the high-surrogate end of the pool
    assert flagged.any() and not flagged.all()
    assert lbar[flagged].min() > lbar[~flagged].max()
    for c in cids:
        assert len(sieve[c]["q"]) == clients[c].n
        assert sieve[c]["rate"] == pytest.approx(float(np.mean(1.0 - np.asarray(sieve[c]["q"]))))
