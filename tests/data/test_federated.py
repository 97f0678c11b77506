"""The FederatedDataset artifact: round trip, tamper detection, and the truth-free view."""

import json

import numpy as np
import pytest
import torch

from fedcore.data.build import build
from fedcore.data.federated import FederatedDataset
from fedcore.errors import ArtifactError, GroundTruthAccessError
from fedcore.registries import load_config


@pytest.fixture(scope="module")
def fed():
    return build(load_config("configs/quickstart.yaml"))


def test_round_trip_equality(fed, tmp_path):
    out = fed.save(tmp_path / "art")
    back = FederatedDataset.load(out)
    for name in ("x_train", "y_train", "x_test", "y_test"):
        assert torch.equal(getattr(fed, name), getattr(back, name))
    assert all(np.array_equal(a, b) for a, b in zip(fed.client_indices, back.client_indices, strict=True))
    assert np.array_equal(fed.truth.y_true, back.truth.y_true)
    assert np.array_equal(fed.truth.is_noisy_sample, back.truth.is_noisy_sample)
    assert back.meta["data_hash"] == fed.meta["data_hash"] and back.sha256 == fed.sha256
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["format_version"] == 1 and set(manifest["files"]) == {"data.pt", "truth.pt", "scene.json"}


def test_realized_rates_match_config(fed):
    cfg = load_config("configs/quickstart.yaml")
    t = fed.truth
    noisy = t.is_noisy_client
    assert noisy.sum() == round(cfg.noise.noisy_client_fraction * cfg.partition.num_clients)
    lo, hi = cfg.noise.rate.min, cfg.noise.rate.max
    assert ((t.target_rate[noisy] >= lo) & (t.target_rate[noisy] <= hi)).all()
    sizes = np.array([len(p) for p in fed.client_indices])
    # Per-class rounding bounds the gap between realized and target rate by (#classes / 2) / n_k.
    assert (np.abs(t.realized_rate - t.target_rate) <= 5 / sizes).all()


@pytest.mark.parametrize("victim", ["data.pt", "truth.pt", "scene.json"])
def test_flipped_byte_is_detected(fed, tmp_path, victim):
    out = fed.save(tmp_path / "art")
    f = out / victim
    raw = bytearray(f.read_bytes())
    raw[len(raw) // 2] ^= 0xFF
    f.write_bytes(bytes(raw))
    with pytest.raises(ArtifactError, match=f"corrupt: {victim}"):
        FederatedDataset.load(out)


def test_truncated_and_missing_files(fed, tmp_path):
    out = fed.save(tmp_path / "art")
    (out / "data.pt").write_bytes((out / "data.pt").read_bytes()[:100])
    with pytest.raises(ArtifactError, match="corrupt"):
        FederatedDataset.load(out)
    (out / "truth.pt").unlink()
    with pytest.raises(ArtifactError):
        FederatedDataset.load(out)
    with pytest.raises(ArtifactError, match="no manifest"):
        FederatedDataset.load(tmp_path)


def test_save_replaces_atomically_and_refuses_foreign_dirs(fed, tmp_path):
    out = fed.save(tmp_path / "art")
    fed.save(out)  # overwrite an artifact in place
    assert FederatedDataset.load(out).sha256 == fed.sha256
    foreign = tmp_path / "mine"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("keep me")
    with pytest.raises(ArtifactError, match="not a fedcore artifact"):
        fed.save(foreign)
    assert (foreign / "notes.txt").read_text() == "keep me"
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temp leftovers


@pytest.mark.parametrize("damage", [
    lambda m: m.pop("meta"),
    lambda m: m.update(files=sorted(m["files"])),  # the right names, as a list
    lambda m: m["files"].update({"data.pt": 7}),
])
def test_manifest_of_the_wrong_shape_is_corrupt(fed, tmp_path, damage):
    # Valid JSON that is not a manifest used to crash `load` with a KeyError/AttributeError traceback.
    out = fed.save(tmp_path / "art")
    manifest = json.loads((out / "manifest.json").read_text())
    damage(manifest)
    (out / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(ArtifactError, match="corrupt manifest.json; re-create it"):
        FederatedDataset.load(out)


def test_save_onto_a_file_is_refused_and_keeps_it(fed, tmp_path):
    mine = tmp_path / "notes.txt"
    mine.write_text("keep me")
    with pytest.raises(ArtifactError, match="not a fedcore artifact; choose another --out"):
        fed.save(mine)
    assert mine.read_text() == "keep me"
    assert [p.name for p in tmp_path.iterdir()] == ["notes.txt"]  # no temp leftovers


def test_unsupported_scheme_is_named(tmp_path):
    with pytest.raises(ArtifactError, match="'gs://bucket/art' has an unsupported scheme; use a local dir or s3://"):
        FederatedDataset.load("gs://bucket/art")


def test_view_hides_ground_truth(fed):
    view = fed.view()
    for name in ("y_true", "truth", "is_noisy_sample", "is_noisy_client", "realized_rate"):
        with pytest.raises(GroundTruthAccessError):
            getattr(view, name)
        assert not hasattr(view, name)
    # Nothing the view holds is the ground-truth label vector.
    held = [getattr(view, slot) for slot in type(view).__slots__]
    truth = torch.as_tensor(fed.truth.y_true)
    assert not any(torch.is_tensor(v) and v.shape == truth.shape and torch.equal(v, truth) for v in held)
    assert torch.equal(view.y_train, fed.y_train) and view.num_clients == fed.num_clients
