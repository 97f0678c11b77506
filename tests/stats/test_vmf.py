"""vMF mixture pieces of FedRG's geometry detector (fedcore.stats.vmf)."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import vonmises_fisher

from fedcore.stats import vmf


def _unit(x: np.ndarray) -> np.ndarray:
    return x / np.linalg.norm(x, axis=-1, keepdims=True)


def _clusters(rng, d=16, kappa=50.0, n_per=150, k=3):
    """k well-separated vMF clusters; returns (z, true mean directions, cluster ids)."""
    mus = _unit(rng.standard_normal((k, d)))
    z = np.concatenate([vonmises_fisher(m, kappa).rvs(n_per, random_state=rng) for m in mus])
    return z, mus, np.repeat(np.arange(k), n_per)


@pytest.mark.parametrize("d", [3, 10, 64, 128])
@pytest.mark.parametrize("kappa", [0.1, 0.5, 5.0, 100.0, 1000.0])
def test_normalizer_matches_scipy_logpdf(d, kappa):
    rng = np.random.default_rng([d, int(kappa * 10)])
    mu, x = _unit(rng.standard_normal(d)), _unit(rng.standard_normal((4, d)))
    ref = vonmises_fisher(mu, kappa).logpdf(x)
    ours = vmf.log_vmf_normalizer(np.array(kappa), d) + kappa * x @ mu
    np.testing.assert_allclose(ours, ref, rtol=1e-10, atol=1e-9)


@pytest.mark.parametrize("d", [512, 2048])
@pytest.mark.parametrize("kappa", [0.1, 5.0, 100.0])
def test_normalizer_stays_finite_and_exact_in_high_dimension(d, kappa):
    # ive(v, kappa) underflows here (scipy's own logpdf returns -inf for kappa 0.1 at d 512);
    # the Debye fallback must agree with arbitrary-precision log I_v.
    mpmath = pytest.importorskip("mpmath")
    v = d / 2 - 1
    ref = v * np.log(kappa) - d / 2 * np.log(2 * np.pi) - float(mpmath.log(mpmath.besseli(v, kappa)))
    ours = float(vmf.log_vmf_normalizer(np.array(kappa), d))
    assert np.isfinite(ours)
    assert ours == pytest.approx(ref, rel=1e-10)


def test_normalizer_keeps_shape():
    assert vmf.log_vmf_normalizer(np.full((3, 2), 5.0), 512).shape == (3, 2)


def test_uniform_density_on_the_2_sphere_is_one_over_4pi():
    assert vmf.log_uniform_sphere(3) == pytest.approx(-np.log(4 * np.pi))


def test_responsibilities_are_a_distribution_over_background_and_components():
    rng = np.random.default_rng(0)
    z, _, _ = _clusters(rng, n_per=20)
    mix = vmf.init_mixture(z, 4, rng)
    for normalizer in (True, False):
        resp = vmf.responsibilities(z, mix, r=rng.uniform(0.2, 2.0, len(z)), normalizer=normalizer)
        assert resp.shape == (len(z), 5)
        np.testing.assert_allclose(resp.sum(1), 1.0)


def test_temperature_divides_the_log_joint():
    # Background and one component at equal weight; z on the mean direction, kappa 2, no normalizers:
    # log joints log 0.5 and log 0.5 + 2, so the component gets e^2 / (1 + e^2), and e / (1 + e) at
    # temperature 2 (the FedRG authors' code).
    mix = vmf.VMFMixture(mu=np.array([[1.0, 0.0, 0.0]]), kappa=np.array([2.0]), pi=np.array([0.5]), pi0=0.5)
    z = np.array([[1.0, 0.0, 0.0]])
    for temperature, want in ((1.0, np.e**2 / (1 + np.e**2)), (2.0, np.e / (1 + np.e))):
        resp = vmf.responsibilities(z, mix, normalizer=False, temperature=temperature)
        np.testing.assert_allclose(resp, [[1 - want, want]], rtol=1e-12)


def test_em_recovers_known_directions_and_concentrations():
    rng = np.random.default_rng(1)
    z, mus, _ = _clusters(rng)
    mix = vmf.fit(z, vmf.init_mixture(z, 3, np.random.default_rng(2)), iters=20)
    cos = mix.mu @ mus.T  # (estimated, true)
    assert np.sort(cos.max(0)).min() > 0.99  # every true direction found ...
    assert len(set(cos.argmax(0))) == 3  # ... by a different component
    np.testing.assert_allclose(mix.kappa, 50.0, rtol=0.15)
    np.testing.assert_allclose(mix.pi, (1 - mix.pi0) / 3, atol=0.02)


def test_background_absorbs_uniform_outliers():
    rng = np.random.default_rng(3)
    z, _, _ = _clusters(rng)
    outliers = _unit(rng.standard_normal((60, z.shape[1])))
    data = np.concatenate([z, outliers])
    mix = vmf.fit(data, vmf.init_mixture(data, 3, np.random.default_rng(4)), iters=20)
    resp = vmf.responsibilities(data, mix)
    assert resp[len(z):, 0].mean() > 0.9
    assert resp[: len(z), 0].mean() < 0.05
    assert mix.pi0 == pytest.approx(60 / len(data), abs=0.03)


def test_m_step_by_hand():
    z = np.array([[1.0, 0.0], [0.0, 1.0]])
    old = vmf.VMFMixture(np.array([[1.0, 0.0]]), np.array([5.0]), np.array([0.95]), 0.05)
    resp = np.array([[0.0, 1.0], [0.0, 1.0]])  # both samples fully in the one component
    new = vmf.m_step(z, resp, old, prior=0.0)
    np.testing.assert_allclose(new.mu, [[2**-0.5, 2**-0.5]])
    rbar = 2**0.5 / 2
    assert new.kappa[0] == pytest.approx(rbar * (2 - rbar**2) / (1 - rbar**2))
    assert new.pi0 == pytest.approx(1e-3)  # no background mass: clamped at the floor
    assert new.pi.sum() + new.pi0 == pytest.approx(1.0)


def test_kappa_clamps():
    np.testing.assert_allclose(vmf.banerjee_kappa(np.array([1e-9, 0.999999]), 128), [0.5, 100.0])


def test_blend_momentum_one_is_plain_em_and_small_momentum_moves_a_little():
    a = vmf.VMFMixture(np.array([[1.0, 0.0]]), np.array([10.0]), np.array([0.9]), 0.1)
    b = vmf.VMFMixture(np.array([[0.0, 1.0]]), np.array([20.0]), np.array([0.8]), 0.2)
    assert vmf.blend(a, b, 1.0) is b
    c = vmf.blend(a, b, 0.1)
    assert c.kappa[0] == pytest.approx(11.0) and c.pi0 == pytest.approx(0.11)
    assert np.linalg.norm(c.mu[0]) == pytest.approx(1.0) and c.mu[0, 0] > c.mu[0, 1]


def test_tempering_by_view_agreement():
    d = 4
    e = np.eye(d)
    same = vmf.aug_concentration(e[:1], e[:1])  # identical views: R clipped just below 1
    ortho = vmf.aug_concentration(e[:1], e[1:2])  # R = 1/sqrt(2)
    assert ortho[0] == pytest.approx((0.5**0.5) * (d - 0.5) / 0.5)
    assert same[0] > 1e5
    r = vmf.temper_factor(np.array([1.0, 10.0, 100.0]), median=10.0)
    np.testing.assert_allclose(r, [0.2, 1.0, 2.0])
    assert vmf.ema_median(None, np.array([1.0, 3.0, 8.0])) == 3.0
    assert vmf.ema_median(10.0, np.array([1.0, 3.0, 8.0])) == pytest.approx(9.3)


def test_tempering_flattens_low_agreement_samples():
    rng = np.random.default_rng(5)
    z, _, _ = _clusters(rng, n_per=30)
    mix = vmf.fit(z, vmf.init_mixture(z, 3, rng), iters=5)
    for normalizer in (True, False):
        plain = vmf.responsibilities(z, mix, np.ones(len(z)), normalizer)[:, 1:].max(1)
        flat = vmf.responsibilities(z, mix, np.full(len(z), 0.2), normalizer)[:, 1:].max(1)
        assert flat.mean() < plain.mean() - 0.01


def test_class_counts_by_hand_and_ema_rows_keep_rows_summing_to_one():
    gamma = np.array([[0.8, 0.2], [0.6, 0.4]])
    counts = vmf.class_counts(gamma, np.array([0, 1]), np.array([1.0, 0.0]), num_classes=3, eta=0.5)
    np.testing.assert_allclose(counts, [[1.3, 0.7], [0.5, 0.5], [0.5, 0.5]])  # noisy and absent rows: eta only
    rng = np.random.default_rng(6)
    g = rng.dirichlet(np.ones(7), size=50)
    c1 = vmf.class_counts(g, rng.integers(0, 10, 50), rng.random(50) < 0.7, 10)
    b1 = c1 / c1.sum(1, keepdims=True)  # B as FedRG forms it: the counts normalized per class
    b2 = vmf.ema_rows(np.full((10, 7), 1 / 7), b1, 0.1)
    np.testing.assert_allclose(b1.sum(1), 1.0)
    np.testing.assert_allclose(b2.sum(1), 1.0)


def test_clean_score_forms():
    resp = np.array([[0.1, 0.9, 0.0], [0.0, 0.2, 0.8]])  # [background, g1, g2]
    b = np.array([[1.0, 0.0], [0.25, 0.75]])
    y = np.array([0, 1])
    np.testing.assert_allclose(vmf.clean_score(resp, b, y, "paper"), [0.9, 0.65])
    # With full posteriors the public code's ratio has denominator 1: the forms agree.
    np.testing.assert_allclose(vmf.clean_score(resp, b, y, "code"), [0.9, 0.65])
    sub = resp * 0.5  # not a distribution: the ratio form renormalizes
    np.testing.assert_allclose(vmf.clean_score(sub, b, y, "code"), [0.9, 0.65])
    with pytest.raises(ValueError):
        vmf.clean_score(resp, b, y, "other")


def test_split_flags_the_high_noisiness_group():
    rng = np.random.default_rng(7)
    score = np.concatenate([rng.normal(0.1, 0.02, 80), rng.normal(0.8, 0.05, 20)])
    noisy = vmf.split_noisy(score, seed=0)
    assert noisy[80:].all() and not noisy[:80].any()


def test_label_fallback_keeps_labels_with_no_clean_sample():
    labels = np.array([0, 0, 1, 1, 2])
    clean = np.array([True, False, False, False, False])
    np.testing.assert_array_equal(vmf.label_fallback(labels, clean), [1.0, 0.0, 1.0, 1.0, 1.0])


def noise_majority_client():
    """One client, two components that are the two true classes (one-hot responsibilities).
    True class 0: 36 keep label 0, 24 are flipped to label 1; true class 1: 8 keep label 1, 2 go
    to label 0. Label 1's group is mostly noise (24 noisy, 8 clean)."""
    comp = np.repeat([0, 0, 1, 1], [36, 24, 8, 2])
    labels = np.repeat([0, 1, 1, 0], [36, 24, 8, 2])
    noisy = np.repeat([False, True, False, True], [36, 24, 8, 2])
    resp = np.zeros((len(comp), 3))
    resp[np.arange(len(comp)), 1 + comp] = 1.0
    return resp, labels, noisy


def test_class_counts_and_label_posterior_by_hand():
    resp, labels, _ = noise_majority_client()
    counts = vmf.class_counts(resp[:, 1:], labels, np.ones(len(labels)), 2, eta=0.5)
    np.testing.assert_allclose(counts, [[36.5, 2.5], [24.5, 8.5]])
    np.testing.assert_allclose(vmf.label_posterior(counts), [[36.5 / 61, 2.5 / 11], [24.5 / 61, 8.5 / 11]])


def test_posterior_score_flags_the_noise_of_a_noise_majority_group_and_the_paper_score_does_not():
    resp, labels, noisy = noise_majority_client()
    counts = vmf.class_counts(resp[:, 1:], labels, np.ones(len(labels)), 2, eta=0.5)
    b = counts / counts.sum(1, keepdims=True)
    paper = vmf.clean_score(resp, b, labels, "paper")
    post = vmf.posterior_score(resp, counts, labels)
    # Label 1's template B[1] learned its majority, the flipped class-0 samples: they look typical.
    np.testing.assert_allclose(paper[[36, 60]], [24.5 / 33, 8.5 / 33])
    np.testing.assert_allclose(post[[0, 36, 60, 68]], [36.5 / 61, 24.5 / 61, 8.5 / 11, 2.5 / 11])
    group = labels == 1
    flags_paper = vmf.split_noisy(1.0 - paper, seed=0)
    flags_post = vmf.split_noisy(1.0 - post, seed=0)
    assert flags_post[group & noisy].all() and not flags_post[group & ~noisy].any()
    assert not flags_paper[group & noisy].any() and flags_paper[group & ~noisy].all()
