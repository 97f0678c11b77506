"""Experiment tracking: the Tracker protocol, a null backend and an MLflow backend.

Only this package may import mlflow, and only lazily, so importing fedcore stays cheap.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from fedcore.tracking.base import (
    Tracker,
    flatten_config,
    git_commit,
    noise_label,
    run_name_for,
    run_params,
    standard_tags,
)
from fedcore.tracking.mlflow import MlflowTracker
from fedcore.tracking.null import NullTracker

if TYPE_CHECKING:
    from fedcore.config import TrackingConfig

__all__ = [
    "NullTracker",
    "Tracker",
    "flatten_config",
    "git_commit",
    "make_tracker",
    "noise_label",
    "run_name_for",
    "run_params",
    "standard_tags",
]


def make_tracker(cfg: TrackingConfig, base_dir: Path | None = None) -> Tracker:
    """Tracker for `cfg.backend`; the embedded MLflow store lives under base_dir (default: cwd).

    Raises TrackingError when an MLflow store is configured but cannot be reached.
    """
    if cfg.backend == "none":
        return NullTracker()
    return MlflowTracker(cfg.uri, cfg.experiment, cfg.artifact_location, base_dir=base_dir,
                         retry_seconds=cfg.retry_seconds)
