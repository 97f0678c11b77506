"""What a run records about its inputs and its served model, built from the FederatedDataset.

Pure helpers (no mlflow): the Datasets-panel record, the model's input example, and the
serving wrapper around the final model.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from fedcore.tracking.base import DatasetInfo, noise_label

if TYPE_CHECKING:
    from torch import nn

    from fedcore.config import ExperimentConfig
    from fedcore.data.federated import FederatedDataset

EXAMPLE_ROWS = 4


def source_type(source: str | None) -> str:
    """MLflow's dataset source kinds: s3, local, or code (built in-process from the config)."""
    if not source:
        return "code"
    return "s3" if source.startswith("s3://") else "local"


def dataset_info(fed: FederatedDataset, cfg: ExperimentConfig, source: str | None) -> DatasetInfo:
    """The FederatedDataset as MLflow's Datasets panel shows it: digest, source, shapes, scene summary.

    The summary counts noisy clients and the overall noise rate from the scene's truth: it
    describes the data (as the scene report does), and no method reads it.
    """
    from fedcore.data.federated import scene_report  # lazy: loads torch, only to log a model or dataset

    report = scene_report(fed)
    profile = {
        "num_rows": int(report["num_train"]), "num_test_rows": int(report["num_test"]),
        "num_clients": fed.num_clients, "num_classes": fed.num_classes, "task": fed.task,
        "partition": cfg.partition.kind, "noise": noise_label(cfg), "noise_scope": cfg.noise.scope,
        "noisy_clients": report["noisy_clients"], "overall_noise_rate": report["overall_noise_rate"],
        "sha256": fed.sha256, "data_hash": fed.meta.get("data_hash"),
    }
    y_shape = [-1, *fed.y_train.shape[1:]]
    schema = {
        "features": {"dtype": "uint8", "shape": [-1, *fed.x_train.shape[1:]], "name": "image"},
        "targets": {"dtype": "int64", "shape": y_shape, "name": "label"},
    }
    name = f"{fed.meta['name']} · {noise_label(cfg)} · {fed.num_clients} clients"
    # A dataset built in-process has no file checksum yet; its config digest names it then.
    digest = (fed.sha256 or str(fed.meta.get("data_hash") or cfg.data_hash()))[:32]
    return DatasetInfo(name=name, digest=digest, source=source or f"config {cfg.data_hash()}",
                       source_type=source_type(source), schema=schema, profile=profile)


def input_example(fed: FederatedDataset, rows: int = EXAMPLE_ROWS) -> np.ndarray:
    """The first test images as float32 in [0, 1], (rows, C, H, W): what the served model takes."""
    return (fed.x_test[:rows].float() / 255.0).numpy()


def served(model: nn.Module, fed: FederatedDataset) -> nn.Module:
    """The final model wrapped with the dataset's normalization and output activation."""
    from fedcore.models.serving import serving_model  # lazy: loads torch, only to log a model or dataset

    return serving_model(model, fed.meta["mean"], fed.meta["std"], int(fed.x_train.shape[1]),
                         multi_label=fed.task == "multi")


def describe(model_id: str | None, error: Any = None) -> dict[str, str]:
    """Tags that say whether the run carries a loadable model."""
    if model_id:
        return {"model.id": model_id, "model.uri": f"models:/{model_id}"}
    return {"model.logged": "false", "model.error": " ".join(str(error).split())[:500]}
