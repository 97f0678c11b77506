"""The user's own federation (fedcore/data/files.py): image folders, tables and arrays, built here from tiny
images, loaded, partitioned by their own clients, and kept apart from their trusted labels."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from PIL import Image

from fedcore.config import DataConfig, ExperimentConfig
from fedcore.data.build import build_federated_dataset
from fedcore.data.datasets import load_dataset
from fedcore.data.federated import scene_report
from fedcore.engine.types import Estimates
from fedcore.errors import GroundTruthAccessError
from fedcore.io import storage
from fedcore.metrics.scoring import Scorer

CLASSES = ("cat", "dog", "emu")
CLIENTS = ("alice", "bob", "carol")


def shade(k: int) -> int:
    return 30 + 90 * k  # one grey level per class: a model can tell them apart


def png(path: Path, value: int, side: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(np.full((side, side + 2, 3), value, np.uint8)).save(path)


def write_tree(root: Path, clients: tuple[str, ...] | None = CLIENTS, per: int = 5, test: bool = True) -> Path:
    """ROOT[/CLIENT]/CLASS/i.png of mixed sizes, and ROOT/test/CLASS/ when `test`."""
    for c, client in enumerate(clients or ("",)):
        for k, cls in enumerate(CLASSES):
            for i in range(per + c):
                png(root / client / cls / f"{i}.png", shade(k), 6 + i)
    for k, cls in enumerate(CLASSES if test else ()):
        for i in range(2):
            png(root / "test" / cls / f"{i}.jpg", shade(k), 9)
    return root


def table_rows(root: Path, n_per: int = 6) -> pd.DataFrame:
    """Rows over CLIENTS x CLASSES: the label as given is wrong on every sixth row (an emu given as a cat);
    rows 2 and 5 of each client carry a trusted label (5 disagrees); each client's last 3 rows are test."""
    rows = []
    for client in CLIENTS:
        for i in range(n_per * len(CLASSES)):
            k = i % len(CLASSES)
            png(root / "img" / f"{client}_{i}.png", shade(k), 8)
            given = CLASSES[(k + 1) % 3] if i % 6 == 5 else CLASSES[k]
            rows.append({"path": f"img/{client}_{i}.png", "label": given, "client": client,
                         "trusted": CLASSES[k] if i in (2, 5) else "", "split": "train"})
        rows[-1]["split"] = rows[-2]["split"] = rows[-3]["split"] = "test"
    return pd.DataFrame(rows)


def write_table(root: Path, fmt: str = "csv", df: pd.DataFrame | None = None) -> Path:
    df = table_rows(root) if df is None else df
    if fmt == "csv":
        df.to_csv(root / "labels.csv", index=False)
    else:
        df.to_parquet(root / "labels.parquet")
    return root


def write_npz(root: Path, n: int = 36, **extra: np.ndarray) -> Path:
    y = np.arange(n) % 3
    x = np.stack([np.full((7, 7), shade(k), np.uint8) for k in y])
    arrays = {"x": x, "y": np.array(CLASSES)[y], "client": np.array(CLIENTS)[np.arange(n) % 3], **extra}
    root.mkdir(parents=True, exist_ok=True)
    np.savez(root / "data.npz", **arrays)
    return root


def cfg_for(name: str, root: Path, **over) -> ExperimentConfig:
    base = {"data": {"name": name, "root": str(root), "image_size": 8},
            "partition": {"kind": "natural", "num_clients": 3, "min_size": 2},
            "noise": {"type": "real"}, "model": {"name": "mlp"}}
    for key, value in over.items():
        section, field = key.split("__")
        base.setdefault(section, {})[field] = value
    return ExperimentConfig.model_validate(base)


# -- loading ------------------------------------------------------------------------------------


def test_imagefolder_with_clients_and_test_folder(tmp_path):
    ds = load_dataset(DataConfig(name="imagefolder", root=str(write_tree(tmp_path / "tree")), image_size=8))
    assert ds.class_names == list(CLASSES) and ds.num_classes == 3
    # Grey files (R = G = B) give one channel, as the models of grey benchmarks get.
    assert ds.x_train.shape == (3 * (5 + 6 + 7), 1, 8, 8) and ds.x_test.shape == (6, 1, 8, 8)
    assert ds.group_names == list(CLIENTS)
    np.testing.assert_array_equal(np.bincount(ds.groups), [15, 18, 21])
    np.testing.assert_array_equal(ds.y_test, [0, 0, 1, 1, 2, 2])
    assert ds.x_train[ds.y_train == 1].min() == ds.x_train[ds.y_train == 1].max() == shade(1)  # resized, intact
    np.testing.assert_array_equal(ds.y_train_noisy, ds.y_train)
    assert not ds.y_train_known.any() and ds.notes == []


def test_one_coloured_image_keeps_three_channels_for_both_splits(tmp_path):
    root = write_tree(tmp_path / "tree")
    Image.fromarray(np.full((8, 8, 3), (200, 10, 10), np.uint8)).save(root / "test" / "cat" / "red.png")
    ds = load_dataset(DataConfig(name="imagefolder", root=str(root), image_size=8))
    assert ds.x_train.shape[1] == ds.x_test.shape[1] == 3
    assert ((ds.x_test[:, 0] == 200) & (ds.x_test[:, 1] == 10)).all(axis=(1, 2)).sum() == 1  # the red one


def test_imagefolder_without_clients_or_test_holds_out_a_noisy_test_set(tmp_path, caplog):
    root = write_tree(tmp_path / "tree", clients=None, per=8, test=False)
    with caplog.at_level(logging.WARNING, logger="fedcore.data.files"):
        ds = load_dataset(DataConfig(name="imagefolder", root=str(root), image_size=8, test_fraction=0.25))
    assert ds.groups is None and len(ds.y_test) == 6 and len(ds.y_train) == 18
    assert "labels are as noisy as training's" in ds.notes[0] and "as noisy as training's" in caplog.text
    fed = build_federated_dataset(cfg_for("imagefolder", root, partition__kind="iid"))
    assert fed.num_clients == 3 and "as noisy as training's" in " ".join(fed.meta["notes"])


@pytest.mark.parametrize("fmt", ["csv", "parquet"])
def test_table_observed_and_trusted_labels(tmp_path, fmt):
    ds = load_dataset(DataConfig(name="table", root=str(write_table(tmp_path, fmt)), image_size=8))
    assert ds.class_names == list(CLASSES) and ds.group_names == list(CLIENTS) and len(ds.y_test) == 9
    wrong = ds.y_train_noisy != ds.y_train
    assert ds.y_train_known.sum() == 6 and wrong.sum() == 3 and (wrong <= ds.y_train_known).all()


def test_table_of_pixels_and_no_client_column(tmp_path):
    pixels = [" ".join([str(shade(k))] * 16) for k in np.arange(12) % 3]
    write_table(tmp_path, "csv", pd.DataFrame({"pixels": pixels, "label": np.arange(12) % 3}))
    ds = load_dataset(DataConfig(name="table", root=str(tmp_path), test_fraction=0.25))
    assert ds.x_train.shape == (9, 1, 4, 4) and ds.class_names == ["0", "1", "2"] and ds.groups is None


def test_multi_label_table_gives_a_multi_task(tmp_path):
    df = table_rows(tmp_path).drop(columns=["trusted"])
    df["label"] = [lab if i % 2 else f"{lab}|emu" for i, lab in enumerate(df["label"])]
    ds = load_dataset(DataConfig(name="table", root=str(write_table(tmp_path, df=df)), image_size=8))
    assert ds.task == "multi" and ds.y_train.shape[1] == 3 and ds.y_train.dtype == np.uint8
    assert ds.y_train[:, 2].sum() > ds.y_train[:, 0].sum()  # emu is on every other row


def test_arrays_with_split_and_trusted(tmp_path):
    n = 36
    split = np.where(np.arange(n) >= 30, "test", "train")
    trusted = np.where(np.arange(n) < 6, np.array(CLASSES)[np.arange(n) % 3], "")
    ds = load_dataset(DataConfig(name="arrays", root=str(write_npz(tmp_path, split=split, trusted=trusted))))
    assert ds.x_train.shape == (30, 1, 7, 7) and ds.x_test.shape == (6, 1, 7, 7)
    assert ds.y_train_known.sum() == 6 and ds.group_names == list(CLIENTS)


# -- partition, noise and what methods see --------------------------------------------------------


def test_natural_clients_carry_their_names(tmp_path):
    fed = build_federated_dataset(cfg_for("imagefolder", write_tree(tmp_path / "tree")))
    assert fed.meta["client_names"] == ["carol", "bob", "alice"]  # the largest first
    assert [len(p) for p in fed.client_indices] == [21, 18, 15]


def test_methods_see_only_the_labels_as_given(tmp_path):
    root = write_table(tmp_path)
    ds = load_dataset(DataConfig(name="table", root=str(root), image_size=8))
    fed = build_federated_dataset(cfg_for("table", root))
    view = fed.view()
    for name in ("y_true", "truth", "y_true_known", "is_noisy_sample"):
        with pytest.raises(GroundTruthAccessError):
            getattr(view, name)
    np.testing.assert_array_equal(view.y_train.numpy(), ds.y_train_noisy)
    trusted = torch.as_tensor(fed.truth.y_true)
    held = [getattr(view, slot) for slot in type(view).__slots__]
    assert not any(torch.is_tensor(v) and v.shape == trusted.shape and torch.equal(v, trusted) for v in held)
    assert "trusted" not in str(view.meta)
    # The truth knows the trusted labels: three given labels disagree with them.
    assert int(fed.truth.is_noisy_sample.sum()) == 3 and fed.truth.y_true_known.sum() == 6


def test_injected_noise_goes_on_the_labels_as_given(tmp_path):
    root = write_table(tmp_path)
    ds = load_dataset(DataConfig(name="table", root=str(root), image_size=8))
    fed = build_federated_dataset(cfg_for("table", root, noise__type="symmetric"))
    np.testing.assert_array_equal(fed.truth.y_true, ds.y_train_noisy)  # never the trusted labels
    assert fed.truth.is_noisy_sample.mean() > 0.2


def test_detection_is_scored_on_trusted_samples_only(tmp_path):
    fed = build_federated_dataset(cfg_for("table", write_table(tmp_path)))
    known, noisy = fed.truth.y_true_known, fed.truth.is_noisy_sample
    # Flag exactly the truly noisy samples, plus every untrusted one: only trusted samples count.
    masks = {c: noisy[p] | ~known[p] for c, p in enumerate(fed.client_indices)}
    out = Scorer(fed).samples(masks)
    assert out["precision"] == out["recall"] == out["f1_pooled"] == 1.0


def test_client_detection_is_scored_on_clients_with_trusted_samples(tmp_path):
    df = table_rows(tmp_path)
    alice, carol = df.client == "alice", df.client == "carol"
    df.loc[alice & (df.trusted != ""), "label"] = df.trusted  # alice agrees with every audit: a clean client
    df.loc[carol, "trusted"] = ""  # nobody audited carol: her truth is unknown
    fed = build_federated_dataset(cfg_for("table", write_table(tmp_path, df=df)))
    names = fed.meta["client_names"]
    truth = dict(zip(names, fed.truth.is_noisy_client.tolist(), strict=True))
    assert truth["alice"] is False and truth["bob"] is True
    # Flagging every client: alice is a false positive, carol is not scored at all.
    out = Scorer(fed)(Estimates(client_noisy={c: True for c in range(fed.num_clients)}), 0)
    assert out["detect/client_precision"] == 0.5 and out["detect/client_recall"] == 1.0


def test_without_trusted_labels_the_truth_metrics_are_absent(tmp_path):
    fed = build_federated_dataset(cfg_for("imagefolder", write_tree(tmp_path / "tree")))
    scorer = Scorer(fed)
    masks = {c: np.ones(len(p), bool) for c, p in enumerate(fed.client_indices)}
    assert scorer.samples(masks) == {}
    assert set(scorer.rates({0: 0.3, 1: 0.1})) == {"noise/rate_est/client_00", "noise/rate_est/client_01"}
    rep = scene_report(fed)
    assert rep["overall_noise_rate"] is None and rep["federation"]["trusted_agreement"] is None


def test_scene_report_carries_the_federation_summary(tmp_path):
    fed = build_federated_dataset(cfg_for("table", write_table(tmp_path)))
    summary = scene_report(fed)["federation"]
    assert [c["client"] for c in summary["clients"]] == list(CLIENTS)  # equal sizes: data order
    assert sum(summary["label_histogram"].values()) == len(fed.y_train)
    assert summary["trusted_agreement"]["trusted"] == 6 and summary["trusted_agreement"]["agree"] == 0.5


def test_an_s3_prefix_loads_like_the_local_folder(s3_bucket, tmp_path):
    root = write_tree(tmp_path / "src")
    storage.upload_dir(root, f"s3://{s3_bucket}/mine")
    local = load_dataset(DataConfig(name="imagefolder", root=str(root), image_size=8))
    remote = load_dataset(DataConfig(name="imagefolder", root=f"s3://{s3_bucket}/mine", image_size=8,
                                     cache_dir=str(tmp_path / "cache")))
    np.testing.assert_array_equal(remote.x_train, local.x_train)
    np.testing.assert_array_equal(remote.groups, local.groups)
    assert remote.group_names == local.group_names
