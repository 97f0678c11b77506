"""FedRG as a method: SimCLR pretraining without labels, the personal absorption matrix T,
the ablation switches, and the per-round detection reports (no accuracy claims here)."""

import math

import numpy as np
import pytest
import torch

from fedcore.config import ExperimentConfig
from fedcore.data.build import build_federated_dataset
from fedcore.engine.checkpoint import load_checkpoint
from fedcore.engine.loop import PERSONAL
from fedcore.engine.sampler import client_rngs
from fedcore.engine.store import ClientData, plain_state
from fedcore.engine.types import ClientTask
from fedcore.methods.fedrg import Detection, FedRGInstructions
from fedcore.methods.registry import build_method
from fedcore.run import make_context, run_experiment
from fedcore.train import losses
from fedcore.train.local import Batch


def digits_cfg(pretrain: int = 1, rounds: int = 2, train: dict | None = None, **params) -> ExperimentConfig:
    """Four digits clients with label skew, all noisy (symmetric 0.4, localized), a small MLP."""
    return ExperimentConfig.model_validate({
        "data": {"max_train": 400},
        "partition": {"kind": "dirichlet", "num_clients": 4, "alpha": 0.5},
        "noise": {"type": "symmetric", "scope": "localized", "rate": {"kind": "fixed", "value": 0.4}},
        "model": {"name": "mlp", "width": 32},
        "train": {"rounds": rounds, "stage_rounds": {"pretrain": pretrain}, "device": "cpu", "batch_size": 32,
                  **(train or {})},
        "method": {"name": "fedrg", "params": {"ssl_temperature": 0.5, "proj_dim": 16, **params}},
    })


@pytest.fixture(scope="module")
def fed():
    return build_federated_dataset(digits_cfg())


def make_method(fed, train=None, **params):
    cfg = digits_cfg(train=train, **params)
    method = build_method(cfg)
    return method, method.init(make_context(cfg, fed, torch.device("cpu")))


def task_for(method, state, data=None, stage="train", cid=0, rnd=3, cstate=None):
    rng, gen = client_rngs(0, rnd, cid)
    return ClientTask(cid=cid, params=state.params, data=data or method.ctx.clients[cid],
                      instructions=FedRGInstructions(), state=plain_state(cstate) if cstate else {}, rng=rng,
                      gen=gen, rnd=rnd, stage=stage)


class LabelGuard(ClientData):
    """A client view whose labels raise on access: proves a stage never reads them."""

    @property
    def labels(self):
        raise AssertionError("labels were read")

    @labels.setter
    def labels(self, value):
        self._hidden = value


def test_stages_and_personal_keys_follow_the_switches(fed):
    method, _ = make_method(fed)
    assert [(s.name, s.rounds, s.evaluate) for s in method.stages] == [("pretrain", 1, False), ("train", 2, True)]
    assert method.personal_keys == ("absorption.",)
    assert [s.name for s in make_method(fed, ssl_pretrain=False)[0].stages] == ["train"]
    assert make_method(fed, absorption="global")[0].personal_keys == ()
    assert make_method(fed, absorption="off")[0].personal_keys == ()


def test_pretrain_never_touches_labels(fed):
    method, state = make_method(fed)
    src = method.ctx.clients[0]
    guarded = LabelGuard(0, src.store, src.indices.numpy(), torch.zeros(src.n, dtype=torch.long))
    before = {k: v.clone() for k, v in state.params.items()}
    update = method.client_update(task_for(method, state, guarded, stage="pretrain"))
    assert update.metrics["train/steps"] > 0
    changed = {k for k in before if not torch.equal(before[k], update.params[k])}
    assert any(k.startswith("net.backbone.") for k in changed) and any(k.startswith("projector.") for k in changed)
    assert not any(k.startswith(("net.classifier.", "absorption.")) for k in changed)
    with pytest.raises(AssertionError, match="labels were read"):  # the guard does bite in `train`
        method.client_update(task_for(method, state, guarded, stage="train"))


def test_simclr_loss_is_lower_for_aligned_views_than_shuffled(fed):
    method, state = make_method(fed, train={"local_steps": 60})
    model, data = method.model, method.ctx.clients[0]
    method.client_update(task_for(method, state, stage="pretrain"))  # leaves the trained weights in `model`
    x01 = data.x01(torch.arange(min(64, data.n)))
    v1, v2 = method.augmenter().simclr_views(x01, torch.Generator().manual_seed(0))
    with torch.no_grad():
        p1, p2 = (model.projector(model.features(method.ctx.store.normalize(v))) for v in (v1, v2))
    perm = torch.roll(torch.arange(len(x01)), 1)  # every sample paired with another one
    aligned, shuffled = losses.nt_xent(p1, p2, 0.5), losses.nt_xent(p1, p2[perm], 0.5)
    assert aligned < shuffled - 0.5


def test_loss_composition_by_switch(fed):
    pos = torch.arange(16)
    for params in ({}, {"absorption": "off"}, {"loss": "ce"}, {"sce_on": "clean"}):
        method, state = make_method(fed, **params)
        task = task_for(method, state)
        y = task.data.labels[pos]
        batch = Batch(pos=pos, x=task.data.x(pos), y=y)
        with torch.no_grad():
            method.model.absorption.T.copy_(torch.full((10, 10), 0.1))  # anything but the identity
            noisy = torch.zeros(task.data.n, dtype=torch.bool)
            noisy[:8] = True
            got = method.loss(method.model, batch, task, {"detection": Detection(noisy)})
            logits = method.model(batch.x)
            keep = slice(8, None) if params.get("sce_on") == "clean" else slice(None)  # the unflagged half
            main = (losses.ce if params.get("loss") == "ce" else losses.sce)(logits[keep], y[keep])
            t = torch.eye(10) if params.get("absorption") == "off" else method.model.absorption.T
            want = 0.4 * main + losses.forward_corrected_nll(logits[:8], y[:8], t)
        assert float(got) == pytest.approx(float(want), rel=1e-6)


def test_T_has_its_own_group_without_weight_decay(fed):
    method, state = make_method(fed, t_lr_scale=0.1)
    opt = method.local_optimizer(task_for(method, state))
    t_group = [g for g in opt.param_groups if any(p is method.model.absorption.T for p in g["params"])]
    assert len(t_group) == 1 and t_group[0]["weight_decay"] == 0.0
    assert t_group[0]["lr"] == pytest.approx(0.1 * 0.05)  # t_lr_scale x train.lr
    assert all(g["weight_decay"] == 5e-4 for g in opt.param_groups if g is not t_group[0])
    off, off_state = make_method(fed, absorption="off")
    opt = off.local_optimizer(task_for(off, off_state))
    assert not any(p is off.model.absorption.T for g in opt.param_groups for p in g["params"])


def test_projection_keeps_T_row_stochastic():
    from fedcore.methods.fedrg import Absorption

    a = Absorption(4)
    with torch.no_grad():
        a.T.copy_(torch.randn(4, 4, generator=torch.Generator().manual_seed(0)))
    a.project_(1e-6)
    t = a.T.detach()
    assert torch.allclose(t.sum(1), torch.ones(4)) and float(t.min()) >= 1e-6 / 4


@pytest.fixture(scope="module")
def run_on(fed, tmp_path_factory):
    cache = {}

    def run(**params):
        key = tuple(sorted(params.items()))
        if key not in cache:
            out = tmp_path_factory.mktemp("fedrg")
            result = run_experiment(digits_cfg(**params), out, data=fed)
            cache[key] = result, load_checkpoint(out / "checkpoints" / "stage-train.pt")
        return cache[key]

    return run


def test_personal_T_is_trained_row_stochastic_and_never_aggregated(run_on):
    result, ckpt = run_on()
    personal = [c[PERSONAL]["absorption.T"] for c in ckpt["clients"]]
    for t in personal:
        assert torch.allclose(t.sum(1), torch.ones(10), atol=1e-5) and float(t.min()) > 0
        assert float((t - torch.eye(10)).abs().max()) > 1e-4  # it was trained ...
    assert torch.equal(result.state.params["absorption.T"], torch.eye(10))  # ... but the server never saw it
    assert not torch.allclose(personal[0], personal[1])


def test_global_absorption_is_averaged(run_on):
    result, ckpt = run_on(absorption="global")
    t = result.state.params["absorption.T"]
    assert all(PERSONAL not in c for c in ckpt["clients"])
    assert float((t - torch.eye(10)).abs().max()) > 1e-4 and torch.allclose(t.sum(1), torch.ones(10), atol=1e-5)


def test_rounds_report_both_detectors_and_mean_diag(run_on, fed):
    result, ckpt = run_on()
    pre = [r for r in result.history if r["stage"] == "pretrain"]
    train = [r for r in result.history if r["stage"] == "train"]
    assert pre and all("test/acc" not in r and "detect/sample_f1" not in r for r in pre)
    for r in train:
        for key in ("detect/sample_f1", "detect/small_loss/sample_f1", "absorption/diag_mean", "test/acc"):
            assert np.isfinite(r[key]), key
        assert 0.0 < r["absorption/diag_mean"] <= 1.0
    for c, cstate in enumerate(ckpt["clients"]):
        assert len(cstate["clean"]) == len(fed.client_indices[c])  # one split over the whole local set
        assert cstate["B"].shape == (10, 10) and np.allclose(cstate["B"].sum(1), 1.0)
        assert cstate["mix"]["mu"].shape == (10, 32)


@pytest.mark.parametrize("kappa_max", [3.0, 100.0])
def test_kappa_clamp_reaches_the_mixture(fed, kappa_max):
    method, state = make_method(fed, kappa_max=kappa_max)
    out = method.detect(task_for(method, state))
    kappa = out.state.mix.kappa
    assert kappa.shape == (10,) and float(kappa.max()) <= kappa_max and float(kappa.min()) >= 0.5
    if kappa_max == 3.0:  # 32-d MLP features concentrate well past 3, so the clamp binds
        assert np.allclose(kappa, 3.0)


def test_sce_on_clean_feeds_only_the_unflagged_samples_to_sce(fed):
    pos = torch.arange(16)
    method, state = make_method(fed, sce_on="clean", lambda_n=0.0)
    task = task_for(method, state)
    batch = Batch(pos=pos, x=task.data.x(pos), y=task.data.labels[pos])
    noisy = torch.zeros(task.data.n, dtype=torch.bool)
    noisy[:16] = True  # every sample of the batch flagged: nothing left for SCE
    loss = method.loss(method.model, batch, task, {"detection": Detection(noisy)})
    assert float(loss.detach()) == 0.0
    grads = torch.autograd.grad(loss, list(method.model.net.parameters()), allow_unused=True)
    assert all(g is None or float(g.abs().max()) == 0.0 for g in grads)
    every, _ = make_method(fed, lambda_n=0.0)  # sce_on=all: the same batch trains on all of it
    assert float(every.loss(method.model, batch, task, {"detection": Detection(noisy)}).detach()) > 0.0


def test_t_init_estimate_sets_T_once_from_the_flagged_predictions(fed):
    from fedcore.stats.transition import estimate_transition

    method, state = make_method(fed, t_init="estimate", t_prior=2.0)
    first = method.detect(task_for(method, state))  # train round 0: a random head, T untouched
    assert torch.equal(method.model.absorption.T, torch.eye(10)) and first.state.t_init is None
    task = task_for(method, state, cstate=first.state)
    task.instructions = FedRGInstructions(train_round=1)
    _, _, _, logits = method.embed(task_for(method, state, cstate=first.state))
    out = method.detect(task)
    mask = out.noisy
    want = estimate_transition(torch.softmax(logits[mask].double(), 1).numpy(), task.data.labels[mask].numpy(),
                               10, prior=2.0)
    np.testing.assert_allclose(method.model.absorption.T.detach().numpy(), want, atol=1e-6)
    assert out.state.t_init == task.rnd and float(torch.diagonal(method.model.absorption.T.detach()).mean()) < 1.0
    with torch.no_grad():
        method.model.absorption.T.copy_(torch.eye(10))
    later = task_for(method, state, cstate=out.state)
    later.instructions = FedRGInstructions(train_round=2)
    method.detect(later)  # set once: a trained T is never overwritten
    assert torch.equal(method.model.absorption.T, torch.eye(10))
    off, off_state = make_method(fed, t_init="estimate", absorption="off")
    task = task_for(off, off_state)
    task.instructions = FedRGInstructions(train_round=1)
    off.detect(task)
    assert torch.equal(off.model.absorption.T, torch.eye(10))


def test_train_rounds_tell_clients_the_train_round(fed):
    method, state = make_method(fed)
    assert method.plan_round(state.replace(stage="pretrain"), 0).instructions == FedRGInstructions()
    assert method.plan_round(state.replace(stage="train", stage_round=3), 5).instructions == \
        FedRGInstructions(train_round=3)


def test_posterior_score_runs_and_keeps_counts(run_on):
    result, ckpt = run_on(score="posterior", t_init="estimate", sce_on="clean")
    train = [r for r in result.history if r["stage"] == "train"]
    assert all(np.isfinite(r["detect/sample_f1"]) for r in train)
    for cstate in ckpt["clients"]:
        assert cstate["counts"].shape == (10, 10) and float(cstate["counts"].min()) >= 0.5  # eta smoothing
        assert cstate["t_init"] is not None  # every client was visited in the second train round


@pytest.mark.parametrize("log_zero", [None, math.log(1e-4)])
def test_sce_log_zero_reaches_the_main_loss(fed, log_zero):
    # Uniform logits over 10 classes: p_y = 0.1, CE = log 10, RCE = -A (1 - p_y).
    method, _ = make_method(fed, **({} if log_zero is None else {"sce_log_zero": log_zero}))
    got = method.main_loss(torch.zeros(3, 10), torch.tensor([0, 4, 9]), None)
    a = -4.0 if log_zero is None else math.log(1e-4)  # the SCE paper's A | the authors' code's one-hot clamp
    assert float(got) == pytest.approx(0.1 * math.log(10) - a * 0.9, rel=1e-6)
