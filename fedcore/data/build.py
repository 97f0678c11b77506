"""Assemble a FederatedDataset from a config: load, partition, inject noise."""

from __future__ import annotations

import importlib

import numpy as np
import torch

from fedcore.config import MULTI_LABEL_NOISE, ExperimentConfig
from fedcore.data.datasets import RawDataset, load_dataset
from fedcore.data.federated import FederatedDataset, GroundTruth
from fedcore.data.noise import NoiseScene, inject_noise
from fedcore.data.partition import class_histogram, partition
from fedcore.data.validation import apply_split, split_validation
from fedcore.errors import ConfigError, DataError


def scene_for(ds: RawDataset, parts: list[np.ndarray], cfg: ExperimentConfig) -> NoiseScene:
    """Dispatch noise injection on the task: single-label types or multi-label ones."""
    if ds.task == "multi":
        if cfg.noise.type not in (*MULTI_LABEL_NOISE, "none"):
            raise ConfigError(
                f"dataset '{ds.name}' is multi-label; noise.type must be one of {[*MULTI_LABEL_NOISE, 'none']}"
            )
        multi = importlib.import_module("fedcore.data.noise_multilabel")
        return multi.inject_multilabel_noise(ds.y_train, parts, cfg.noise, cfg.data_seed, y_given=ds.y_train_noisy)
    # The user's own labels are the base of synthetic noise: their trusted labels stay with the metrics.
    given = ds.labels_as_given and cfg.noise.type != "real"
    return inject_noise(
        ds.y_train_noisy if given else ds.y_train, parts, cfg.noise, ds.num_classes, cfg.data_seed,
        asym_map=ds.asym_map,
        y_real_noisy=ds.y_train_noisy, y_true_known=ds.y_train_known,
    )


def build(cfg: ExperimentConfig) -> FederatedDataset:
    ds = load_dataset(cfg.data)
    parts = partition(ds.y_train, cfg.partition, ds.num_classes, cfg.data_seed, groups=ds.groups)
    names = client_names(ds, parts, cfg)
    scene = scene_for(ds, parts, cfg)
    x_train, val, v = ds.x_train, None, cfg.data.validation
    if v.fraction > 0 or v.server_clean > 0:
        # After partition and noise: the scene is the same with or without validation, and the
        # held-out samples carry the noisy labels their clients were given.
        x_train, scene, parts, val = apply_split(ds.x_train, scene, split_validation(
            parts, v.fraction, v.server_clean, cfg.data_seed))
    meta = {
        "name": ds.name,
        "task": ds.task,
        "num_classes": ds.num_classes,
        "class_names": ds.class_names,
        "in_shape": list(ds.x_train.shape[1:]),
        "mean": list(ds.mean),
        "std": list(ds.std),
        "flip_ok": ds.flip_ok,
        "num_train": int(len(scene.y_noisy)),
        "num_test": int(len(ds.y_test)),
        "seed": cfg.data_seed,
        "config_hash": cfg.config_hash(),
        "data_hash": cfg.data_hash(),
        "config": cfg.to_dict(),
        "histogram": class_histogram(scene.y_noisy, parts, ds.num_classes).tolist(),
        "notes": [*ds.notes, *scene.notes],
        "extras": _jsonable(ds.extras),
    }
    if ds.labels_as_given:
        meta["labels_as_given"] = True  # the user's own files: the artifact carries the federation summary
    if names is not None:
        meta["client_names"] = names
    if val is not None:
        meta["validation"] = {"fraction": v.fraction, "num_val": val.num_clients_val, "server_clean": val.num_server,
                              "assumption": "a clean server-side set" if val.num_server else None}
    truth = GroundTruth(
        y_true=scene.y_true, is_noisy_sample=scene.is_noisy_sample, is_noisy_client=scene.is_noisy_client,
        noise_type=scene.noise_type, target_rate=scene.target_rate, realized_rate=scene.realized_rate,
        y_true_known=scene.y_true_known,
    )
    return FederatedDataset(
        x_train=torch.from_numpy(np.ascontiguousarray(x_train)),
        y_train=torch.from_numpy(np.ascontiguousarray(scene.y_noisy)),
        x_test=torch.from_numpy(np.ascontiguousarray(ds.x_test)),
        y_test=torch.from_numpy(np.ascontiguousarray(ds.y_test)),
        client_indices=parts, truth=truth, meta=meta, val=val,
    )


def client_names(ds: RawDataset, parts: list[np.ndarray], cfg: ExperimentConfig) -> list[str] | None:
    """The data's own name of each natural client; a client below partition.min_size is refused."""
    if ds.group_names is None or cfg.partition.kind != "natural":
        return None
    names = [ds.group_names[int(ds.groups[p[0]])] for p in parts]
    small = [(n, len(p)) for n, p in zip(names, parts, strict=True) if len(p) < cfg.partition.min_size]
    if small:
        enough = sum(len(p) >= cfg.partition.min_size for p in parts)
        raise DataError(f"client '{small[0][0]}' of {ds.name} has {small[0][1]} samples, fewer than partition."
                        f"min_size={cfg.partition.min_size}; give it more, lower partition.min_size, or set "
                        f"partition.num_clients={enough} to train only the clients with enough")
    return names


def _jsonable(extras: dict) -> dict:
    out = {}
    for k, v in extras.items():
        out[k] = v.tolist() if isinstance(v, np.ndarray) else v
    return out


def build_federated_dataset(cfg: ExperimentConfig) -> FederatedDataset:
    """Load the dataset, partition it among clients and inject the configured noise scene."""
    return build(cfg)
