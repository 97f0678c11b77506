"""Multi-label noise scenes (missing / extra / flip) and the label_sets partition."""

from __future__ import annotations

import numpy as np
import pytest

from fedcore.config import NoiseConfig, PartitionConfig, RateConfig
from fedcore.data.build import build
from fedcore.data.noise_multilabel import corrupt_client, inject_multilabel_noise, realized_rate
from fedcore.data.partition import partition
from fedcore.errors import ConfigError
from fedcore.registries import config_from_dict


def _labels(n: int = 400, c: int = 6, seed: int = 0) -> np.ndarray:
    return (np.random.default_rng(seed).random((n, c)) < 0.3).astype(np.uint8)


def _cfg(kind: str, **kw) -> NoiseConfig:
    return NoiseConfig(type=kind, **kw)


@pytest.mark.parametrize("kind", ["missing", "extra", "flip"])
def test_exact_counts_per_label(kind: str):
    # Prepare: labels 0..2 held by 20, 11 and 0 samples of 50.
    y = np.zeros((50, 3), dtype=np.uint8)
    y[:20, 0] = 1
    y[10:21, 1] = 1
    # Execute
    out = corrupt_client(y, kind, 0.25, np.random.default_rng(0))
    # Assert: round(0.25 * 20) = 5 and round(0.25 * 11) = round(2.75) = 3 per operation; label 2 untouched.
    dropped = ((y == 1) & (out == 0)).sum(axis=0).tolist()
    added = ((y == 0) & (out == 1)).sum(axis=0).tolist()
    assert dropped == ([5, 3, 0] if kind in ("missing", "flip") else [0, 0, 0])
    assert added == ([5, 3, 0] if kind in ("extra", "flip") else [0, 0, 0])
    assert realized_rate(y, out, kind) == pytest.approx(8 / 31)


def test_extra_is_capped_by_the_samples_lacking_the_label():
    y = np.ones((4, 1), dtype=np.uint8)
    y[0] = 0
    out = corrupt_client(y, "extra", 1.0, np.random.default_rng(0))
    assert out.tolist() == [[1]] * 4


def test_scene_phi_rates_and_flags():
    y = _labels()
    parts = np.array_split(np.arange(len(y)), 8)
    cfg = _cfg("missing", noisy_client_fraction=0.5, rate=RateConfig(kind="linspace", min=0.2, max=0.8))
    scene = inject_multilabel_noise(y, parts, cfg, seed=3)
    assert scene.is_noisy_client.sum() == 4
    np.testing.assert_allclose(sorted(scene.target_rate[scene.is_noisy_client]), [0.2, 0.4, 0.6, 0.8])
    for cid, p in enumerate(parts):
        if scene.is_noisy_client[cid]:
            assert scene.noise_type[cid] == "missing"
            assert abs(scene.realized_rate[cid] - scene.target_rate[cid]) < 0.05
            assert (scene.y_noisy[p] <= y[p]).all()  # only drops
        else:
            np.testing.assert_array_equal(scene.y_noisy[p], y[p])
            assert scene.realized_rate[cid] == 0.0 and scene.noise_type[cid] == "none"
    np.testing.assert_array_equal(scene.is_noisy_sample, (scene.y_noisy != y).any(axis=1))
    np.testing.assert_array_equal(scene.y_true, y)
    again = inject_multilabel_noise(y, parts, cfg, seed=3)
    np.testing.assert_array_equal(again.y_noisy, scene.y_noisy)


def test_flip_realized_rate_and_none():
    y = _labels(seed=1)
    parts = np.array_split(np.arange(len(y)), 4)
    scene = inject_multilabel_noise(y, parts, _cfg("flip", rate=RateConfig(kind="fixed", value=0.3)), seed=0)
    assert scene.is_noisy_client.all()
    np.testing.assert_allclose(scene.realized_rate, 0.3, atol=0.02)
    clean = inject_multilabel_noise(y, parts, _cfg("none"), seed=0)
    assert not clean.is_noisy_sample.any() and not clean.is_noisy_client.any()


def test_single_label_types_are_refused():
    with pytest.raises(ConfigError, match="single-label"):
        inject_multilabel_noise(_labels(), [np.arange(400)], _cfg("symmetric"), seed=0)


def test_build_dispatches_multilabel_noise():
    cfg = config_from_dict({
        "data": {"name": "digits_mosaic", "params": {"n_train": 500, "n_test": 100, "groups": 5}},
        "partition": {"kind": "natural", "num_clients": 5},
        "noise": {"type": "extra", "phi": 0.4, "rate": {"kind": "fixed", "value": 0.5}},
    })
    fed = build(cfg)
    assert fed.task == "multi" and fed.y_train.shape == (500, 10)
    assert fed.truth.is_noisy_client.sum() == 2
    assert (fed.y_train.numpy() >= fed.truth.y_true).all()
    assert np.asarray(fed.meta["extras"]["true_corr"]).shape == (10, 10)
    with pytest.raises(ConfigError, match="multi-label"):
        build(cfg.model_copy(update={"noise": NoiseConfig(type="pairflip")}))


# -- label_sets partition -----------------------------------------------------------------


def test_label_sets_partition_covers_and_skews():
    y = _labels(n=2000, c=4, seed=2)
    cfg = PartitionConfig(kind="label_sets", num_clients=5, alpha=0.1, min_size=20)
    parts = partition(y, cfg, 4, seed=0)
    assert sorted(np.concatenate(parts).tolist()) == list(range(2000))
    assert min(len(p) for p in parts) >= 20
    again = partition(y, cfg, 4, seed=0)
    assert all((a == b).all() for a, b in zip(parts, again, strict=True))
    # Dir(0.1) per label set: the largest set is concentrated on few clients.
    _, ids, counts = np.unique(y, axis=0, return_inverse=True, return_counts=True)
    top = np.flatnonzero(ids.reshape(-1) == np.argmax(counts))
    share = [np.isin(top, p).mean() for p in parts]
    assert max(share) > 0.4


def test_label_sets_on_single_label_equals_dirichlet():
    y = np.random.default_rng(0).integers(0, 5, 300)
    a = partition(y, PartitionConfig(kind="label_sets", num_clients=4, alpha=0.5), 5, seed=1)
    b = partition(y, PartitionConfig(kind="dirichlet", num_clients=4, alpha=0.5), 5, seed=1)
    assert all((p == q).all() for p, q in zip(a, b, strict=True))
