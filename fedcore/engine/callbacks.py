"""Engine callbacks: evaluation, checkpointing, tracking and early stopping hook in here.

The loop calls these at fixed points; each callback gets plain dicts of metrics whose
names are already scoped (`test/acc`, `noise/rate_est/client_07`, ...).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any


class Callback:
    """Base class: override what you need. All hooks are no-ops by default."""

    def on_run_start(self, info: dict[str, Any]) -> None:
        """info: config (ExperimentConfig), out_dir (Path), stages (list of names), resumed (bool), and
        what `fedcore.run` adds: fed, data_sha256, data_source, and final_model (set before on_run_end)."""

    def after_round(self, rnd: int, stage: str, metrics: dict[str, float]) -> None:
        """rnd: global round counter across stages (the MLflow step)."""

    def on_stage_end(self, stage: str, rnd: int, checkpoint: Path | None) -> None:
        """Called after the stage-end checkpoint is written (checkpoint may be None when disabled)."""

    def on_run_end(self, summary: dict[str, float], out_dir: Path) -> None:
        """summary: final metrics (final/acc, final/acc_last10, ...); out_dir holds model.pt, history.csv."""

    def on_failure(self, error: BaseException) -> None:
        """The run raised (or was interrupted); release what on_run_start acquired."""

    def should_stop(self) -> bool:
        """Return True to end the run early (checked after every round)."""
        return False

    def state_dict(self) -> dict[str, Any] | None:
        """State to keep in checkpoints so a resumed run behaves as an uninterrupted one."""
        return None

    def load_state_dict(self, state: dict[str, Any] | None) -> None:
        """Restore what `state_dict` returned."""


VAL_KEYS = ("val/acc", "val/mAP", "val_server/acc", "val_server/mAP")


class EarlyStopping(Callback):
    """Stop after `patience` evaluations without a better validation score.

    The test split is never what stops a run: a user has no test labels to stop on."""

    def __init__(self, patience: int, key: str | None = None) -> None:
        # key None: the first of VAL_KEYS the run logs (clients' held-out split first).
        self.patience, self.key = patience, key
        self.best, self.bad = -math.inf, 0

    def after_round(self, rnd: int, stage: str, metrics: dict[str, float]) -> None:
        key = self.key or next((k for k in VAL_KEYS if k in metrics), None)
        if key is None or key not in metrics:
            return
        if metrics[key] > self.best:
            self.best, self.bad = metrics[key], 0
        else:
            self.bad += 1

    def should_stop(self) -> bool:
        return self.patience > 0 and self.bad >= self.patience

    def state_dict(self) -> dict[str, Any]:
        return {"best": self.best, "bad": self.bad}

    def load_state_dict(self, state: dict[str, Any] | None) -> None:
        if state:
            self.best, self.bad = state["best"], state["bad"]
