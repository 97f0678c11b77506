"""The sieve's premise guard and the class-wise sieve on hand-made surrogates."""

import numpy as np
import pytest
from sklearn.metrics import normalized_mutual_info_score

from fedcore.stats.gmm import bic_pair
from fedcore.stats.premise import nmi_from_counts, premise_checks, premise_warning
from fedcore.stats.sieving import classwise_sieve, pooled_sieve


def two_class_surrogates(seed: int = 0):
    """Two clients, two given classes. Class 0 is easy (clean loss ~0.2, noisy ~1.0), class 1 is
    hard (clean ~2.0, noisy ~3.0); a fifth of each class is noisy. One pooled GMM sees two modes,
    0.2-1.0 and 2.0-3.0, and splits by class; within each class the noisy fifth is the high mode."""
    rng = np.random.default_rng(seed)
    lbar, labels, noisy = {}, {}, {}
    for cid in (0, 1):
        y = np.repeat([0, 1], 200)
        bad = np.tile(np.arange(200) < 40, 2)
        centre = np.where(y == 0, np.where(bad, 1.0, 0.2), np.where(bad, 3.0, 2.0))
        lbar[cid], labels[cid], noisy[cid] = centre + rng.normal(0, 0.05, len(y)), y, bad
    return lbar, labels, noisy


def test_pooled_gmm_flags_the_hard_class_and_the_classwise_sieve_flags_the_noise():
    lbar, labels, noisy = two_class_surrogates()
    pooled = pooled_sieve(lbar, seed=0)
    for c in lbar:
        flags = pooled.q[c] < 0.5
        assert flags[labels[c] == 1].all() and not flags[labels[c] == 0].any()  # the class, whole
    wise = classwise_sieve(lbar, labels, seed=0)
    for c in lbar:
        np.testing.assert_array_equal(wise.q[c] < 0.5, noisy[c])  # exactly the noisy fifth of each class
        assert wise.rate[c] == pytest.approx(0.2)
    assert wise.means[0][0] == pytest.approx(0.2, abs=0.02) and wise.means[1][1] == pytest.approx(3.0, abs=0.02)


def test_bic_prefers_one_component_on_a_gaussian_and_two_on_two_modes():
    rng = np.random.default_rng(1)
    one, two = bic_pair(rng.normal(1.0, 0.3, 2000), seed=0)
    assert two >= one
    one, two = bic_pair(np.concatenate([rng.normal(0.0, 0.2, 1000), rng.normal(3.0, 0.2, 1000)]), seed=0)
    assert two < one
    assert bic_pair(np.ones(10), seed=0) == (0.0, 0.0)


def test_gate_keeps_a_class_without_a_noisy_mode_clean():
    rng = np.random.default_rng(2)
    lbar, labels, noisy = two_class_surrogates()
    y = labels[0]
    lbar[0] = np.where(y == 0, rng.normal(0.5, 0.1, len(y)), lbar[0])  # class 0 of client 0: one mode
    lbar[1] = np.where(labels[1] == 0, rng.normal(0.5, 0.1, len(y)), lbar[1])
    gated = classwise_sieve(lbar, labels, seed=0, gate=True)
    ungated = classwise_sieve(lbar, labels, seed=0)
    assert gated.gated == {0: True, 1: False}
    assert (gated.q[0][y == 0] == 1.0).all() and (ungated.q[0][y == 0] < 0.5).any()
    np.testing.assert_array_equal(gated.q[0][y == 1] < 0.5, noisy[0][y == 1])


def test_nmi_from_counts_matches_sklearn():
    rng = np.random.default_rng(3)
    a, b = rng.integers(0, 2, 500), rng.integers(0, 4, 500)
    b = np.where(rng.random(500) < 0.5, a, b)  # dependent
    table = np.zeros((2, 4))
    np.add.at(table, (a, b), 1)
    assert nmi_from_counts(table) == pytest.approx(normalized_mutual_info_score(a, b))
    assert nmi_from_counts(np.array([[5, 3], [0, 0]])) == 0.0  # flags all one value: nothing shared
    assert np.isnan(nmi_from_counts(np.zeros((2, 2))))


def test_guard_fires_on_a_unimodal_class_sorting_sieve_and_stays_silent_on_a_good_one():
    rng = np.random.default_rng(4)
    unimodal = bic_pair(rng.normal(1.0, 0.3, 2000), seed=0)
    # the sieve flags all of class 1 and none of class 0; the estimated noise is spread evenly
    label_table = np.array([[300, 0], [0, 300]])
    noise_table = np.array([[150, 150], [150, 150]])
    bad = premise_checks(unimodal, label_table[1], label_table.sum(0), label_table, noise_table)
    assert bad["premise/unimodal"] == 1.0 and bad["premise/class_flagged_whole"] == 1.0
    assert bad["premise/sorts_classes"] == 1.0 and bad["premise/fired"] == 1.0
    line = premise_warning(bad)
    assert line.count("\n") == 0 and "unimodal" in line and "100%" in line and "given label" in line
    bimodal = bic_pair(np.concatenate([rng.normal(0.0, 0.2, 1000), rng.normal(3.0, 0.2, 1000)]), seed=0)
    # a fifth of each class flagged, and the flags are the samples the model disagrees with
    label_table = np.array([[240, 240], [60, 60]])
    noise_table = np.array([[480, 0], [0, 120]])
    good = premise_checks(bimodal, label_table[1], label_table.sum(0), label_table, noise_table)
    assert good["premise/fired"] == 0.0 and good["premise/max_class_flag_share"] == pytest.approx(0.2)
    assert premise_warning(good) is None
    assert premise_checks(None, None, None, None, None) == {}
