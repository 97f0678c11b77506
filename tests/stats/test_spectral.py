"""FedSIR's spectral pieces on constructed features where the answer is known."""

import numpy as np
import pytest

from fedcore.stats import spectral
from fedcore.stats.spectral import ClassReference, ClassSpectrum


def blobs(rng, n_per_class, d=16, classes=4, spread=0.05):
    """Class c = positive multiples of the axis e_c plus a little noise: (n, d), labels (n,)."""
    z = np.concatenate([np.outer(rng.uniform(1, 2, n_per_class), np.eye(d)[c]) for c in range(classes)])
    z += spread * np.abs(rng.standard_normal(z.shape))
    return z, np.repeat(np.arange(classes), n_per_class)


def test_energy_rank_by_hand():
    assert spectral.energy_rank(np.array([10.0, 0.0, 0.0])) == 1
    assert spectral.energy_rank(np.array([10.0, 1.0])) == 1  # 10 / 11 of the mass exactly
    assert spectral.energy_rank(np.array([5.0, 5.0])) == 2
    assert spectral.energy_rank(np.array([4.0, 3.0, 2.0, 1.0]), ratio=0.7) == 2  # 4 + 3 = 7 of 10
    assert spectral.energy_rank(np.array([])) == 0


def test_similarity_and_descriptors_by_hand():
    v = np.array([[1.0, 0.0], [0.5, np.sqrt(3) / 2], [0.0, -1.0]])
    s = spectral.similarity_matrix(v)
    np.testing.assert_allclose(s, [[1, 0.5, 0], [0.5, 1, np.sqrt(3) / 2], [0, np.sqrt(3) / 2, 1]], atol=1e-12)
    mu, e = spectral.descriptors(s)
    assert mu == pytest.approx((0.5 + np.sqrt(3) / 2) * 2 / 6)
    assert e == pytest.approx((0.25 + 0.75) * 2 / 6)
    assert np.isnan(spectral.descriptors(np.ones((1, 1)))[0])


def test_orthogonal_class_directions_give_near_zero_off_diagonal():
    z, y = blobs(np.random.default_rng(0), 30)
    spectra = spectral.class_spectra(z, y, num_classes=4)
    for c, spec in spectra.items():
        assert abs(spec.v[c]) > 0.99 and spec.n == 30
    mu, e = spectral.client_descriptors(z, y, num_classes=4, min_n=20)
    assert mu < 0.1 and e < 0.01


def test_mixing_classes_raises_mu():
    rng = np.random.default_rng(1)
    z, y = blobs(rng, 40)
    mus = []
    for frac in (0.0, 0.3, 0.6, 0.9):
        flip = rng.random(len(y)) < frac
        noisy = np.where(flip, rng.integers(0, 4, len(y)), y)
        mus.append(spectral.client_descriptors(z, noisy, 4, min_n=5)[0])
    assert mus == sorted(mus) and mus[-1] - mus[0] > 0.4


def test_small_classes_are_skipped_unless_too_few_remain():
    z, y = blobs(np.random.default_rng(2), 30, classes=3)
    y = y.copy()
    y[:28] = 1  # class 0 keeps two samples, class 1 holds 58
    assert sorted(spectral.class_spectra(z, y, 3, min_n=20)) == [1, 2]
    # Only one class reaches min_n: every labelled class is used instead, so mu is defined.
    assert np.isfinite(spectral.client_descriptors(z[:60], y[:60], 3, min_n=40)[0])


def test_identify_clients_calls_low_mu_group_clean_and_tolerates_nan():
    rng = np.random.default_rng(3)
    clean = np.column_stack([rng.normal(0.2, 0.02, 3), rng.normal(0.05, 0.01, 3)])
    noisy = np.column_stack([rng.normal(0.9, 0.02, 7), rng.normal(0.8, 0.02, 7)])
    desc = np.vstack([clean, noisy])
    q = spectral.identify_clients(desc, seed=0)
    assert np.all(q[:3] >= 0.5) and np.all(q[3:] < 0.5)
    desc[4] = np.nan
    assert np.all(spectral.identify_clients(desc, seed=0)[:3] >= 0.5)


def spec(v, n, gap, residual=None, s1_share=1.0):
    v = np.asarray(v, float)
    return ClassSpectrum(n=n, v=v / np.linalg.norm(v), residual=np.zeros((0, len(v))) if residual is None
                         else np.asarray(residual, float), gap=gap, s1_share=s1_share)


def test_consensus_weights_by_count_times_gap():
    e = np.eye(3)
    # w = 30 * 0.5 = 15 for e0 and 10 * 0.5 = 5 for e1: M = diag(.75, .25, 0), eigengap 0.5.
    ref = spectral.class_consensus([spec(e[0], 30, 0.5, [e[2]]), spec(e[1], 10, 0.5, [e[2]])], min_n=5)
    assert abs(ref.v[0]) == pytest.approx(1.0) and ref.eigengap == pytest.approx(0.5) and not ref.fallback
    np.testing.assert_allclose(np.abs(ref.residual), [e[2]], atol=1e-12)  # rank 1: only one direction kept
    # Same count but the second client's direction is twice as dominant: it wins.
    ref = spectral.class_consensus([spec(e[0], 10, 0.2), spec(e[1], 10, 0.4)], min_n=5)
    assert abs(ref.v[1]) == pytest.approx(1.0) and ref.eigengap == pytest.approx(1 / 3)


def test_class_spectrum_records_the_top_singular_share():
    # Rows 3 e0 and 1 e1: singular values (3, 1), so gap = 2/3 and s1 / sum s = 3/4.
    cs = spectral.class_spectrum(np.array([[3.0, 0.0], [0.0, 1.0]]))
    assert cs.gap == pytest.approx(2 / 3) and cs.s1_share == pytest.approx(0.75)


def test_consensus_weight_of_the_public_code_multiplies_by_s1_share():
    e = np.eye(2)
    a, b = spec(e[0], 10, 0.5, s1_share=0.2), spec(e[1], 10, 0.4, s1_share=0.5)
    assert spectral.consensus_weight(a) == pytest.approx(5.0)
    assert spectral.consensus_weight(a, "n_gap_s1") == pytest.approx(1.0)
    # n_gap: 5 vs 4, e0 wins with eigengap 1/9; n_gap_s1: 1 vs 2, e1 wins with eigengap 1/3.
    ref = spectral.class_consensus([a, b], min_n=5)
    assert abs(ref.v[0]) == pytest.approx(1.0) and ref.eigengap == pytest.approx(1 / 9)
    ref = spectral.class_consensus([a, b], min_n=5, weight="n_gap_s1")
    assert abs(ref.v[1]) == pytest.approx(1.0) and ref.eigengap == pytest.approx(1 / 3)
    with pytest.raises(ValueError, match="weight"):
        spectral.consensus_weight(a, "n")


def test_client_residual_dim_keeps_each_clients_first_directions():
    e = np.eye(4)
    one = [spec(e[0], 10, 0.5, [e[2], e[3]])]
    # All residual rows: N = e2 e2^T + e3 e3^T, two directions; the first one only: N = e2 e2^T.
    full = spectral.class_consensus(one, min_n=5)
    assert len(full.residual) == 2
    first = spectral.class_consensus(one, min_n=5, client_residual_dim=1)
    np.testing.assert_allclose(np.abs(first.residual), [e[2]], atol=1e-12)


def test_consensus_eigengap_and_min_n_fallbacks():
    e = np.eye(3)
    tied = spectral.class_consensus([spec(e[0], 10, 0.5), spec(e[1], 12, 0.5 * 10 / 12)], min_n=5)
    assert tied.fallback and abs(tied.v[1]) == pytest.approx(1.0)  # largest n
    small = spectral.class_consensus([spec(e[0], 4, 0.5), spec(e[1], 3, 0.9)], min_n=5)
    assert small.fallback and abs(small.v[0]) == pytest.approx(1.0)
    refs = spectral.consensus([{0: spec(e[0], 9, 0.5)}, {0: spec(e[0], 9, 0.5), 2: spec(e[2], 9, 0.5)}], 3, min_n=5)
    assert sorted(refs) == [0, 2]  # nobody holds class 1
    assert refs[0].eigengap == pytest.approx(1.0)


def test_scores_by_hand():
    e = np.eye(3)
    refs = {0: ClassReference(e[0], e[[1]], 1.0, False), 1: ClassReference(e[1], e[[0]], 1.0, False)}
    z = np.array([[3.0, 4.0, 0.0]])
    np.testing.assert_allclose(spectral.principal_scores(z, refs, 3), [[0.6, 0.8, -np.inf]])
    np.testing.assert_allclose(spectral.residual_scores(z, refs, 3), [[4.0, 3.0, np.inf]])


def test_gate_accepts_only_agreeing_argmax_argmin():
    sr = np.array([[0.9, 0.1, 0.0], [0.2, 0.7, 0.1], [0.1, 0.2, 0.8], [-np.inf, -np.inf, -np.inf]])
    sn = np.array([[0.1, 0.5, 0.6], [0.6, 0.5, 0.2], [0.9, 0.8, 0.1], [0.3, 0.2, 0.1]])
    prop, agree = spectral.gate(sr, sn, "agree")
    np.testing.assert_array_equal(agree, [True, False, True, False])
    np.testing.assert_array_equal(prop, [0, -1, 2, -1])
    np.testing.assert_array_equal(spectral.gate(sr, sn, "principal_only")[0], [0, 1, 2, -1])
    np.testing.assert_array_equal(spectral.gate(sr, sn, "residual_only")[0], [0, 2, 2, 2])
    with pytest.raises(ValueError):
        spectral.gate(sr, sn, "vote")


def test_relabel_pipeline_recovers_labels_on_separable_features():
    rng = np.random.default_rng(4)
    d, c = 24, 4
    basis = np.linalg.qr(rng.standard_normal((d, d)))[0]  # class c lives in span(basis[2c], basis[2c+1])
    def sample(n):
        y = rng.integers(0, c, n)
        coef = np.column_stack([rng.uniform(2, 3, n), rng.uniform(-0.5, 0.5, n)])
        z = np.stack([coef[i] @ basis[[2 * y[i], 2 * y[i] + 1]] for i in range(n)])
        return z + 0.05 * rng.standard_normal(z.shape), y
    clean = [spectral.class_spectra(*sample(200), c) for _ in range(3)]
    refs = spectral.consensus(clean, c, residual_dim=4, min_n=20)
    z, y_true = sample(300)
    prop, agree = spectral.gate(spectral.principal_scores(z, refs, c), spectral.residual_scores(z, refs, c))
    assert agree.mean() > 0.9
    assert np.mean(prop[agree] == y_true[agree]) > 0.95
