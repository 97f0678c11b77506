"""MLflow model registry: register a run's state_dict, find and move the `champion` alias.

Only the calls the retrain pipeline needs; the decision itself is pure
(`fedcore.pipeline.retrain.decide`) and lives outside this module.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from fedcore.errors import TrackingError
from fedcore.tracking.mlflow import CONNECT_ENV, _connect_message, _env, _one_line, resolve_uri

CHAMPION = "champion"
MODEL_PATH = "model"  # where TrackingCallback logs the final state_dict of a run


@dataclass(frozen=True)
class Version:
    name: str
    version: str
    run_id: str


class ModelRegistry:
    def __init__(self, uri: str | None, base_dir: str | Path | None = None) -> None:
        self.uri, _ = resolve_uri(uri, base_dir)
        with _env(CONNECT_ENV):
            try:
                from mlflow import MlflowClient

                self.client = MlflowClient(tracking_uri=self.uri, registry_uri=self.uri)
                self.client.search_registered_models(max_results=1)
            except Exception as exc:  # any failure here means the registry is unusable
                raise TrackingError(_connect_message(self.uri, exc)) from None

    def _call(self, what: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
        from mlflow.exceptions import MlflowException

        try:
            return fn(*args, **kwargs)
        except (MlflowException, OSError) as exc:
            raise TrackingError(f"MLflow registry {what} failed on {self.uri}: {_one_line(exc)}") from None

    def champion(self, name: str) -> Version | None:
        """The version holding alias `champion`, or None (no model or no alias yet)."""
        from mlflow.exceptions import MlflowException

        try:
            mv = self.client.get_model_version_by_alias(name, CHAMPION)
        except MlflowException as exc:
            if exc.error_code in ("RESOURCE_DOES_NOT_EXIST", "INVALID_PARAMETER_VALUE", "NOT_FOUND"):
                return None
            raise TrackingError(f"MLflow registry lookup of {name}@{CHAMPION} failed: {_one_line(exc)}") from None
        return Version(name, str(mv.version), mv.run_id or "")

    def register(self, name: str, run_id: str, tags: dict[str, str] | None = None) -> Version:
        """A new version of `name` from run `run_id`'s logged state_dict."""
        from mlflow.exceptions import MlflowException

        try:
            self.client.create_registered_model(name)
        except MlflowException as exc:
            if exc.error_code != "RESOURCE_ALREADY_EXISTS":
                raise TrackingError(f"MLflow cannot create registered model {name}: {_one_line(exc)}") from None
        source = f"runs:/{run_id}/{MODEL_PATH}"
        mv = self._call("create_model_version", self.client.create_model_version, name, source, run_id=run_id,
                        tags=tags or {})
        return Version(name, str(mv.version), run_id)

    def promote(self, version: Version) -> None:
        self._call("set alias", self.client.set_registered_model_alias, version.name, CHAMPION, version.version)

    def tag(self, version: Version, tags: dict[str, str]) -> None:
        for key, value in tags.items():
            self._call("set tag", self.client.set_model_version_tag, version.name, version.version, key, value)

    def state_dict(self, run_id: str) -> dict[str, Any]:
        """The state_dict a run logged under `model/`."""
        import mlflow.pytorch

        with tempfile.TemporaryDirectory(prefix="fedcore-champion-") as tmp:
            local = self._call("download", self.client.download_artifacts, run_id, MODEL_PATH, tmp)
            # A file from the store: rebuilt as tensors only, never as code.
            return mlflow.pytorch.load_state_dict(local, map_location="cpu", weights_only=True)

    def run_config(self, run_id: str) -> dict[str, Any]:
        """The config.yaml a run logged (TrackingCallback writes it at run start)."""
        with tempfile.TemporaryDirectory(prefix="fedcore-champion-") as tmp:
            local = self._call("download", self.client.download_artifacts, run_id, "config.yaml", tmp)
            return yaml.safe_load(Path(local).read_text()) or {}

    def log_decision(self, run_id: str, decision: dict[str, Any]) -> None:
        """Record the decision on the candidate run (artifact + tag)."""
        self._call("log decision", self.client.log_dict, run_id, decision, "retrain/decision.json")
        self._call("tag decision", self.client.set_tag, run_id, "retrain.decision",
                   "promoted" if decision["promote"] else "kept")
