"""A tracker that records nothing, for `tracking.backend: none` and for tests.

It keeps the same run lifecycle and input checks as the MLflow tracker, so a callback bug
(logging outside a run, a non-numeric metric, a missing artifact) fails the same way offline.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from fedcore.tracking.base import DatasetInfo, RunStack, check_metrics, check_status, check_str_map, check_table

NULL_RUN_ID = "null"


class NullTracker(RunStack):
    """Does nothing; `start` returns NULL_RUN_ID (or the id being resumed)."""

    def __init__(self) -> None:
        super().__init__()
        self._params: dict[str, dict[str, str]] = {}

    def start(
        self,
        run_name: str,
        tags: dict[str, str],
        parent_run_id: str | None = None,
        run_id: str | None = None,
        nested: bool = False,
    ) -> str:
        if not isinstance(run_name, str):
            raise TypeError(f"run_name must be a string, got {type(run_name).__name__}")
        check_str_map("tags", tags)
        if nested and not self._stack and parent_run_id is None:
            raise RuntimeError("nested=True needs an open parent run or parent_run_id")
        rid = run_id or NULL_RUN_ID
        self._stack.append(rid)
        self._params.setdefault(rid, {})
        return rid

    def start_parent(self, run_name: str, tags: dict[str, str]) -> str:
        return self.start(run_name, tags)

    def logged_params(self) -> dict[str, str]:
        return dict(self._params[self._active()])

    def log_params(self, params: Mapping[str, Any]) -> None:
        self._params[self._active()].update(check_str_map("params", params))

    def log_metrics(self, metrics: Mapping[str, float], step: int) -> None:
        self._active()
        check_metrics(metrics, step)

    def set_tags(self, tags: Mapping[str, Any]) -> None:
        self._active()
        check_str_map("tags", tags)

    def log_artifact(self, local_path: str | Path, artifact_path: str | None = None) -> None:
        self._active()
        if not Path(local_path).exists():
            raise FileNotFoundError(f"artifact {local_path} does not exist")

    def log_dict(self, obj: Any, artifact_file: str) -> None:
        self._active()
        if not isinstance(artifact_file, str) or not artifact_file:
            raise TypeError("artifact_file must be a non-empty string")

    def log_figure(self, fig: Any, artifact_file: str) -> None:
        self.log_dict(fig, artifact_file)

    def log_table(self, data: dict[str, list[Any]], artifact_file: str) -> None:
        self.log_dict(data, artifact_file)
        check_table(data)

    def log_state_dict(self, state_dict: dict[str, Any], artifact_path: str) -> None:
        self._active()
        if not isinstance(state_dict, dict):
            raise TypeError(f"state_dict must be a dict, got {type(state_dict).__name__}")

    def log_model(self, model: Any, example: Any, name: str = "model", step: int = 0) -> str | None:
        self._active()
        if not callable(model):
            raise TypeError(f"model must be a torch module, got {type(model).__name__}")
        return None

    def log_dataset(self, dataset: DatasetInfo) -> None:
        self._active()
        if not isinstance(dataset, DatasetInfo):
            raise TypeError(f"dataset must be a DatasetInfo, got {type(dataset).__name__}")

    def start_system_metrics(self, interval_s: float) -> None:
        self._active()

    def stop_system_metrics(self) -> None:
        self._active()

    def end(self, status: str = "FINISHED") -> None:
        check_status(status)
        self._active()
        self._stack.pop()
