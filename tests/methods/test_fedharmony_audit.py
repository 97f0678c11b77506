"""FedHarmony audit against the spec: the alignment gradient reaches the model through the
mini-batch R_k, the uploaded R_k is the phi of the sigmoid scores on all local data, and CAA
mixes sample-count and quality weights by alpha(t) = 1 - t / T0 halfway to T0."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from fedcore.methods.fedharmony import FedHarmonyVisit
from fedcore.stats.correlation import phi_correlation
from fedcore.train.local import predict_client
from tests.methods.test_fedharmony import TRAIN_PLAN, _batch, _task, fake_updates, fed, make_method  # noqa: F401


def _grads(method, batch, task, extras):
    method.model.zero_grad(set_to_none=True)
    method.loss(method.model, batch, task, extras).backward()
    return torch.cat([p.grad.flatten() for p in method.model.parameters() if p.grad is not None])


def test_alignment_gradient_flows_through_the_batch_correlation(fed):  # noqa: F811
    method, state = make_method(fed, blocks=False)
    plain_task = _task(method, state)
    batch = _batch(plain_task)
    plain = _grads(method, batch, plain_task, {"visit": FedHarmonyVisit()})
    task = _task(method, state, teacher=np.full((10, 10), 0.5))
    aligned = _grads(method, batch, task, method.before_local(task))
    assert torch.isfinite(aligned).all()
    assert (aligned - plain).abs().sum() > 1e-3  # the term is not a constant: R_k is not detached


def test_uploaded_correlation_is_phi_of_sigmoid_scores_on_all_local_data(fed):  # noqa: F811
    method, state = make_method(fed)
    up = method.client_update(_task(method, state))
    probs = torch.sigmoid(predict_client(method.model, method.ctx.clients[0]))
    assert len(probs) == method.ctx.clients[0].n
    np.testing.assert_allclose(up.uploads.corr, phi_correlation(probs.double(), eps=1e-6).numpy(), atol=1e-6)


def test_caa_mixes_by_alpha_halfway_to_t0(fed):  # noqa: F811
    method, state = make_method(fed)  # rounds 4 -> T0 = 2
    ups = fake_updates(state, sizes=(100, 100, 200))  # client k's params are global + k
    key = next(k for k, v in state.params.items() if v.is_floating_point())

    def shift(stage_round: int) -> tuple[float, float]:  # sum_k w_k * k, and alpha
        new, m = method.server_update(state.replace(stage_round=stage_round), TRAIN_PLAN, ups)
        return float((new.params[key] - state.params[key]).flatten()[0]), m.scalars["harmony/alpha"]

    (s_n, a_n), (s_half, a_half), (s_q, a_q) = shift(0), shift(1), shift(2)
    assert (a_n, a_half, a_q) == (1.0, 0.5, 0.0)
    assert s_n == pytest.approx(1 * 0.25 + 2 * 0.5)  # alpha 1: sample-count weights
    assert s_q != pytest.approx(s_n, abs=1e-3)  # alpha 0: quality weights differ
    assert s_half == pytest.approx(0.5 * s_n + 0.5 * s_q, abs=1e-5)  # linear in alpha
