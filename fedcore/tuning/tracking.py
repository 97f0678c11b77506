"""MLflow's side of a tune: one parent run, every trial a child run under it.

The parent's id is kept in the study (a user attribute), so a resumed tune reopens the same
parent and its new trials join the earlier ones. At the end the parent logs the best params
(`best.*`), the best value, tune.json, best.yaml and Optuna's figures. Without tracking
(`tracking.backend: none`) every method here does nothing.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fedcore.config import ExperimentConfig
from fedcore.tracking import make_tracker
from fedcore.tracking.base import source_tags
from fedcore.tracking.callback import TrackingCallback, command_line

PARENT_ATTR = "mlflow_parent_run_id"


class Parent:
    def __init__(self, cfg: ExperimentConfig, study: Any) -> None:
        self.cfg, self.study, self.tracker, self.run_id = cfg, study, None, None
        if cfg.tracking.backend == "none":
            return

        self.tracker = make_tracker(cfg.tracking, Path.cwd())
        tags = {"fedcore.role": "parent", "pipeline": "tune", "method": cfg.method.name,
                "dataset": cfg.data.name, "config_hash": cfg.config_hash(), **source_tags(command_line())}
        name = cfg.tracking.run_name or f"tune-{cfg.method.name}-{cfg.data.name}-s{cfg.seed}"
        known = study.user_attrs.get(PARENT_ATTR)
        self.run_id = self.tracker.start(name, tags, run_id=known) if known else self.tracker.start_parent(name, tags)
        if not known:
            study.set_user_attr(PARENT_ATTR, self.run_id)

    def child_config(self, cfg: ExperimentConfig, number: int) -> ExperimentConfig:
        """A trial's config: its MLflow run is a child of the parent, named after the trial."""
        if self.run_id is None:
            return cfg
        name = f"{cfg.tracking.run_name or cfg.method.name}-trial-{number:04d}"
        tracking = cfg.tracking.model_copy(update={"parent_run_id": self.run_id, "run_name": name,
                                                   "log_model": False})
        return cfg.model_copy(update={"tracking": tracking})

    def callbacks(self, cfg: ExperimentConfig) -> list[Any]:
        if self.run_id is None:
            return []

        return [TrackingCallback(make_tracker(cfg.tracking, Path.cwd()), cfg, None,
                                 tags={"tune.parent": self.run_id})]

    def finish(self, result: dict[str, Any], out: Path) -> None:
        if self.tracker is None:
            return
        best = {f"best.{k}": str(v) for k, v in result["best_params"].items()}
        known = self.tracker.logged_params()
        # MLflow params cannot change: a resumed tune whose best moved records the new best as tags.
        self.tracker.log_params({k: v for k, v in best.items() if known.get(k, v) == v})
        self.tracker.set_tags(best)
        self.tracker.log_metrics({"tune/best_value": float(result["best_value"]),
                                  "tune/n_trials": float(result["n_trials"]),
                                  "tune/n_pruned": float(result["n_pruned"])}, step=int(result["n_trials"]))
        self.tracker.set_tags({"tune.objective": result["objective"]})
        for name in ("tune.json", "best.yaml", *result["figures"]):
            self.tracker.log_artifact(out / name)
        self.end("FINISHED")

    def end(self, status: str) -> None:
        if self.tracker is not None and self.tracker.run_id == self.run_id:
            self.tracker.end(status)
