"""FedHarmony's spec-v3 readings as a method: round-start scoring with the global model, this
round's teacher, the BCE mask, and the per-round logs (no accuracy claims here)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from fedcore.data.build import build_federated_dataset
from fedcore.engine.types import ClientUpdate
from fedcore.errors import ConfigError
from fedcore.methods.fedharmony import FedHarmonyUpload
from fedcore.stats.correlation import phi_correlation
from fedcore.train.params import get_params, load_params_
from tests.methods.test_fedharmony import _batch, _task, make_method, mosaic_cfg


@pytest.fixture(scope="module")
def fed():
    return build_federated_dataset(mosaic_cfg())


def test_round_start_scoring_uses_the_global_weights(fed):
    method, state = make_method(fed, timing="start")
    plan = method.plan_round(state, 0)
    assert list(plan.probe) == list(plan.cohort) == [0, 1, 2]  # every client of this run trains
    # The model object still holds another client's trained weights; the probe must not score with them.
    with torch.no_grad():
        for p in method.model.parameters():
            p.add_(0.5)
    stale = get_params(method.model)
    task = _task(method, state)
    answer = method.client_probe(task)
    load_params_(method.model, state.params)
    with torch.no_grad():
        expected = phi_correlation(torch.sigmoid(method.model(task.data.x(torch.arange(task.data.n)))).double())
    np.testing.assert_allclose(answer.uploads.corr, expected.numpy(), atol=1e-6)
    load_params_(method.model, stale)
    with torch.no_grad():
        other = phi_correlation(torch.sigmoid(method.model(task.data.x(torch.arange(task.data.n)))).double())
    assert np.abs(other.numpy() - answer.uploads.corr).max() > 1e-3


def test_round_start_teacher_is_used_in_the_same_round(fed):
    method, state = make_method(fed, timing="start", teacher="pooled")
    plan = method.plan_round(state, 0)
    answers = [method.client_probe(_task(method, state) if c == 0 else _probe_task(method, state, c))
               for c in plan.cohort]
    assert all(a.uploads.moments is not None for a in answers)
    plan = method.after_probe(state, plan, answers)
    assert set(plan.instructions.teachers) == {0, 1, 2}  # round 0 already has teachers (v2: none)
    task = _probe_task(method, state, 0, plan.instructions)
    extras = method.before_local(task)
    assert extras["visit"].teacher is not None
    assert {"harmony/grad_ratio", "harmony/ecl_opposing"} <= set(extras["metrics"])
    up = method.finish_local(task, extras, None, {})
    new, metrics = method.server_update(state, plan, [up, *(_upload(method, state, c, plan) for c in (1, 2))])
    assert "harmony/consensus_block_norm" in metrics.scalars and "harmony/weight_eff" in metrics.scalars
    assert set(new.extra["moments"]) == {0, 1, 2}


def _probe_task(method, state, cid, instructions=None):
    task = _task(method, state)
    task.cid, task.data = cid, method.ctx.clients[cid]
    if instructions is not None:
        task.instructions = instructions
    return task


def _upload(method, state, cid, plan):
    return ClientUpdate(cid=cid, num_examples=method.ctx.clients[cid].n, params=state.params,
                        uploads=FedHarmonyUpload(corr=np.eye(10)))


def test_bce_mask_drops_never_annotated_labels_from_the_local_loss(fed):
    method, state = make_method(fed, mask_unannotated=True, consensus=False)
    task = _task(method, state)
    labels = task.data.labels.clone()
    labels[:, 3] = 0  # this client never annotates label 3
    task.data.labels = labels
    extras = method.before_local(task)
    assert extras["visit"].keep.tolist() == [c != 3 for c in range(10)]
    batch = _batch(task)
    method.model.zero_grad()
    x = batch.x.requires_grad_(False)
    logits = method.model(x)
    logits.retain_grad()
    from fedcore.stats.correlation import masked_bce

    masked_bce(logits, batch.y, extras["visit"].keep).backward()
    assert torch.all(logits.grad[:, 3] == 0)
    assert method.loss(method.model, batch, task, extras).item() == pytest.approx(
        masked_bce(logits.detach(), batch.y, extras["visit"].keep).item(), abs=1e-6)


def test_scheduled_lambda_follows_one_minus_alpha(fed):
    method, state = make_method(fed, lam_schedule="caa", lam=2.0)
    assert method.plan_round(state, 0).instructions.lam == 0.0  # alpha(0) = 1
    assert method.plan_round(state.replace(stage_round=1), 1).instructions.lam == pytest.approx(1.0)  # T0 = 2


def test_gap_from_start_needs_round_start_timing(fed):
    with pytest.raises(ConfigError, match="timing: start"):
        make_method(fed, gap_from="start")
