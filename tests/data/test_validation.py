"""Federated validation: the held-out split, its artifact, and what methods can (not) see."""

import numpy as np
import pytest
import torch

import fedcore.data.build as build_mod
from fedcore.data.datasets import RawDataset
from fedcore.data.federated import FederatedDataset
from fedcore.data.validation import held_out_count, split_validation
from fedcore.errors import ConfigError
from fedcore.registries import load_config
from fedcore.run import make_context


@pytest.mark.parametrize(("n", "fraction", "held"), [
    (10, 0.1, 1), (10, 0.25, 3), (15, 0.1, 2), (1, 0.5, 0), (2, 0.9, 1), (3, 0.01, 1), (40, 0.0, 0), (7, 0.99, 6)])
def test_held_out_count(n, fraction, held):
    # round half up, at least one when asked for, never the client's last sample
    assert held_out_count(n, fraction) == held


def test_split_is_disjoint_seeded_and_keeps_every_client_training():
    parts = [np.arange(0, 40), np.arange(40, 50), np.arange(50, 52), np.arange(52, 152)]
    a = split_validation(parts, 0.2, 5, seed=3)
    b = split_validation(parts, 0.2, 5, seed=3)
    assert all(np.array_equal(x, y) for x, y in zip(a.val, b.val, strict=True))
    assert [len(v) for v in a.val] == [8, 2, 1, 20]
    for p, t, v in zip(parts, a.train, a.val, strict=True):
        assert np.intersect1d(t, v).size == 0 and np.array_equal(np.union1d(np.union1d(t, v),
                                                                             np.intersect1d(p, a.server)), p)
        assert len(t) >= 1
    assert len(a.server) == 5 and np.intersect1d(a.server, np.concatenate(a.val)).size == 0
    assert not np.array_equal(split_validation(parts, 0.2, 0, seed=4).val[3], a.val[3])


def test_a_server_set_larger_than_the_clients_can_spare_is_refused():
    with pytest.raises(ConfigError, match="server_clean"):
        split_validation([np.arange(3), np.arange(3, 5)], 0.0, 4, seed=0)


def _id_images(n: int, start: int) -> np.ndarray:
    """uint8 images (n, 1, 8, 8) whose first two pixels spell the sample's id."""
    x = np.zeros((n, 1, 8, 8), dtype=np.uint8)
    ids = np.arange(start, start + n)
    x[:, 0, 0, 0], x[:, 0, 0, 1] = ids // 256, ids % 256
    return x


def _ids(x) -> set[int]:
    x = np.asarray(x)
    return set((x[:, 0, 0, 0].astype(int) * 256 + x[:, 0, 0, 1]).tolist())


@pytest.fixture
def id_dataset(monkeypatch):
    rng = np.random.default_rng(0)
    raw = RawDataset(name="ids", x_train=_id_images(600, 0), y_train=rng.integers(0, 5, 600),
                     x_test=_id_images(100, 10_000), y_test=rng.integers(0, 5, 100), num_classes=5)
    monkeypatch.setattr(build_mod, "load_dataset", lambda cfg: raw)
    return raw


def test_validation_samples_leave_the_training_arrays_and_keep_their_noisy_labels(id_dataset, tmp_path):
    sets = ["partition.num_clients=6", "noise.rate.kind=fixed", "noise.rate.value=0.5"]
    plain = build_mod.build(load_config("configs/quickstart.yaml", sets))
    fed = build_mod.build(load_config("configs/quickstart.yaml", [
        *sets, "data.validation.fraction=0.2", "data.validation.server_clean=30"]))
    val, train, test = _ids(fed.val.x), _ids(fed.x_train.numpy()), _ids(fed.x_test.numpy())
    assert len(val) == len(fed.val.y) > 0 and not val & train and not val & test and not _ids(fed.val.x_server) & train
    assert len(train) + len(val) + len(fed.val.y_server) == 600 and fed.meta["num_train"] == len(train)
    # Same scene as without validation: a held-out sample has the noisy label its client was given.
    label_of = dict(zip(sorted(_ids(plain.x_train.numpy())), plain.y_train.numpy(), strict=True))
    assert all(label_of[i] == y for i, y in zip(_ids_list(fed.val.x), fed.val.y, strict=True))
    assert all(label_of[i] == y for i, y in zip(_ids_list(fed.x_train.numpy()), fed.y_train.numpy(), strict=True))
    # The server set carries true labels, the owners name each held-out sample's client.
    true_of = dict(zip(sorted(_ids(plain.x_train.numpy())), plain.truth.y_true, strict=True))
    assert all(true_of[i] == y for i, y in zip(_ids_list(fed.val.x_server), fed.val.y_server, strict=True))
    owner_of = {i: c for c, p in enumerate(plain.client_indices) for i in _ids_list(plain.x_train.numpy()[p])}
    assert all(owner_of[i] == c for i, c in zip(_ids_list(fed.val.x), fed.val.owner, strict=True))
    back = FederatedDataset.load(fed.save(tmp_path / "art"))
    assert np.array_equal(back.val.x, fed.val.x) and np.array_equal(back.val.owner, fed.val.owner)
    assert back.meta["validation"]["num_val"] == len(val)


def _ids_list(x) -> list[int]:
    x = np.asarray(x)
    return (x[:, 0, 0, 0].astype(int) * 256 + x[:, 0, 0, 1]).tolist()


def test_no_client_view_holds_a_validation_label(id_dataset):
    cfg = load_config("configs/quickstart.yaml", ["data.validation.fraction=0.25", "train.device=cpu"])
    fed = build_mod.build(cfg)
    ctx = make_context(cfg, fed, torch.device("cpu"))
    val = _ids(fed.val.x)
    seen = set()
    for client in ctx.clients:
        seen |= _ids(ctx.store.x[client.indices].numpy())
    assert seen and not seen & val
    assert not _ids(ctx.view.x_train.numpy()) & val  # nor the whole method-facing view
    assert not hasattr(ctx.view, "val")


def test_without_validation_the_artifact_and_hashes_are_unchanged():
    cfg = load_config("configs/quickstart.yaml")
    assert "validation" not in cfg.hashed_dict()["data"] and "grad_clip" not in cfg.hashed_dict()["train"]
    with_val = load_config("configs/quickstart.yaml", ["data.validation.fraction=0.1"])
    assert with_val.data_hash() != cfg.data_hash()
    assert build_mod.build(cfg).val is None
