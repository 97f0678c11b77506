"""Property and hand-checked tests for label-noise scenes."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fedcore.config import NoiseConfig, PartitionConfig, RateConfig
from fedcore.data.noise import inject_client, inject_noise, round_half_up
from fedcore.data.partition import class_histogram, partition
from fedcore.errors import ConfigError

C = 10


def scene(kind="symmetric", scope="globalized", phi=0.6, rate=None, seed=0, k=8, part="dirichlet", **kw):
    y = np.random.default_rng(7).permutation(np.arange(800) % C)
    parts = partition(y, PartitionConfig(kind=part, num_clients=k, alpha=0.5, min_size=5), C, 11)
    cfg = NoiseConfig(type=kind, scope=scope, noisy_client_fraction=phi,
                      rate=rate or RateConfig(kind="uniform", min=0.2, max=0.9), **kw)
    asym = {2: 7, 3: 8, 5: 6, 6: 5, 7: 1}
    return y, parts, inject_noise(y, parts, cfg, C, seed, asym_map=asym)


@settings(max_examples=30, deadline=None)
@given(kind=st.sampled_from(["symmetric", "pairflip"]), scope=st.sampled_from(["globalized", "localized"]),
       seed=st.integers(0, 5000), phi=st.floats(0.0, 1.0))
def test_realized_per_class_rate_within_one_over_nc(kind, scope, seed, phi):
    y, parts, s = scene(kind, scope, phi, seed=seed)
    for cid, idx in enumerate(parts):
        present = np.unique(y[idx])
        for c in present:
            m = y[idx] == c
            realized = s.is_noisy_sample[idx][m].mean()
            if scope == "localized" and len(present) < 2:
                assert realized == 0
                continue
            assert abs(realized - s.target_rate[cid]) <= 1.0 / m.sum() + 1e-12


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 5000), kind=st.sampled_from(["symmetric", "pairflip"]))
def test_localized_flips_stay_in_client_label_set(seed, kind):
    y, parts, s = scene(kind, "localized", 1.0, seed=seed, part="shards", k=10)
    for idx in parts:
        assert set(np.unique(s.y_noisy[idx])) <= set(np.unique(y[idx]))


@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 5000))
def test_pairflip_maps_c_to_c_plus_1(seed):
    y, _, s = scene("pairflip", "globalized", 1.0, seed=seed)
    flipped = s.is_noisy_sample
    assert np.array_equal(s.y_noisy[flipped], (y[flipped] + 1) % C)


@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 5000), phi=st.floats(0.0, 1.0))
def test_clean_clients_untouched_and_flags_consistent(seed, phi):
    y, parts, s = scene(phi=phi, seed=seed)
    for cid, idx in enumerate(parts):
        if not s.is_noisy_client[cid]:
            assert np.array_equal(s.y_noisy[idx], y[idx])
            assert s.target_rate[cid] == 0 and s.noise_type[cid] == "none"
    assert np.array_equal(s.is_noisy_sample, s.y_noisy != y)
    assert s.is_noisy_client.sum() == round_half_up(phi * len(parts))


def test_same_seed_same_scene_different_seed_different():
    _, _, a = scene(seed=4)
    _, _, b = scene(seed=4)
    _, _, c = scene(seed=5)
    assert np.array_equal(a.y_noisy, b.y_noisy)
    assert not np.array_equal(a.y_noisy, c.y_noisy)


def test_symmetric_never_keeps_the_true_class():
    y = np.repeat(np.arange(C), 20)
    out = inject_client(y, "symmetric", 1.0, "globalized", C, None, np.random.default_rng(0))
    assert (out != y).all()


def test_exact_flip_count_by_hand():
    # 7 samples of class 0 at rate 0.5 -> round(3.5) = 4 flips (half up, not banker's).
    y = np.zeros(7, dtype=np.int64)
    y_all = np.concatenate([y, np.ones(3, dtype=np.int64)])
    out = inject_client(y_all, "pairflip", 0.5, "globalized", C, None, np.random.default_rng(0))
    assert (out[:7] != 0).sum() == 4 and (out[7:] != 1).sum() == 2


def test_asymmetric_follows_class_map():
    y, _, s = scene("asymmetric", "globalized", 1.0, rate=RateConfig(kind="fixed", value=0.5))
    f = s.is_noisy_sample
    mapping = {2: 7, 3: 8, 5: 6, 6: 5, 7: 1}
    assert all(mapping[int(a)] == int(b) for a, b in zip(y[f], s.y_noisy[f], strict=True))
    assert not np.isin(y[f], [0, 1, 4, 8, 9]).any()


def test_mixed_types_drawn_per_client():
    _, _, s = scene("mixed", "globalized", 1.0, k=10, mixed_types=["symmetric", "pairflip"])
    assert set(s.noise_type) <= {"symmetric", "pairflip"} and len(set(s.noise_type)) == 2


def test_linspace_and_fixed_rates():
    _, _, s = scene(phi=1.0, rate=RateConfig(kind="linspace", min=0.1, max=0.8), k=8)
    assert np.allclose(np.sort(s.target_rate), np.linspace(0.1, 0.8, 8))
    _, _, s = scene(phi=0.5, rate=RateConfig(kind="fixed", value=0.3), k=8)
    assert sorted(set(np.round(s.target_rate, 6))) == [0.0, 0.3]


def test_fedcorr_rates_in_range():
    _, _, s = scene(rate=RateConfig(kind="fedcorr", rho=0.5, tau=0.3), k=12)
    r = s.target_rate[s.is_noisy_client]
    assert ((r >= 0.3) & (r <= 1.0)).all()


def test_clean_cover_holds_every_class():
    y = np.random.default_rng(0).permutation(np.arange(1000) % C)
    parts = partition(y, PartitionConfig(kind="bernoulli_dirichlet", num_clients=10, p=0.8, alpha=0.5,
                                         min_size=5), C, 3)
    cfg = NoiseConfig(type="symmetric", num_noisy_clients=7, clean_cover=True, min_per_class=5,
                      rate=RateConfig(kind="fixed", value=0.9))
    s = inject_noise(y, parts, cfg, C, 0)
    hist = class_histogram(y, parts, C)
    assert s.is_noisy_client.sum() == 7
    assert (hist[~s.is_noisy_client].sum(axis=0) >= 5).all()


def test_clean_cover_impossible_is_config_error():
    y = np.repeat(np.arange(C), 10)
    parts = [np.flatnonzero(y == c) for c in range(C)]  # one class per client
    cfg = NoiseConfig(type="symmetric", num_noisy_clients=8, clean_cover=True)
    with pytest.raises(ConfigError, match="clean_cover"):
        inject_noise(y, parts, cfg, C, 0)


def test_localized_single_class_client_stays_clean_and_is_reported():
    y = np.repeat(np.arange(C), 10)
    parts = [np.flatnonzero(y == 0), np.flatnonzero(y > 0)]
    cfg = NoiseConfig(type="symmetric", scope="localized", noisy_client_fraction=1.0,
                      rate=RateConfig(kind="fixed", value=0.5))
    s = inject_noise(y, parts, cfg, C, 0)
    assert not s.is_noisy_client[0] and s.is_noisy_client[1]
    assert any("single class" in n for n in s.notes)


def test_real_noise_uses_file_labels():
    y = np.array([0, 1, 2, 3])
    noisy = np.array([0, 2, 2, 1])
    known = np.array([True, True, False, True])
    cfg = NoiseConfig(type="real")
    s = inject_noise(y, [np.arange(4)], cfg, C, 0, y_real_noisy=noisy, y_true_known=known)
    assert s.y_noisy.tolist() == [0, 2, 2, 1]
    assert s.is_noisy_sample.tolist() == [False, True, False, True]
    assert s.realized_rate[0] == pytest.approx(2 / 3)


def test_real_noise_marks_a_client_noisy_by_its_trusted_samples_and_leaves_one_without_any_unknown():
    y = np.array([0, 1, 2, 3, 0, 1, 2, 3])
    noisy = np.array([0, 1, 2, 3, 1, 1, 0, 0])  # client 0 agrees with every label; 1 and 2 do not
    known = np.array([True, True, True, True, True, True, False, False])
    parts = [np.arange(4), np.array([4, 5]), np.array([6, 7])]
    s = inject_noise(y, parts, NoiseConfig(type="real"), C, 0, y_real_noisy=noisy, y_true_known=known)
    assert s.is_noisy_client.tolist() == [False, True, False]
    assert s.realized_rate[:2].tolist() == [0.0, 0.5] and np.isnan(s.realized_rate[2])
