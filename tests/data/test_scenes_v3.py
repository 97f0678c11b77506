"""scenes_v3: matched client marginals with drifting co-occurrence, several scenes or none per image,
occluded (context-only) labels and lognormal client sizes."""

from __future__ import annotations

import numpy as np
import pytest

from fedcore.data.scenes import _phi
from fedcore.data.scenes_v3 import DEFAULTS, client_sizes, coupled_pair, make_laws, moments, visible
from fedcore.errors import ConfigError


def _laws(**kw):
    return make_laws({**DEFAULTS, **kw}, np.random.default_rng(0))


def test_client_marginals_match_while_their_co_occurrence_differs():
    blocks, laws = _laws(groups=20)
    mom = [moments(*law) for law in laws]
    p = np.stack([m[0] for m in mom])
    np.testing.assert_allclose(p, DEFAULTS["scene_q"] * DEFAULTS["label_q"], atol=1e-9)  # exact law
    corr = np.stack([_phi(*m) for m in mom])
    spread = corr.max(axis=0) - corr.min(axis=0)
    assert spread[~np.eye(10, dtype=bool)].max() > 0.5  # some pair's correlation differs a lot across clients
    # Drawn samples keep the match: each client's empirical marginals sit within sampling error.
    rng = np.random.default_rng(1)
    for states, probs in laws[:5]:
        y = states[rng.choice(len(probs), 4000, p=probs / probs.sum())]
        np.testing.assert_allclose(y.mean(axis=0), 0.24, atol=0.03)


def test_images_hold_several_scenes_or_none():
    blocks, laws = _laws(groups=3)
    states, probs = laws[0]
    probs = probs / probs.sum()
    scenes = np.stack([states[:, b].max(axis=1) for b in blocks], axis=1).sum(axis=1)
    assert probs[scenes == 0].sum() > 0.1 and probs[scenes >= 2].sum() > 0.1


def test_coupled_pair_keeps_the_marginals_and_clips_rho():
    for rho in (-0.9, 0.0, 0.9):
        j = coupled_pair(0.6, rho)
        np.testing.assert_allclose(j.sum(), 1.0)
        np.testing.assert_allclose(j.sum(axis=0)[1], 0.6)
        assert j.min() >= -1e-12


def test_occlusion_hides_tiles_but_keeps_the_labels_and_fits_the_grid():
    rng = np.random.default_rng(0)
    y = (rng.random((5000, 10)) < 0.5).astype(np.uint8)
    vis = visible(y, 0.25, 4, rng)
    assert np.all(vis <= y) and vis.sum(axis=1).max() <= 4
    shown = vis[y == 1].mean()
    assert shown < 0.75  # occluded, and overflow occludes more


def test_client_sizes_are_lognormal_with_a_floor_and_sum_to_n():
    sizes = client_sizes(4000, 100, 1.0, 8, np.random.default_rng(0))
    assert sizes.sum() == 4000 and sizes.min() >= 8 and sizes.max() > 5 * np.median(sizes)
    with pytest.raises(ConfigError, match="min_size"):
        client_sizes(100, 100, 1.0, 8, np.random.default_rng(0))


def test_loader_builds_a_multilabel_set_whose_truth_never_reaches_a_method():
    from fedcore.config import DataConfig
    from fedcore.data.datasets import load_dataset

    raw = load_dataset(DataConfig(name="scenes_v3", params={"tiles": "digits", "n_train": 400, "n_test": 200,
                                                             "groups": 20}))
    assert raw.task == "multi" and raw.x_train.shape == (400, 1, 24, 24) and len(np.unique(raw.groups)) == 20
    assert np.all(raw.y_train_noisy <= raw.y_train)  # annotations drop the never-annotated labels only
    assert {k for k in raw.extras if k.startswith("true_")} == {"true_corr", "true_group_corr", "true_blocks",
                                                                "true_unannotated"}
    with pytest.raises(ConfigError, match="unknown data.params"):
        load_dataset(DataConfig(name="scenes_v3", params={"private_p": 0.5}))


def test_v3_preset_validates():
    from fedcore.methods.registry import build_method
    from fedcore.registries import load_config

    cfg = load_config("configs/fmnist/fedharmony_scenes_v3.yaml")
    assert cfg.data.name == "scenes_v3" and cfg.partition.num_clients == 100
    assert cfg.train.client_fraction * cfg.partition.num_clients >= 50
    # Its method section is the v3 reading that fedharmony.sh's `v3` row runs at the chosen lam.
    p = build_method(cfg).params
    assert (p.timing, p.teacher, p.weighting, p.diagonal, p.scale, p.lam_schedule, p.gamma_by, p.mask_unannotated,
            p.lam) == ("start", "pooled", "abs", True, "sum", "caa", "median", True, 0.1)
