"""FedHarmony's v2 alignment term (spec fedharmony.md, v2 notes): R_k from the whole local set,
refreshed by each batch, and the per-entry scale; the spec-v1 form stays one param away."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from fedcore.stats.correlation import alignment_gap, block_mask, phi_correlation
from fedcore.train.local import predict_client
from tests.methods.test_fedharmony import _batch, _task, fed, make_method  # noqa: F401

TEACHER = np.full((10, 10), 0.4)


def test_defaults_are_the_whole_set_estimate_and_the_per_entry_scale(fed):  # noqa: F811
    method, _ = make_method(fed)
    assert (method.params.estimate, method.params.scale) == ("whole", "entry")


def test_whole_set_loss_is_bce_plus_the_mean_gap_of_every_local_sample(fed):  # noqa: F811
    method, state = make_method(fed, blocks=False, lam=2.0)
    task = _task(method, state, teacher=TEACHER)
    extras = method.before_local(task)
    probs = torch.sigmoid(predict_client(method.model, task.data)).double()
    torch.testing.assert_close(extras["visit"].table, probs)  # scored at the round start
    batch = _batch(task)
    with torch.no_grad():
        bce = method.base_loss(method.model(batch.x), batch.y).item()
    loss = method.loss(method.model, batch, task, extras).item()
    # The model has not moved, so the refreshed table is the whole local set's scores.
    gap = alignment_gap(phi_correlation(probs), torch.as_tensor(TEACHER), torch.as_tensor(block_mask(None, 10)))
    assert loss == pytest.approx(bce + 2.0 * gap.item() / 90, rel=1e-5)


def test_each_step_writes_its_batch_rows_back_into_the_table(fed):  # noqa: F811
    method, state = make_method(fed)
    task = _task(method, state, teacher=TEACHER)
    extras = method.before_local(task)
    start = extras["visit"].table.clone()
    with torch.no_grad():  # move the model so the batch's scores differ from the round start
        for p in method.model.parameters():
            p.add_(0.05)
    batch = _batch(task)
    method.loss(method.model, batch, task, extras)
    now = torch.sigmoid(method.model(batch.x)).double().detach()
    torch.testing.assert_close(extras["visit"].table[batch.pos], now)
    rest = torch.ones(len(start), dtype=torch.bool)
    rest[batch.pos] = False
    torch.testing.assert_close(extras["visit"].table[rest], start[rest])  # rows not visited keep their scores


def test_the_whole_set_gradient_is_scaled_to_n_over_b(fed):  # noqa: F811
    # The alignment gradient of one step is n / B times its share of the whole-set gradient:
    # with lam = 0 vs 1, the difference equals (n / B) * d gap(phi(all scores)) / d theta via the batch rows.
    method, state = make_method(fed, blocks=False)
    task = _task(method, state, teacher=TEACHER)
    batch = _batch(task)
    n = task.data.n

    def grads(lam):
        method.params = method.params.model_copy(update={"lam": lam})
        extras = method.before_local(task)
        method.model.zero_grad(set_to_none=True)
        method.loss(method.model, batch, task, extras).backward()
        return torch.cat([p.grad.flatten() for p in method.model.parameters()])

    align = grads(1.0) - grads(0.0)
    # Reference: whole-set gap with the batch rows as the only differentiable ones, times n / B.
    method.model.zero_grad(set_to_none=True)
    table = torch.sigmoid(predict_client(method.model, task.data)).double()
    method.model.train()
    rows = torch.sigmoid(method.model(batch.x)).double()
    full = table.clone().index_put((batch.pos,), rows)
    ref_gap = alignment_gap(phi_correlation(full, eps=1e-6), torch.as_tensor(TEACHER),
                            torch.as_tensor(block_mask(None, 10)), per_entry=True)
    (ref_gap * n / len(batch.pos)).backward()
    ref = torch.cat([p.grad.flatten() for p in method.model.parameters()])
    torch.testing.assert_close(align.double(), ref.double(), rtol=1e-3, atol=1e-7)
