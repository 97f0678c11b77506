"""The label-correlation maths: phi and its one guard, the leave-one-out consensus operators,
spectral blocks, the alignment gap and its weights, CAA, the whole-set estimate refreshed per
batch (spec v2 notes), the masked BCE and ECL's diagnostics (spec v3 notes)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from fedcore.stats.correlation import (
    alignment_gap,
    alpha_schedule,
    annotated,
    block_mask,
    block_norm,
    caa_weights,
    consensus,
    default_num_blocks,
    ecl_diagnostics,
    entry_weights,
    leave_one_out,
    masked_bce,
    offdiag_distance,
    phi,
    phi_correlation,
    pooled_phi,
    premise_distances,
    refreshed_phi,
    relative_gamma,
    scale_grad,
    score_moments,
    spectral_blocks,
)


def test_phi_on_hand_made_binary_labels():
    # Prepare: labels 0 and 1 always together, label 2 exactly when they are absent, label 3 independent.
    y = np.array([[1, 1, 0, 1], [1, 1, 0, 0], [0, 0, 1, 1], [0, 0, 1, 0]], dtype=np.uint8)
    # Execute
    r = phi_correlation(y, eps=0.0).numpy()
    # Assert: perfect co-occurrence -> 1, disjoint complements -> -1, independence -> 0.
    assert r[0, 1] == pytest.approx(1.0)
    assert r[0, 2] == pytest.approx(-1.0)
    assert r[0, 3] == pytest.approx(0.0)
    np.testing.assert_allclose(np.diag(r), 1.0)
    np.testing.assert_allclose(r, r.T)


def test_phi_disjoint_rare_labels_are_negative_and_eps_shrinks():
    # Labels 0 and 1 never co-occur; each has p = 1/4: phi = (0 - 1/16) / (3/16) = -1/3.
    y = np.array([[1, 0], [0, 1], [0, 0], [0, 0]])
    assert phi_correlation(y, eps=0.0)[0, 1].item() == pytest.approx(-1 / 3)
    assert -1 / 3 < phi_correlation(y, eps=0.1)[0, 1].item() < 0


def test_phi_matches_numpy_corrcoef_and_is_differentiable():
    rng = np.random.default_rng(0)
    y = (rng.random((200, 5)) < 0.4).astype(np.float64)
    np.testing.assert_allclose(phi_correlation(y, eps=0.0).numpy(), np.corrcoef(y.T), atol=1e-10)
    logits = torch.randn(16, 5, requires_grad=True)
    r = phi_correlation(torch.sigmoid(logits))
    r[0, 1].backward()
    assert torch.isfinite(logits.grad).all() and logits.grad.abs().sum() > 0


def test_phi_constant_column_has_finite_gradient():
    f = torch.tensor([[0.0, 0.3], [0.0, 0.9]], requires_grad=True)
    phi_correlation(f).sum().backward()
    assert torch.isfinite(f.grad).all()


def test_leave_one_out_excludes_the_client_itself():
    # Prepare: client k's matrix is filled with k, sizes 1, 1, 2.
    stats = {k: np.full((2, 2), float(k)) for k in range(3)}
    sizes = {0: 1, 1: 1, 2: 2}
    # Execute
    t = leave_one_out(stats, sizes, clients=[0, 1, 2, 5])
    # Assert: weighted means of the others only.
    assert t[0][0, 0] == pytest.approx((1 * 1 + 2 * 2) / 3)
    assert t[1][0, 0] == pytest.approx((0 * 1 + 2 * 2) / 3)
    assert t[2][0, 0] == pytest.approx(0.5)
    assert t[5][0, 0] == pytest.approx((0 + 1 + 4) / 4)  # a client without stats learns from all
    med = leave_one_out(stats, sizes, clients=[1], how="median")
    assert med[1][0, 0] == 1.0  # median of {0, 2}
    assert leave_one_out({3: np.eye(2)}, {3: 1}, clients=[3]) == {}


def test_spectral_blocks_partition_the_labels_and_find_the_structure():
    # Prepare: two groups of labels, strongly correlated within, uncorrelated across.
    r = np.full((6, 6), 0.02)
    r[:3, :3] = 0.8
    r[3:, 3:] = -0.7  # the affinity is |R|: strong negative correlation also binds labels
    np.fill_diagonal(r, 1.0)
    # Execute
    blocks = spectral_blocks(r, 2, seed=0)
    # Assert
    assert sorted(np.concatenate(blocks).tolist()) == list(range(6))
    assert sorted(sorted(b.tolist()) for b in blocks) == [[0, 1, 2], [3, 4, 5]]


@pytest.mark.parametrize("g", [1, 3, 10, 25])
def test_spectral_blocks_always_partition(g: int):
    rng = np.random.default_rng(g)
    a = rng.uniform(-1, 1, (10, 10))
    blocks = spectral_blocks((a + a.T) / 2, g, seed=0)
    assert sorted(np.concatenate(blocks).tolist()) == list(range(10))
    assert len(blocks) <= min(g, 10)


def test_default_num_blocks():
    assert [default_num_blocks(c) for c in (1, 4, 5, 10, 20, 80)] == [1, 1, 2, 3, 5, 20]


def test_block_mask_by_hand():
    m = block_mask([np.array([0, 2]), np.array([1])], 3)
    assert m.tolist() == [[0, 0, 1], [0, 0, 0], [1, 0, 0]]
    assert block_mask(None, 2).tolist() == [[0, 1], [1, 0]]


def test_alignment_gap_zero_when_equal_and_counts_only_block_entries():
    r = torch.tensor([[1.0, 0.5, 0.1], [0.5, 1.0, 0.2], [0.1, 0.2, 1.0]])
    mask = torch.as_tensor(block_mask([np.array([0, 1]), np.array([2])], 3))
    assert alignment_gap(r, r.clone(), mask).item() == 0.0
    teacher = r.clone()
    teacher[0, 2] = teacher[2, 0] = 0.9  # across blocks: ignored
    assert alignment_gap(r, teacher, mask).item() == 0.0
    teacher[0, 1] = teacher[1, 0] = 0.0  # within block: 2 * 0.5^2
    assert alignment_gap(r, teacher, mask).item() == pytest.approx(0.5)


def test_alpha_schedule_endpoints():
    assert alpha_schedule(0, 10) == 1.0
    assert alpha_schedule(5, 10) == 0.5
    assert alpha_schedule(10, 10) == 0.0
    assert alpha_schedule(40, 10) == 0.0
    assert alpha_schedule(0, 0) == 0.0


def test_caa_weights_by_hand():
    sizes, gaps = np.array([100.0, 300.0]), np.array([0.0, np.log(3.0)])
    # At t = 0 (alpha = 1) the weights are the sample-count weights, whatever the gaps.
    np.testing.assert_allclose(caa_weights(sizes, gaps, alpha=1.0, gamma=1.0), [0.25, 0.75])
    # At alpha = 0 only quality counts: q = (1, 1/3) -> (0.75, 0.25).
    np.testing.assert_allclose(caa_weights(sizes, gaps, alpha=0.0, gamma=1.0), [0.75, 0.25])
    np.testing.assert_allclose(caa_weights(sizes, gaps, alpha=0.5, gamma=1.0), [0.5, 0.5])
    # Huge gaps must not underflow into 0/0.
    w = caa_weights(sizes, np.array([1e4, 1e4 + 1]), alpha=0.0, gamma=1.0)
    assert np.isfinite(w).all() and w.sum() == pytest.approx(1.0)


@pytest.mark.parametrize("value", [0, 1])
def test_a_constant_label_correlates_with_nothing(value: int):
    # Prepare: label 1 is always `value` (p = 0 or 1: zero variance); labels 0 and 2 vary.
    y = np.array([[1, value, 0], [0, value, 1], [1, value, 1], [0, value, 0]], dtype=np.uint8)
    # Execute: the exact coefficient (eps = 0), from the labels and from their moments.
    r = phi_correlation(y, eps=0.0).numpy()
    m = phi(*score_moments(y))
    # Assert: 0 (not 0 / 0 = NaN) on the constant label's row and column, its diagonal included;
    # the varying labels keep their coefficient (here 0: they are independent).
    for mat in (r, m):
        assert not np.isnan(mat).any()
        assert np.all(mat[1, :] == 0.0) and np.all(mat[:, 1] == 0.0)
        assert mat[0, 0] == pytest.approx(1.0) and mat[0, 2] == pytest.approx(0.0)


def test_phi_of_moments_is_the_phi_of_the_data_and_keeps_the_input_kind():
    rng = np.random.default_rng(3)
    f = rng.random((40, 4))
    p, joint = score_moments(f)
    m = phi(p, joint, eps=1e-6)
    assert isinstance(m, np.ndarray)
    np.testing.assert_allclose(m, phi_correlation(f, eps=1e-6).numpy(), atol=1e-12)
    t = phi(torch.as_tensor(p), torch.as_tensor(joint))
    assert isinstance(t, torch.Tensor)
    np.testing.assert_array_equal(t.numpy(), phi(p, joint))
    # Hand-made moments: p = (1/2, 1/4), P(both) = 1/4: (1/4 - 1/8) / sqrt(1/4 * 3/16) = 1/sqrt(3).
    r = phi(np.array([0.5, 0.25]), np.array([[0.5, 0.25], [0.25, 0.25]]))
    assert r[0, 1] == pytest.approx(1 / np.sqrt(3))


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


def _clients(seed=0):
    rng = np.random.default_rng(seed)
    # Three clients with different marginals: the mean of their phi is not the pooled phi.
    return [rng.random((n, 5)) ** (k + 1) for k, n in enumerate((30, 50, 80))]


def test_pooled_moment_phi_equals_the_phi_of_the_concatenated_data():
    fs = _clients()
    pooled = pooled_phi([score_moments(f) for f in fs], [len(f) for f in fs])
    direct = phi_correlation(np.concatenate(fs)).numpy()
    np.testing.assert_allclose(pooled, direct, atol=1e-10)
    mean = leave_one_out({0: np.zeros((5, 5)), **{k + 1: phi_correlation(f).numpy() for k, f in enumerate(fs)}},
                         {k + 1: len(f) for k, f in enumerate(fs)}, [0])[0]
    assert np.abs(mean - direct).max() > 1e-3  # the v2 operator is a different matrix


def test_pooled_consensus_leaves_the_client_out():
    fs = _clients(1)
    mom = {k: score_moments(f) for k, f in enumerate(fs)}
    stats = {k: phi_correlation(f).numpy() for k, f in enumerate(fs)}
    sizes = {k: len(f) for k, f in enumerate(fs)}
    teachers = consensus(stats, sizes, [0, 1, 2], "pooled", moments=mom)
    np.testing.assert_allclose(teachers[0], phi_correlation(np.concatenate(fs[1:])).numpy(), atol=1e-10)
    # 'caa': the weights replace the sizes; a client with no weight keeps its size.
    caa = consensus(stats, sizes, [0], "caa", weights={1: 0.0})
    np.testing.assert_allclose(caa[0], stats[2])
    with pytest.raises(ValueError, match="pooled"):
        consensus(stats, sizes, [0], "pooled")


def test_gamma_one_with_the_diagonal_equals_v2_unweighted_form_times_the_entry_count():
    rng = np.random.default_rng(2)
    r, t = rng.uniform(-1, 1, (6, 6)), rng.uniform(-1, 1, (6, 6))
    np.fill_diagonal(r, 1.0)
    np.fill_diagonal(t, 1.0)  # phi's diagonal: equal in both, so only the off-diagonal entries differ
    blocks = [np.array([0, 1, 2]), np.array([3, 4, 5])]
    v2_mask = torch.as_tensor(block_mask(blocks, 6))
    v2 = alignment_gap(torch.as_tensor(r), torch.as_tensor(t), v2_mask, per_entry=True)
    w = entry_weights(t, block_mask(blocks, 6, diagonal=True), "one")
    v3 = alignment_gap(torch.as_tensor(r), torch.as_tensor(t), torch.as_tensor(w), per_entry=False)
    assert float(v3) == pytest.approx(float(v2) * float(v2_mask.sum()))
    assert float(v2_mask.sum()) == 12 and w.sum() == 18  # the diagonal adds its 6 entries


def test_abs_gamma_weighs_each_squared_gap_by_the_squared_consensus():
    t = np.array([[1.0, 0.5, 0.0], [0.5, 1.0, 0.2], [0.0, 0.2, 1.0]])
    w = entry_weights(t, block_mask(None, 3), "abs")
    np.testing.assert_allclose(w, t ** 2 * (1 - np.eye(3)))
    r = np.zeros((3, 3))
    gap = alignment_gap(torch.as_tensor(r), torch.as_tensor(t), torch.as_tensor(w))
    assert float(gap) == pytest.approx(2 * (0.5 ** 4 + 0.2 ** 4))


def test_relative_gamma_makes_caa_weights_move_at_small_gap_scales():
    gaps, n = np.array([0.001, 0.003, 0.007]), np.ones(3)
    flat = caa_weights(n, gaps, 0.0, 1.0)
    assert flat.max() - flat.min() < 0.01  # v2's gamma = 1 leaves the weights equal
    moved = caa_weights(n, gaps, 0.0, relative_gamma(gaps, 1.0))
    assert relative_gamma(gaps, 1.0) == pytest.approx(1 / 0.003)
    assert moved[0] > 2 * moved[2]
    assert relative_gamma(np.zeros(3), 2.0) == 2.0


def test_bce_mask_zeroes_the_gradients_of_never_annotated_labels():
    y = torch.tensor([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [1.0, 1.0, 0.0]])
    keep = annotated(y)
    assert keep.tolist() == [True, True, False]
    logits = torch.randn(3, 3, requires_grad=True)
    masked_bce(logits, y, keep).backward()
    assert torch.all(logits.grad[:, 2] == 0) and torch.all(logits.grad[:, :2] != 0)
    full = masked_bce(logits.detach(), y, torch.ones(3, dtype=torch.bool))
    ref = torch.nn.functional.binary_cross_entropy_with_logits(logits.detach(), y)
    assert float(full) == pytest.approx(float(ref))


def test_ecl_diagnostics_measure_the_pull_against_the_labels():
    gen = torch.Generator().manual_seed(0)
    y = (torch.rand(200, 4, generator=gen) < 0.4).double()
    logits = 3.0 * (2 * y - 1)  # a confident, correct model
    own = phi_correlation(torch.sigmoid(logits)).double()
    mask = torch.as_tensor(block_mask(None, 4))
    assert ecl_diagnostics(logits, y, own, mask, lam=1.0)["grad_ratio"] == pytest.approx(0.0, abs=1e-9)
    # A teacher with no correlation at all: ECL asks to decorrelate, which only shrinking can do here.
    weak = ecl_diagnostics(logits, y, torch.eye(4, dtype=torch.float64), mask, lam=1.0)
    strong = ecl_diagnostics(logits, y, torch.eye(4, dtype=torch.float64), mask, lam=10.0)
    assert weak["grad_ratio"] > 0 and strong["grad_ratio"] == pytest.approx(10 * weak["grad_ratio"])
    assert 0.0 <= weak["opposing"] <= 1.0


def test_block_norm_counts_only_the_masked_entries():
    r = np.array([[1.0, 0.6, 0.1], [0.6, 1.0, 0.1], [0.1, 0.1, 1.0]])
    mask = block_mask([np.array([0, 1]), np.array([2])], 3)
    assert block_norm(r, mask) == pytest.approx(np.sqrt(2 * 0.36))
