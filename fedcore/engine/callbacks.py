"""Engine callbacks: evaluation, checkpointing, tracking and early stopping hook in here.

The loop calls these at fixed points; each callback gets plain dicts of metrics whose
names are already scoped (`test/acc`, `noise/rate_est/client_07`, ...).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any


class Callback:
    """Base class: override what you need. All hooks are no-ops by default."""

    def on_run_start(self, info: dict[str, Any]) -> None:
        """info: config (ExperimentConfig), out_dir (Path), stages (list of names), resumed (bool)."""

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
