"""FedGR as a method: every ablation switch changes the loss, R vanishes when local == global,
the warm-up and the lagged sieve flow, the promised metrics, no ground truth, and a clean-label
sanity bound against FedAvg (no accuracy claims on noisy labels here)."""

import dataclasses

import numpy as np
import pytest
import torch

from fedcore.config import ExperimentConfig
from fedcore.data.build import build_federated_dataset
from fedcore.data.federated import GroundTruth
from fedcore.engine.sampler import client_rngs
from fedcore.engine.types import ClientTask, ClientUpdate, RoundPlan, ServerState
from fedcore.methods.fedgr import FedGRInstructions, FedGRUpload, SieveVerdict
from fedcore.methods.registry import build_method
from fedcore.run import make_context, run_experiment
from fedcore.train.local import Batch


def digits_cfg(rounds: int = 4, warmup: int = 2, **params) -> ExperimentConfig:
    """Six digits clients, all noisy with symmetric U(0.3, 0.9) noise, a small MLP; FedGR's
    warm-up is `warmup` rounds (every client trains every round)."""
    return ExperimentConfig.model_validate({
        "data": {"max_train": 600},
        "partition": {"kind": "dirichlet", "num_clients": 6, "alpha": 1.0},
        "noise": {"type": "symmetric", "rate": {"kind": "uniform", "min": 0.3, "max": 0.9}},
        "model": {"name": "mlp", "width": 16},
        "train": {"rounds": rounds, "device": "cpu", "batch_size": 32},
        "method": {"name": "fedgr", "params": {"warmup_rounds": warmup, **params}},
    })


@pytest.fixture(scope="module")
def fed():
    return build_federated_dataset(digits_cfg())


def make_method(fed, **params):
    cfg = digits_cfg(**params)
    method = build_method(cfg)
    state = method.init(make_context(cfg, fed, torch.device("cpu")))
    return method, state


def task_for(method, state, cid=0, rnd=5, sieve=None, cstate=None):
    """A post-warm-up task with fresh generators, so repeated calls draw the same views."""
    rng, gen = client_rngs(0, rnd, cid)
    n = method.ctx.clients[cid].n
    sieve = sieve or {cid: SieveVerdict(np.linspace(0.0, 1.0, n), 0.2)}
    return ClientTask(cid=cid, params=state.params, data=method.ctx.clients[cid], instructions=FedGRInstructions(sieve),
                      state=dict(cstate or {}), rng=rng, gen=gen, rnd=rnd, stage="train")


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


def test_embedding_kl_is_zero_when_local_equals_global(fed):
    # With one view for both sides (8x8 digits: plain views), R compares the student's and
    # the frozen global backbone's embeddings of the same inputs.
    method, state = make_method(fed)
    assert method.views == "plain"
    _, terms = objective(method, state, perturb=0.0)
    assert terms["r"] == pytest.approx(0.0, abs=1e-7)
    _, moved = objective(method, state, perturb=0.05)
    assert moved["r"] > 1e-6
    strong, state_s = make_method(fed, views="strong")  # student on the strong view: R > 0 already
    assert objective(strong, state_s, perturb=0.0)[1]["r"] > 1e-6


@pytest.mark.parametrize(("switch", "term", "weight"), [("ema_distill", "b", "lambda_b"), ("rep_reg", "r", "lambda_r")])
def test_regularizer_switch_removes_exactly_its_term(fed, switch, term, weight):
    full, terms = objective(*make_method(fed, views="strong"))
    off, off_terms = objective(*make_method(fed, views="strong", **{switch: False}))
    assert term in terms and term not in off_terms
    assert terms[term] > 0 and off != pytest.approx(full)
    # Same views and targets otherwise: the totals differ by exactly lambda * term.
    lam = getattr(make_method(fed)[0].params, weight)
    assert full - off == pytest.approx(lam * terms[term], rel=1e-4)


def test_refine_switch_changes_the_self_training_term(fed):
    # The first 16 samples are all flagged (q < .5): without a cached label they weigh q when
    # refining, and nothing when only GMM-clean samples count.
    on, on_terms = objective(*make_method(fed))
    off, off_terms = objective(*make_method(fed, refine=False))
    assert on_terms["sr"] > off_terms["sr"] and on != pytest.approx(off)


def test_sieving_switch_fits_per_client_mixtures_and_changes_the_loss(fed):
    rng = np.random.default_rng(0)
    n0, n1 = (make_method(fed)[0].ctx.clients[c].n for c in (0, 1))
    # Client 0 uploads small surrogates only, client 1 a clean half and a noisy half.
    ups = [ClientUpdate(cid=0, num_examples=n0, uploads=FedGRUpload(lbar=rng.normal(0.2, 0.05, n0))),
           ClientUpdate(cid=1, num_examples=n1, uploads=FedGRUpload(lbar=np.r_[rng.normal(0.2, 0.05, n1 - n1 // 2),
                                                                           rng.normal(3.0, 0.1, n1 // 2)]))]
    losses = {}
    for sieving in (True, False):
        method, state = make_method(fed, sieving=sieving)
        plan = RoundPlan("train", cohort=[0, 1], instructions=FedGRInstructions())
        extra, _ = method.summarize(state, plan, ups, state.params)
        sieve = extra["sieve"]
        losses[sieving] = objective(method, state, sieve={0: sieve[0]})[0]
        if sieving:
            assert sieve[0].rate == 0.0 and sieve[1].rate == pytest.approx((n1 // 2) / n1)
        else:  # alone, client 0's GMM splits its own clean losses and flags some of them
            assert sieve[0].rate > 0.0
    assert losses[True] != pytest.approx(losses[False])


def test_warmup_is_ce_on_given_labels_plus_r_and_no_sieve_is_used(fed):
    method, state = make_method(fed, warmup=3, views="strong")
    assert method.alpha == 3 and all(method.plan_round(state, r).probe is None for r in range(5))
    rng, gen = client_rngs(0, 0, 0)
    task = ClientTask(0, state.params, method.ctx.clients[0], FedGRInstructions(), {}, rng, gen, 0, "train")
    extras = method.before_local(task)
    visit = extras["visit"]
    assert visit.warmup and visit.targets is None and visit.teacher is None
    assert visit.uploads.lbar.shape == (task.data.n,)  # the surrogate is observed from round 0
    pos = torch.arange(8)
    batch = Batch(pos=pos, x=method.make_x(task)(pos), y=task.data.labels[pos])
    terms = method.loss_terms(method.model, batch, extras)
    assert set(terms) == {"sr", "r"}  # the authors' code keeps R on in the warm-up
    logits = method.model(batch.x[8:]).detach()  # the student's view follows the weak one
    assert terms["sr"].item() == pytest.approx(float(torch.nn.functional.cross_entropy(logits, batch.y)), rel=1e-5)
    plain, state_p = make_method(fed, warmup=3, warmup_rep_reg=False)
    assert set(plain.loss_terms(plain.model, Batch(pos, plain.make_x(task)(pos), batch.y),
                                plain.before_local(task))) == {"sr"}


def test_lagged_sieve_reaches_the_clients_at_their_next_visit(fed, tmp_path):
    res = run_experiment(digits_cfg(rounds=4, warmup=2), tmp_path, data=fed)
    # Fitted every round from round 0 on (the surrogates of the warm-up count), so the first
    # post-warm-up round already trains with a sieve.
    assert all("noise/rate_pearson" in h for h in res.history)
    assert all("refine/tier_high_share" not in h for h in res.history[:2])
    assert all("refine/tier_high_share" in h for h in res.history[2:])
    method, state = make_method(fed)
    plan = method.plan_round(res.state, 4)
    assert plan.probe is None and set(plan.instructions.sieve) == set(range(6))


def test_probe_mode_scores_and_trains_on_the_same_round_view(fed):
    method, state = make_method(fed, sieve_timing="probe", surrogate_view="weak", t_obs=5)
    assert method.plan_round(state, 1).probe is None and list(method.plan_round(state, 2).probe) == list(range(6))
    probe = method.client_probe(task_for(method, state, sieve={0: None}))
    extras = method.before_local(task_for(method, state))
    np.testing.assert_allclose(probe.uploads.lbar, extras["visit"].state.window[:, 0])
    assert extras["visit"].uploads.lbar is None  # probed, not uploaded again


def test_short_run_reports_the_promised_metrics(fed, tmp_path):
    cfg = digits_cfg(rounds=4, warmup=2)
    cfg = cfg.model_copy(update={"train": cfg.train.model_copy(update={"local_memorization": True})})
    res = run_experiment(cfg, tmp_path, data=fed)
    # the warm-up is a task of its own (it already fits the sieve: spec v2 observes from round 0)
    assert [h["stage"] for h in res.history] == ["warmup"] * 2 + ["train"] * 2
    for h in res.history[2:]:
        for key in ("noise/rate_pearson", "noise/rate_mae", "detect/sample_f1", "detect/sample_label_nmi",
                    "refine/tier_high_share", "refine/tier_high_clients", "refine/cache_coverage",
                    "refine/skipped_share", "fedgr/gmm_mu_clean", "fedgr/gmm_mu_noisy", "train/memorization",
                    "train/local_memorization", "test/acc"):
            assert np.isfinite(h[key]), key
        assert "refine/confident_share" in h
        assert sum(k.startswith("noise/rate_est/client_") for k in h) == 6
        assert sum(k.startswith("train/local_memorization/client_") for k in h) == 6
        assert h["fedgr/gmm_mu_clean"] < h["fedgr/gmm_mu_noisy"]
    assert isinstance(res.state, ServerState) and set(res.state.extra["sieve"]) == set(range(6))


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
    # never under one pass (6 clients, all every round: one round), so every client is sieved
    assert [(s.name, s.rounds) for s in build_method(digits_cfg(rounds=4, warmup_rounds=0)).stages] == \
        [("warmup", 1), ("train", 3)]
    assert [(s.name, s.rounds) for s in build_method(digits_cfg(rounds=4, warmup=3)).stages] == \
        [("warmup", 3), ("train", 1)]
    assert [(s.name, s.rounds) for s in build_method(digits_cfg(rounds=2, warmup=3)).stages] == [("warmup", 2)]


@pytest.mark.parametrize("switch", ["sieving", "refine", "ema_distill", "rep_reg"])
def test_every_ablation_runs(fed, tmp_path, switch):
    res = run_experiment(digits_cfg(rounds=3, warmup=2, **{switch: False}), tmp_path, data=fed)
    assert np.isfinite(res.summary["final/acc"]) and "noise/rate_pearson" in res.history[-1]


def test_classwise_sieve_variant_uploads_given_labels_and_runs(fed, tmp_path):
    res = run_experiment(digits_cfg(rounds=3, warmup=1, sieve_by="class"), tmp_path, data=fed)
    assert np.isfinite(res.summary["final/acc"]) and "fedgr/gmm_mu_clean" in res.history[-1]
    pooled = run_experiment(digits_cfg(rounds=3, warmup=1), tmp_path / "pooled", data=fed)
    assert res.history[-1]["detect/sample_f1"] != pooled.history[-1]["detect/sample_f1"]


def test_training_never_depends_on_the_ground_truth(fed, tmp_path):
    # Same artifact with the truth scrambled: the metrics that read it change, training does not.
    rng = np.random.default_rng(0)
    t = fed.truth
    fake = GroundTruth(**{**{f.name: getattr(t, f.name) for f in dataclasses.fields(t)},
                          "y_true": rng.permutation(t.y_true), "is_noisy_sample": rng.permutation(t.is_noisy_sample)})
    runs = [run_experiment(digits_cfg(rounds=3, warmup=1), tmp_path / name, data=dataclasses.replace(fed, truth=tr))
            for name, tr in (("real", t), ("fake", fake))]
    assert [h["test/acc"] for h in runs[0].history] == [h["test/acc"] for h in runs[1].history]
    for k, v in runs[0].state.params.items():
        assert torch.equal(v, runs[1].state.params[k]), k
    assert runs[0].history[-1]["detect/sample_f1"] != runs[1].history[-1]["detect/sample_f1"]


def test_probe_and_sieve_align_losses_posteriors_and_rates_with_the_samples(fed):
    """End to end through probe -> pooled GMM -> per-client q and r_k, with a global model fitted
    to the *true* labels: the uploaded surrogates must rank the truly noisy samples high (they are
    CE against the given labels, in local order), the flagged q < 0.5 samples must be the high-loss
    end of the pool (the clean component is the low-loss one), and each r_k must be the share of
    q < 0.5 over that client's own samples. Catches a flipped orientation, a misaligned client or
    sample order, or a surrogate computed against the wrong labels."""
    method, state = make_method(fed, sieve_timing="probe")
    clients = method.ctx.clients
    gen = torch.Generator().manual_seed(0)
    x = torch.cat([c.x() for c in clients])
    y_true = torch.as_tensor(np.concatenate([fed.truth.y_true[np.asarray(i)] for i in fed.client_indices]))
    model = method.model.train()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    for _ in range(20):
        for idx in torch.randperm(len(y_true), generator=gen).split(32):
            loss = torch.nn.functional.cross_entropy(model(x[idx]), y_true[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
    oracle = state.replace(params={k: v.detach().clone() for k, v in model.state_dict().items()})
    cids = list(range(len(clients)))
    answers = [method.client_probe(task_for(method, oracle, cid=c, sieve={c: None})) for c in cids]
    plan = RoundPlan("train", cohort=cids, instructions=FedGRInstructions(), probe=cids)
    sieve = method.after_probe(oracle, plan, answers).instructions.sieve
    lbar = np.concatenate([a.uploads.lbar for a in answers])
    q = np.concatenate([np.asarray(sieve[c].q) for c in cids])
    noisy = np.concatenate([fed.truth.is_noisy_sample[np.asarray(fed.client_indices[c])] for c in cids])
    auc = (lbar[noisy][:, None] > lbar[~noisy][None, :]).mean()
    assert auc > 0.85
    flagged = q < 0.5
    assert flagged.any() and not flagged.all()
    assert lbar[flagged].min() > lbar[~flagged].max()
    for c in cids:
        assert len(sieve[c].q) == clients[c].n
        assert sieve[c].rate == pytest.approx(float(np.mean(np.asarray(sieve[c].q) < 0.5)))


@pytest.mark.slow
def test_clean_digits_fedgr_stays_near_fedavg(tmp_path):
    """A sanity bound, not an accuracy claim: on clean labels the sieve must not wreck training."""
    base = {"partition": {"kind": "dirichlet", "num_clients": 10, "alpha": 0.5}, "noise": {"type": "none"},
            "model": {"name": "mlp"}, "train": {"rounds": 15, "local_epochs": 2, "device": "cpu", "lr": 0.05}}
    cfgs = {m: ExperimentConfig.model_validate({**base, "method": {"name": m, "params": p}})
            for m, p in (("fedavg", {}), ("fedgr", {"warmup_passes": 5}))}
    data = build_federated_dataset(cfgs["fedavg"])
    acc = {m: run_experiment(c, tmp_path / m, data=data).summary["final/acc_last10"] for m, c in cfgs.items()}
    assert acc["fedgr"] >= acc["fedavg"] - 0.05, acc


def test_distill_on_weighted_weighs_b_as_the_refined_ce(fed):
    # refine=False selects the GMM-clean samples: with q alternating 0 / 1 the even positions
    # weigh 0, so `weighted` B is the per-sample KL of the odd ones over the whole batch.
    from fedcore.train import losses

    rows = {}
    for on in ("all", "weighted"):
        method, state = make_method(fed, refine=False, distill_on=on)
        n = method.ctx.clients[0].n
        task = task_for(method, state, sieve={0: SieveVerdict((np.arange(n) % 2).astype(float), 0.5)})
        extras = method.before_local(task)
        pos = torch.arange(16)
        batch = Batch(pos=pos, x=method.make_x(task)(pos), y=task.data.labels[pos])
        with torch.no_grad():
            for p in method.model.parameters():  # the student away from its teacher (w^t here)
                p.add_(0.05)
            teacher = extras["visit"].teacher[pos]
            per = losses.kd_kl(method.model(batch.x), teacher, T=method.params.tau, reduction="none")
            rows[on] = (float(method.loss_terms(method.model, batch, extras)["b"]), per)
    per = rows["all"][1]
    assert torch.equal(per, rows["weighted"][1]) and float(per[0::2].sum()) > 0  # same views, same teacher
    assert rows["all"][0] == pytest.approx(float(per.mean()), rel=1e-5)
    assert rows["weighted"][0] == pytest.approx(float(per[1::2].sum()) / 16, rel=1e-5)


def test_soft_q_batch_weighs_every_sample_by_the_batch_mean_and_runs(fed, tmp_path):
    # With one q for every sample, the authors' broadcast (soft_q=batch) changes nothing; with
    # q spread over the samples (task_for's default linspace) it changes the self-training term.
    method, state = make_method(fed)
    flat = {0: SieveVerdict(np.full(method.ctx.clients[0].n, 0.3), 0.2)}
    _, per = objective(method, state, sieve=flat)
    _, bat = objective(*make_method(fed, soft_q="batch"), sieve=flat)
    assert bat["sr"] == pytest.approx(per["sr"], rel=1e-6)
    _, per = objective(*make_method(fed))
    _, bat = objective(*make_method(fed, soft_q="batch"))
    assert bat["sr"] != pytest.approx(per["sr"], rel=1e-3)
    res = run_experiment(digits_cfg(rounds=3, warmup=2, soft_q="batch"), tmp_path, data=fed)
    assert np.isfinite(res.summary["final/acc"])
