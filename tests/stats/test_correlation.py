import numpy as np
import pytest
import torch

from fedcore.stats.correlation import (
    alignment_gap,
    alpha_schedule,
    block_mask,
    caa_weights,
    default_num_blocks,
    leave_one_out,
    phi_correlation,
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
