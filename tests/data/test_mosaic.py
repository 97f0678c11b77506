"""digits_mosaic: images, labels, per-client co-occurrence patterns and the exact truth."""

from __future__ import annotations

import numpy as np
import pytest

from fedcore.config import DataConfig, PartitionConfig
from fedcore.data.datasets import load_dataset
from fedcore.data.mosaic import (
    draw_tiles,
    group_moments,
    make_spec,
    render,
    tiles_to_labels,
)
from fedcore.data.partition import partition
from fedcore.errors import ConfigError
from fedcore.registries import config_from_dict
from fedcore.stats.correlation import phi, phi_correlation


@pytest.fixture(scope="module")
def big():
    # 1,000 mosaics per group: sampling error of a co-occurrence frequency is <= 0.016.
    return load_dataset(DataConfig(name="digits_mosaic", params={"n_train": 10000, "n_test": 4000}))


def test_shapes_and_label_counts():
    ds = load_dataset(DataConfig(name="digits_mosaic"))
    assert ds.task == "multi" and ds.num_classes == 10 and not ds.flip_ok
    assert ds.x_train.shape == (4000, 1, 16, 16) and ds.x_train.dtype == np.uint8
    assert ds.y_train.shape == (4000, 10) and ds.y_train.dtype == np.uint8
    assert ds.x_test.shape == (1000, 1, 16, 16)
    counts = ds.y_train.sum(axis=1)
    assert counts.min() >= 1 and counts.max() <= 4
    assert np.bincount(ds.groups).tolist() == [400] * 10
    again = load_dataset(DataConfig(name="digits_mosaic"))
    np.testing.assert_array_equal(again.x_train, ds.x_train)  # the dataset is fixed by data.params.seed


def test_rendered_tiles_hold_their_digits():
    rng = np.random.default_rng(0)
    pool_x = np.stack([np.full((8, 8), 10 * (d + 1), dtype=np.uint8) for d in range(10)])
    tiles = np.array([[3, -1, -1, 7], [-1, 0, -1, -1]])
    img = render(tiles, pool_x, np.arange(10), rng)
    assert img.shape == (2, 1, 16, 16)
    assert (img[0, 0, :8, :8] == 40).all() and (img[0, 0, :8, 8:] == 0).all()
    assert (img[0, 0, 8:, :8] == 0).all() and (img[0, 0, 8:, 8:] == 80).all()
    assert (img[1, 0, :8, 8:] == 10).all() and img[1].sum() == 10 * 64
    assert tiles_to_labels(tiles).tolist() == [[0, 0, 0, 1, 0, 0, 0, 1, 0, 0], [1] + [0] * 9]


def test_spec_pairs_are_disjoint_within_a_group():
    spec = make_spec(groups=6, pairs_per_group=3, strength=0.9, max_extra=1, seed=4)
    assert spec.pairs.shape == (6, 3, 2)
    for g in range(6):
        assert len(set(spec.pairs[g].ravel().tolist())) == 6


def test_exact_moments_match_a_large_sample():
    spec = make_spec(groups=2, pairs_per_group=2, strength=0.7, max_extra=2, seed=1)
    p, pp = group_moments(spec)
    y = tiles_to_labels(draw_tiles(spec, np.zeros(200_000, dtype=np.int64), np.random.default_rng(0)))
    np.testing.assert_allclose(y.mean(axis=0), p[0], atol=0.005)
    np.testing.assert_allclose(y.T.astype(float) @ y / len(y), pp[0], atol=0.005)
    np.testing.assert_allclose(np.diag(phi(p[0], pp[0])), 1.0)


def test_realized_cooccurrence_per_client_matches_its_spec(big):
    parts = partition(big.y_train, PartitionConfig(kind="natural", num_clients=10), 10, 0, big.groups)
    spec = make_spec(10, 2, 0.8, 2, 0)
    p, pp = group_moments(spec)
    true_group = np.asarray(big.extras["true_group_corr"])
    for idx in parts:
        (g,) = np.unique(big.groups[idx])  # natural partition: one pattern group per client
        y = big.y_train[idx].astype(float)
        np.testing.assert_allclose(y.mean(axis=0), p[g], atol=0.06)
        np.testing.assert_allclose(y.T @ y / len(y), pp[g], atol=0.06)
        r = phi_correlation(y, eps=0.0).numpy()
        assert np.abs(r - true_group[g]).max() < 0.15
        for a, b in spec.pairs[g]:  # the client's favoured pairs co-occur strongly...
            assert r[a, b] > 0.5 and true_group[g][a, b] > 0.5


def test_correlation_drifts_across_clients(big):
    # A pair favoured by one group only is strongly positive there and negative in most other groups.
    spec = make_spec(10, 2, 0.8, 2, 0)
    owners: dict[tuple[int, int], list[int]] = {}
    for g in range(10):
        for a, b in spec.pairs[g]:
            owners.setdefault((int(a), int(b)), []).append(g)
    true_group = np.asarray(big.extras["true_group_corr"])
    solo = [(pair, gs[0]) for pair, gs in owners.items() if len(gs) == 1]
    assert solo
    for (a, b), g in solo:
        others = [true_group[h][a, b] for h in range(10) if h != g]
        assert true_group[g][a, b] > 0.5 and np.median(others) < 0.0


def test_test_split_follows_the_global_pattern(big):
    truth = np.asarray(big.extras["true_corr"])
    assert truth.shape == (10, 10)
    np.testing.assert_allclose(truth, truth.T)
    np.testing.assert_allclose(np.diag(truth), 1.0)
    realized = phi_correlation(big.y_test, eps=0.0).numpy()
    assert np.abs(realized - truth).max() < 0.1
    # The global truth is far from any single client's pattern: that is the drift.
    group = np.asarray(big.extras["true_group_corr"])
    assert min(np.linalg.norm(group[g] - truth) for g in range(10)) > 1.0


def test_bad_params_are_refused():
    with pytest.raises(ConfigError, match="unknown data.params"):
        load_dataset(DataConfig(name="digits_mosaic", params={"n_trian": 5}))
    with pytest.raises(ConfigError, match="pairs_per_group"):
        load_dataset(DataConfig(name="digits_mosaic", params={"pairs_per_group": 6}))


def test_methods_do_not_see_the_true_correlation():
    from fedcore.data.build import build

    cfg = config_from_dict({"data": {"name": "digits_mosaic", "params": {"n_train": 200, "n_test": 50}},
                            "partition": {"kind": "natural", "num_clients": 10}, "noise": {"type": "none"}})
    fed = build(cfg)
    assert "true_corr" in fed.meta["extras"]  # metrics read it
    extras = fed.view().meta["extras"]
    assert "group_pairs" in extras and not any(k.startswith("true_") for k in extras)


def test_a_digit_a_group_never_shows_has_zero_correlation_not_nan():
    # Prepare: every mosaic is one of its group's two pairs (strength 1, no extras), so each group
    # shows four digits and never the other six (p = 0 there: 0 / 0 without phi's guard).
    ds = load_dataset(DataConfig(name="digits_mosaic", params={"n_train": 100, "n_test": 50, "pairs_per_group": 2,
                                                               "strength": 1.0, "max_extra": 0}))
    r = ds.extras["true_group_corr"][0]
    (a, b), (c, _) = ds.extras["group_pairs"][0]
    absent = np.setdiff1d(np.arange(10), ds.extras["group_pairs"][0].ravel())
    # Assert: the absent digits correlate with nothing; a pair's digits always co-occur (1), and
    # the two pairs never do (-1).
    assert not np.isnan(ds.extras["true_group_corr"]).any() and not np.isnan(ds.extras["true_corr"]).any()
    assert np.all(r[absent] == 0.0) and np.all(r[:, absent] == 0.0)
    assert r[a, b] == pytest.approx(1.0) and r[a, c] == pytest.approx(-1.0)
