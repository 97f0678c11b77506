"""MLflow model registry: register a run's logged model, find and move the `champion` alias
(and the bench's `selected`).

A version's source is the run's LoggedModel (`models:/<model id>`), so
`mlflow.pyfunc.load_model("models:/NAME@champion")` loads and predicts.

Only the calls the retrain and bench pipelines need; the decision itself is pure
(`fedcore.pipeline.retrain.decide`) and lives outside this module.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from fedcore.errors import TrackingError
from fedcore.tracking.mlflow import CONNECT_ENV, _connect_message, _one_line, resolve_uri
from fedcore.tracking.transport import temp_env

CHAMPION = "champion"
MODEL_NAME = "model"  # the LoggedModel TrackingCallback logs at the end of a run
STATE_DICT_PATHS = ("state_dict", "model")  # where runs keep their raw weights (now, before models were logged)


@dataclass(frozen=True)
class Version:
    name: str
    version: str
    run_id: str


class ModelRegistry:
    def __init__(self, uri: str | None, base_dir: str | Path | None = None) -> None:
        self.uri, _ = resolve_uri(uri, base_dir)
        with temp_env(CONNECT_ENV):
            try:
                from mlflow import MlflowClient  # lazy: MLflow takes seconds; only where tracking talks to it

                self.client = MlflowClient(tracking_uri=self.uri, registry_uri=self.uri)
                self.client.search_registered_models(max_results=1)
            except Exception as exc:  # any failure here means the registry is unusable
                raise TrackingError(_connect_message(self.uri, exc)) from None

    def _call(self, what: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
        from mlflow.exceptions import MlflowException  # lazy: MLflow takes seconds; only where tracking talks to it

        try:
            return fn(*args, **kwargs)
        except (MlflowException, OSError) as exc:
            raise TrackingError(f"MLflow registry {what} failed on {self.uri}: {_one_line(exc)}") from None

    def champion(self, name: str) -> Version | None:
        """The version holding alias `champion`, or None (no model or no alias yet)."""
        from mlflow.exceptions import MlflowException  # lazy: MLflow takes seconds; only where tracking talks to it

        try:
            mv = self.client.get_model_version_by_alias(name, CHAMPION)
        except MlflowException as exc:
            if exc.error_code in ("RESOURCE_DOES_NOT_EXIST", "INVALID_PARAMETER_VALUE", "NOT_FOUND"):
                return None
            raise TrackingError(f"MLflow registry lookup of {name}@{CHAMPION} failed: {_one_line(exc)}") from None
        return Version(name, str(mv.version), mv.run_id or "")

    def logged_model(self, run_id: str) -> str:
        """The id of the model run `run_id` logged last (its final model)."""
        run = self._call("get_run", self.client.get_run, run_id)
        outputs = run.outputs.model_outputs if run.outputs else []
        ids = [o.model_id for o in sorted(outputs, key=lambda o: o.step)]
        named = [m for m in ids if self._call("get_logged_model", self.client.get_logged_model, m).name == MODEL_NAME]
        if not named:
            raise TrackingError(f"MLflow run {run_id} has no logged model '{MODEL_NAME}' to register; "
                                "its last stage did not finish, or it predates model logging: re-run it")
        return named[-1]

    def register(self, name: str, run_id: str, tags: dict[str, str] | None = None) -> Version:
        """A new version of `name` from the model run `run_id` logged."""
        from mlflow.exceptions import MlflowException  # lazy: MLflow takes seconds; only where tracking talks to it

        model_id = self.logged_model(run_id)
        try:
            self.client.create_registered_model(name)
        except MlflowException as exc:
            if exc.error_code != "RESOURCE_ALREADY_EXISTS":
                raise TrackingError(f"MLflow cannot create registered model {name}: {_one_line(exc)}") from None
        from mlflow.tracking._tracking_service.utils import (
            _use_tracking_uri,  # lazy: MLflow takes seconds; only where tracking talks to it
        )

        with _use_tracking_uri(self.uri):  # MLflow resolves a models:/ source through the fluent URI
            mv = self._call("create_model_version", self.client.create_model_version, name, f"models:/{model_id}",
                            run_id=run_id, tags=tags or {}, model_id=model_id)
        return Version(name, str(mv.version), run_id)

    def promote(self, version: Version) -> None:
        self.set_alias(version, CHAMPION)

    def set_alias(self, version: Version, alias: str) -> None:
        """Point `alias` (champion, or the bench's selected) at this version."""
        self._call("set alias", self.client.set_registered_model_alias, version.name, alias, version.version)

    def tag(self, version: Version, tags: dict[str, str]) -> None:
        for key, value in tags.items():
            self._call("set tag", self.client.set_model_version_tag, version.name, version.version, key, value)

    def state_dict(self, run_id: str) -> dict[str, Any]:
        """The raw state_dict a run logged (under `state_dict/`; `model/` for runs before model logging)."""
        import mlflow.pytorch  # lazy: MLflow takes seconds; only where tracking talks to it

        names = {a.path for a in self._call("list_artifacts", self.client.list_artifacts, run_id)}
        path = next((p for p in STATE_DICT_PATHS if p in names), None)
        if path is None:
            raise TrackingError(f"MLflow run {run_id} has no state_dict artifact; it did not finish")
        with tempfile.TemporaryDirectory(prefix="fedcore-champion-") as tmp:
            local = self._call("download", self.client.download_artifacts, run_id, path, tmp)
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
