"""Spec-v3 maths of FedHarmony: pooled-moment phi, Psi's entry weights and diagonal, CAA's relative
temperature, the masked BCE and ECL's gradient diagnostics."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from fedcore.stats.correlation import alignment_gap, block_mask, caa_weights, leave_one_out, phi_correlation
from fedcore.stats.correlation_v3 import (
    annotated,
    block_norm,
    consensus,
    ecl_diagnostics,
    entry_weights,
    masked_bce,
    pooled_phi,
    relative_gamma,
    score_moments,
)


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
