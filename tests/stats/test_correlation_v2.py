"""v2 of the alignment maths (spec fedharmony.md, v2 notes): the whole-set correlation estimate
refreshed per batch, its gradient scaling, per-entry scaling, and the premise check."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from fedcore.stats.correlation import (
    alignment_gap,
    block_mask,
    offdiag_distance,
    phi_correlation,
    premise_distances,
    refreshed_phi,
    scale_grad,
)


def test_refreshed_phi_is_the_phi_of_the_table_with_the_batch_rows_replaced():
    gen = torch.Generator().manual_seed(0)
    table = torch.rand(50, 4, generator=gen, dtype=torch.float64)
    pos, rows = torch.tensor([3, 7, 11]), torch.rand(3, 4, generator=gen, dtype=torch.float64)
    expected = table.clone()
    expected[pos] = rows
    np.testing.assert_allclose(refreshed_phi(table, pos, rows).numpy(), phi_correlation(expected).numpy())
    assert not torch.equal(table[pos], rows)  # the caller's table is left alone


@pytest.mark.parametrize("n", [640, 6400])
def test_whole_set_estimate_converges_to_the_population_where_the_batch_one_does_not(n):
    # Prepare: 8 independent Bernoulli(0.3) labels, so the population phi is the identity.
    # An estimate from m samples has E ||R - I||^2 (off-diagonal) = 56 / m to first order.
    rng = np.random.default_rng(n)
    truth, pos = np.eye(8), torch.arange(32)
    whole, batch = [], []
    for _ in range(20):  # 20 local sets of n samples: the mean error, not one draw of it
        y = torch.as_tensor((rng.random((n, 8)) < 0.3).astype(np.float64))
        # Execute: the whole-set estimate (refreshed by one batch of the same scores), and the
        # per-batch phi of every batch of 32 (spec v1).
        whole.append(offdiag_distance(refreshed_phi(y, pos, y[pos]).numpy(), truth) ** 2)
        batch += [offdiag_distance(phi_correlation(y[i:i + 32]).numpy(), truth) ** 2 for i in range(0, n, 32)]
    whole, batch = float(np.mean(whole)), float(np.mean(batch))
    # Assert: the whole-set error shrinks with n (56 / n), the per-batch one stays at 56 / 32 = 1.75.
    assert whole == pytest.approx(56 / n, rel=0.25)
    assert batch == pytest.approx(56 / 32, rel=0.2)


def test_scaled_batch_gradient_is_the_whole_set_gradient_times_n_over_b():
    # Prepare: scores F (n, C) as a leaf, a teacher, the whole-set gap G(F) and its gradient.
    gen = torch.Generator().manual_seed(1)
    n, b = 40, 8
    scores = torch.rand(n, 3, generator=gen, dtype=torch.float64)
    teacher = torch.full((3, 3), 0.5, dtype=torch.float64)
    mask = torch.as_tensor(block_mask(None, 3))
    leaf = scores.clone().requires_grad_(True)
    alignment_gap(phi_correlation(leaf), teacher, mask).backward()
    full = leaf.grad.clone()
    # Execute: one step's gradient on the batch rows, through the refreshed table, scaled by n / B.
    pos = torch.arange(8, 16)
    rows = scores[pos].clone().requires_grad_(True)
    gap = alignment_gap(refreshed_phi(scores, pos, scale_grad(rows, n / b)), teacher, mask)
    gap.backward()
    # Assert: same value as the whole-set gap; gradient n / B times the whole-set one on those rows,
    # so the mean over an epoch's batches equals the whole-set gradient.
    assert gap.item() == pytest.approx(alignment_gap(phi_correlation(scores), teacher, mask).item())
    np.testing.assert_allclose(rows.grad.numpy(), (n / b) * full[pos].numpy(), rtol=1e-10)


def test_scale_grad_keeps_the_value_and_scales_the_gradient():
    x = torch.tensor([1.0, -2.0], requires_grad=True)
    y = scale_grad(x, 3.0)
    (y * y).sum().backward()
    assert y.tolist() == [1.0, -2.0]
    assert x.grad.tolist() == [6.0, -12.0]  # 3 * 2x


@pytest.mark.parametrize("c", [4, 10, 20])
def test_per_entry_gap_does_not_depend_on_the_label_count(c):
    # Prepare: every off-diagonal entry of R is 0.3 above the teacher's.
    teacher = torch.zeros(c, c, dtype=torch.float64)
    r = torch.full((c, c), 0.3, dtype=torch.float64)
    blocks = [np.arange(0, c // 2), np.arange(c // 2, c)]
    for mask in (block_mask(None, c), block_mask(blocks, c)):
        m = torch.as_tensor(mask)
        entries = float(mask.sum())
        # Assert: the mean squared gap is 0.09 at any C and block layout; the sum grows with the entries.
        assert alignment_gap(r, teacher, m, per_entry=True).item() == pytest.approx(0.09)
        assert alignment_gap(r, teacher, m).item() == pytest.approx(0.09 * entries)
    assert alignment_gap(r, teacher, torch.zeros(c, c), per_entry=True).item() == 0.0  # nothing to align


def test_premise_distances_by_hand():
    # Prepare: 2 labels, truth off-diagonal 0; clients' off-diagonal entries 1, -1 and 0.5, sizes 1, 1, 2.
    def corr(v):
        return np.array([[1.0, v], [v, 1.0]])

    clients = [corr(1.0), corr(-1.0), corr(0.5)]
    # Execute
    res = premise_distances(clients, [1, 1, 2], np.eye(2))
    # Assert: own |v| * sqrt(2); leave-one-out weighted means: (-1 + 2 * 0.5) / 3 = 0, (1 + 1) / 3, 0.
    r2 = np.sqrt(2)
    np.testing.assert_allclose(res["own_per_client"], [r2, r2, 0.5 * r2])
    np.testing.assert_allclose(res["consensus_per_client"], [0.0, 2 / 3 * r2, 0.0], atol=1e-12)
    assert res["own"] == pytest.approx(2.5 / 3 * r2)
    assert res["consensus"] == pytest.approx(2 / 9 * r2)
