"""scenes_mosaic. Version 2: shared scene blocks, Dir client mixtures, private and never-annotated
labels, an equal-mixture test set, the exact truth, and the premise check of the data report.
Version 3: matched client marginals with drifting co-occurrence, several scenes or none per image,
occluded (context-only) labels and lognormal client sizes. And the version param itself."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from fedcore.config import DataConfig
from fedcore.data.datasets import load_dataset, reads_root
from fedcore.data.scenes import (
    DEFAULTS,
    client_moments,
    client_sizes,
    coupled_pair,
    draw_labels,
    make_laws,
    make_spec,
    moments,
    place,
    render,
    visible,
)
from fedcore.errors import ConfigError
from fedcore.registries import config_from_dict
from fedcore.stats.correlation import phi, phi_correlation
from tests.data.test_loaders import write_mnist

SMALL = {"n_train": 400, "n_test": 200}
V3_SMALL = {"tiles": "digits", "n_train": 400, "n_test": 200, "groups": 20}


def _spec(**kw):
    return make_spec({**DEFAULTS[2], **kw})


def _fed(kind="natural", **params):
    from fedcore.data.build import build

    cfg = config_from_dict({"data": {"name": "scenes_mosaic", "params": params},
                            "partition": {"kind": kind, "num_clients": 10}, "noise": {"type": "none"}})
    return build(cfg)


def test_blocks_partition_the_labels_and_every_image_is_one_scene_plus_the_private_label():
    spec = _spec(unannotated=2)
    assert sorted(len(b) for b in spec.blocks) == [3, 3, 4]
    assert sorted(np.concatenate(spec.blocks).tolist()) == list(range(10))
    group = np.arange(5000) % 10
    y = draw_labels(spec, group, np.random.default_rng(0))
    assert y.sum(axis=1).min() >= 1 and y.sum(axis=1).max() <= 4  # fits the 2x2 grid
    for row, g in zip(y, group, strict=True):
        present = set(np.flatnonzero(row).tolist()) - {int(spec.private[g])}
        # all non-private labels come from one block (or the private label is the only one)
        assert not present or any(present <= set(b.tolist()) for b in spec.blocks)


def test_mixtures_are_dirichlet_draws_whose_concentration_is_alpha():
    sharp, flat = _spec(alpha=0.1, groups=200), _spec(alpha=100.0, groups=200)
    for spec in (sharp, flat):
        assert spec.mixtures.shape == (200, 3)
        np.testing.assert_allclose(spec.mixtures.sum(axis=1), 1.0)
    # Dir(0.1): most clients live in one scene; Dir(100): every client mixes all three about equally.
    assert np.median(sharp.mixtures.max(axis=1)) > 0.9
    assert np.abs(flat.mixtures - 1 / 3).max() < 0.15


def test_private_labels_are_distinct_and_appear_out_of_scene_on_their_own_client_only():
    spec = _spec(private_p=0.5, scene_p=0.7)
    assert sorted(spec.private.tolist()) == list(range(10))
    group = np.arange(40000) % 10
    y = draw_labels(spec, group, np.random.default_rng(1))
    home = {int(c): s for s, b in enumerate(spec.blocks) for c in b}
    scene_only = y.copy()
    scene_only[np.arange(len(y)), spec.private[group]] = 0  # each row without its own client's private label
    for g in range(10):
        priv = int(spec.private[g])
        # rows holding a label of another block than the private label's: scenes s != home(priv)
        foreign = np.zeros(len(y), dtype=bool)
        for s, b in enumerate(spec.blocks):
            if s != home[priv]:
                foreign |= scene_only[:, b].any(axis=1)
        out_of_scene = foreign & (y[:, priv] == 1)
        # Exact rate on its client: private_p * sum over foreign scenes of pi_g[s] * P(a tile is free | s),
        # a tile being taken only when all 4 labels of the 4-block are present (0.7 ** 3).
        free = [1.0 - (0.7 ** 3 if len(b) == 4 else 0.0) for b in spec.blocks]
        expected = 0.5 * sum(spec.mixtures[g, s] * free[s] for s in range(3) if s != home[priv])
        assert out_of_scene[group == g].mean() == pytest.approx(expected, abs=0.02)
        assert not out_of_scene[group != g].any()  # no other client puts it there


def test_exact_client_moments_match_a_large_sample():
    spec = _spec(alpha=1.0, scene_p=0.6, private_p=0.4)
    for g in (0, 3):
        p, joint = client_moments(spec, g)
        y = draw_labels(spec, np.full(100_000, g), np.random.default_rng(g)).astype(np.float64)
        np.testing.assert_allclose(y.mean(axis=0), p, atol=0.006)
        np.testing.assert_allclose(y.T @ y / len(y), joint, atol=0.006)


def test_tiles_hold_the_present_labels_at_random_places():
    y = np.array([[1, 0, 0, 1, 0, 0, 0, 0, 0, 1]] * 200, dtype=np.uint8)
    tiles = place(y, 4, np.random.default_rng(0))
    assert all(sorted(t[t >= 0].tolist()) == [0, 3, 9] for t in tiles)
    assert len({int(np.flatnonzero(t < 0)[0]) for t in tiles}) == 4  # the blank moves around
    pool = np.stack([np.full((8, 8), 10 * (c + 1), dtype=np.uint8) for c in range(10)])
    img = render(np.array([[3, -1, -1, 9]]), pool, np.arange(10), 2, np.random.default_rng(0))
    assert img.shape == (1, 1, 16, 16)
    assert (img[0, 0, :8, :8] == 40).all() and (img[0, 0, 8:, 8:] == 100).all() and img.sum() == 140 * 64


def test_never_annotated_labels_reach_methods_as_absent_and_metrics_as_present():
    fed = _fed(unannotated=2, **SMALL)
    unann = np.asarray(fed.meta["extras"]["true_unannotated"], dtype=bool)
    assert (unann.sum(axis=1) == 2).all()
    y_seen, y_true = fed.y_train.numpy(), fed.truth.y_true
    for cid, idx in enumerate(fed.client_indices):  # natural partition: client k = group k
        assert (y_seen[idx][:, unann[cid]] == 0).all()
        np.testing.assert_array_equal(y_seen[idx][:, ~unann[cid]], y_true[idx][:, ~unann[cid]])
    assert (y_true != y_seen).any()
    assert fed.truth.noise_type[0] == "unannotated"
    extras = fed.view().meta["extras"]  # hidden generative draws stay out of a method's reach
    assert extras["tiles"] == "digits" and not any(k.startswith("true_") for k in extras)


def test_test_split_is_the_equal_mixture_of_clients_with_every_label_annotated():
    ds = load_dataset(DataConfig(name="scenes_mosaic", params={"n_train": 1000, "n_test": 20000, "unannotated": 3}))
    spec = _spec(unannotated=3)
    p_mix = np.mean([client_moments(spec, g)[0] for g in range(10)], axis=0)
    np.testing.assert_allclose(ds.y_test.mean(axis=0), p_mix, atol=0.012)
    truth = np.asarray(ds.extras["true_corr"])
    np.testing.assert_allclose(phi_correlation(ds.y_test, eps=0.0).numpy(), truth, atol=0.04)
    # Within-block labels co-occur in the truth; labels of different blocks exclude each other.
    for b in spec.blocks:
        assert truth[b[0], b[1]] > 0.3
    assert truth[spec.blocks[0][0], spec.blocks[1][0]] < 0.0
    assert ds.x_train.shape == (1000, 1, 16, 16) and ds.x_test.shape == (20000, 1, 16, 16)


def test_premise_holds_on_the_drifted_split_and_is_trivial_on_an_iid_split():
    nat = _fed(unannotated=1)  # defaults: 4,000 mosaics, 10 clients, alpha 0.3
    from fedcore.data.federated import scene_report

    prem = scene_report(nat)["premise"]
    for labels in ("clean", "annotated"):
        assert prem[labels]["consensus"] < 0.75 * prem[labels]["own"]
    iid = scene_report(_fed(kind="iid", unannotated=1))["premise"]["clean"]
    assert iid["own"] < 0.5 * prem["clean"]["own"] and iid["consensus"] < 0.5 * prem["clean"]["consensus"]


def test_deterministic_in_the_seed_and_fashion_tiles_come_from_the_fashion_loader(tmp_path: Path):
    a = load_dataset(DataConfig(name="scenes_mosaic", params=SMALL))
    b = load_dataset(DataConfig(name="scenes_mosaic", params=SMALL))
    c = load_dataset(DataConfig(name="scenes_mosaic", params={**SMALL, "seed": 1}))
    np.testing.assert_array_equal(a.x_train, b.x_train)
    assert not np.array_equal(a.y_train, c.y_train)
    write_mnist(tmp_path, folder="FashionMNIST", n=(40, 20))
    ds = load_dataset(DataConfig(name="scenes_mosaic", root=str(tmp_path), params={**SMALL, "tiles": "fashion_mnist"}))
    assert ds.x_train.shape == (400, 1, 28, 28) and ds.class_names[0] == "T-shirt/top"


def test_bad_params_are_refused():
    with pytest.raises(ConfigError, match="unknown data.params"):
        load_dataset(DataConfig(name="scenes_mosaic", params={"block_size": [3]}))
    with pytest.raises(ConfigError, match="does not fit"):
        load_dataset(DataConfig(name="scenes_mosaic", params={"block_sizes": [5, 5]}))
    with pytest.raises(ConfigError, match="tiles"):
        load_dataset(DataConfig(name="scenes_mosaic", params={"tiles": "cifar"}))
    with pytest.raises(ConfigError, match="tile_px"):
        load_dataset(DataConfig(name="scenes_mosaic", params={"tile_px": 5}))


def test_data_prepare_prints_the_premise_and_the_scene_report_stores_it(tmp_path: Path):
    import json

    from typer.testing import CliRunner

    from fedcore.cli import app

    cfg = tmp_path / "cfg.yaml"
    cfg.write_text(json.dumps({"data": {"name": "scenes_mosaic", "params": {"unannotated": 1}},
                               "partition": {"kind": "natural", "num_clients": 10}, "noise": {"type": "none"}}))
    res = CliRunner().invoke(app, ["data", "prepare", str(cfg), "--out", str(tmp_path / "data")])
    assert res.exit_code == 0, res.output
    prem = json.loads((tmp_path / "data" / "scene.json").read_text())["premise"]
    clean = prem["clean"]
    assert len(clean["own_per_client"]) == 10 and clean["own"] == pytest.approx(np.mean(clean["own_per_client"]),
                                                                                abs=1e-3)
    assert (f"premise (clean labels): leave-one-out consensus to true correlation {clean['consensus']:.3f} "
            f"vs a client's own {clean['own']:.3f}") in " ".join(res.output.split())


def _laws(**kw):
    return make_laws({**DEFAULTS[3], **kw}, np.random.default_rng(0))


def test_client_marginals_match_while_their_co_occurrence_differs():
    blocks, laws = _laws(groups=20)
    mom = [moments(*law) for law in laws]
    p = np.stack([m[0] for m in mom])
    np.testing.assert_allclose(p, DEFAULTS[3]["scene_q"] * DEFAULTS[3]["label_q"], atol=1e-9)  # exact law
    corr = np.stack([phi(*m) for m in mom])
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
    raw = load_dataset(DataConfig(name="scenes_mosaic", params={"version": 3, **V3_SMALL}))
    assert raw.task == "multi" and raw.x_train.shape == (400, 1, 24, 24) and len(np.unique(raw.groups)) == 20
    assert np.all(raw.y_train_noisy <= raw.y_train)  # annotations drop the never-annotated labels only
    assert {k for k in raw.extras if k.startswith("true_")} == {"true_corr", "true_group_corr", "true_blocks",
                                                                "true_unannotated"}
    with pytest.raises(ConfigError, match="unknown data.params"):
        load_dataset(DataConfig(name="scenes_mosaic", params={"version": 3, "private_p": 0.5}))


def test_v3_preset_validates():
    from fedcore.methods.registry import build_method
    from fedcore.registries import load_config

    cfg = load_config("configs/fmnist/fedharmony_scenes_v3.yaml")
    assert (cfg.data.name, cfg.data.params["version"], cfg.partition.num_clients) == ("scenes_mosaic", 3, 100)
    assert cfg.train.client_fraction * cfg.partition.num_clients >= 50
    # Its method section is the v3 reading that fedharmony.sh's `v3` row runs at the chosen lam.
    p = build_method(cfg).params
    assert (p.timing, p.teacher, p.weighting, p.diagonal, p.scale, p.lam_schedule, p.gamma_by, p.mask_unannotated,
            p.lam) == ("start", "pooled", "abs", True, "sum", "caa", "median", True, 0.1)


def test_version_picks_the_process_and_the_old_name_loads_version_3():
    v2 = load_dataset(DataConfig(name="scenes_mosaic", params=SMALL))
    assert np.array_equal(v2.y_train, load_dataset(DataConfig(name="scenes_mosaic",
                                                               params={**SMALL, "version": 2})).y_train)
    v3 = load_dataset(DataConfig(name="scenes_mosaic", params={"version": 3, **V3_SMALL}))
    assert len(np.unique(v3.groups)) == 20 and "true_private" in v2.extras and "true_private" not in v3.extras
    # Configs that name the old dataset get the same data, under the name they gave.
    old = load_dataset(DataConfig(name="scenes_v3", params=V3_SMALL))
    assert old.name == "scenes_v3" and v3.name == "scenes_mosaic"
    for key in ("x_train", "y_train", "x_test", "y_test", "y_train_noisy"):
        np.testing.assert_array_equal(getattr(old, key), getattr(v3, key))
    np.testing.assert_array_equal(old.extras["true_group_corr"], v3.extras["true_group_corr"])
    # Version 3's default tiles are Fashion-MNIST's files, version 2's scikit-learn's digits.
    assert reads_root(DataConfig(name="scenes_mosaic", params={"version": 3}))
    assert reads_root(DataConfig(name="scenes_v3")) and not reads_root(DataConfig(name="scenes_mosaic"))


def test_a_bad_version_is_refused():
    with pytest.raises(ConfigError, match=r"version 4 is unknown; use one of \[2, 3\]"):
        load_dataset(DataConfig(name="scenes_mosaic", params={"version": 4}))
    assert not reads_root(DataConfig(name="scenes_mosaic", params={"version": [3]}))  # loading says why
    with pytest.raises(ConfigError, match=r"version \[3\] is unknown"):
        load_dataset(DataConfig(name="scenes_mosaic", params={"version": [3]}))
    with pytest.raises(ConfigError, match="fixed by the name"):
        load_dataset(DataConfig(name="scenes_v3", params={"version": 2}))
    # A version-3 param under version 2 names the version it was checked against.
    with pytest.raises(ConfigError, match=r"unknown data.params \['scene_q'\] for version 2"):
        load_dataset(DataConfig(name="scenes_mosaic", params={"scene_q": 0.5}))
