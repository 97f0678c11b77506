"""MLflow backend: one `MlflowClient` per tracker, no fluent global run state.

Several trackers can therefore live in one process (a sweep logging children while a
parent stays open). mlflow is imported inside functions so `import fedcore.tracking` stays light.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import shlex
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any, TypeVar

from fedcore.errors import TrackingError
from fedcore.tracking.base import (
    EXPERIMENT_KIND_TAG,
    TRAINING_KIND,
    RunStack,
    check_metrics,
    check_status,
    check_str_map,
)
from fedcore.tracking.mlflow_records import RecordsMixin
from fedcore.tracking.transport import FIX_HINT, UNREACHABLE, Transport, auth_message, auth_status, temp_env
from fedcore.tracking.transport import one_line as _one_line

T = TypeVar("T")
log = logging.getLogger(__name__)
METRICS_PER_BATCH = 1000  # MLflow's log_batch limit for metrics
PARAMS_TAGS_PER_BATCH = 100  # ... and for params or tags
PARENT_TAG = "mlflow.parentRunId"
# Fail fast when connecting: MLflow's default (7 retries, exponential backoff) waits minutes.
CONNECT_ENV = {
    "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "1",
    "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "1",
    "MLFLOW_HTTP_REQUEST_TIMEOUT": "5",
}


def embedded_store(base_dir: str | Path) -> tuple[str, str]:
    """(tracking URI, artifact root) of the serverless default under `<base_dir>/mlruns`."""
    root = Path(base_dir).resolve() / "mlruns"
    return f"sqlite:///{root / 'mlflow.db'}", str(root / "artifacts")


def resolve_uri(uri: str | None, base_dir: str | Path | None = None) -> tuple[str, str | None]:
    """Config URI, else MLFLOW_TRACKING_URI, else the embedded sqlite store; returns (uri, artifact root)."""
    if uri:
        return uri, None
    if os.environ.get("MLFLOW_TRACKING_URI"):
        return os.environ["MLFLOW_TRACKING_URI"], None
    return embedded_store(base_dir if base_dir is not None else Path.cwd())


def ui_command(uri: str, artifact_root: str | None) -> str | None:
    """Shell command that opens store `uri` in the MLflow UI; None for a server (its URL is the UI)."""
    if uri.startswith(("http://", "https://")):
        return None
    cmd = ["mlflow", "ui", "--backend-store-uri", uri]
    if artifact_root:
        cmd += ["--default-artifact-root", artifact_root]
    return shlex.join(cmd)


@contextlib.contextmanager
def quiet_store_setup() -> Iterator[None]:
    """Silence MLflow's INFO lines about creating and migrating a new sqlite store's tables:
    they land on stderr, where fedcore keeps only what the user must act on."""
    loggers = [logging.getLogger(n) for n in ("mlflow.store.db.utils", "alembic.runtime.migration")]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.WARNING)
    try:
        yield
    finally:
        for lg, level in zip(loggers, levels, strict=True):
            lg.setLevel(level)


def _connect_message(uri: str, exc: BaseException) -> str:
    text = str(exc)
    refused = auth_status(exc)
    if refused:
        return auth_message(uri, "the connection", refused)
    if uri.startswith(("http://", "https://")) and UNREACHABLE.search(text):
        errno = re.search(r"\[Errno -?\d+\] ([^\"')]+)", text)
        why = f" ({errno.group(1).strip()})" if errno else ""
        return f"cannot reach the MLflow tracking server at {uri}{why}; {FIX_HINT}"
    return f"cannot use MLflow tracking store {uri}: {_one_line(exc)}; {FIX_HINT}"


def _chunks(items: list[T], size: int) -> Iterator[list[T]]:
    for i in range(0, len(items), size):
        yield items[i : i + size]


def _now_ms() -> int:
    return int(time.time() * 1000)


class MlflowTracker(RecordsMixin, RunStack):
    """Tracker over an MLflow store: a server (http/https), a database, or the embedded sqlite file.

    uri None means MLFLOW_TRACKING_URI or, failing that, `<base_dir>/mlruns/mlflow.db` with
    artifacts in `<base_dir>/mlruns/artifacts` (base_dir defaults to the cwd).
    """

    def __init__(
        self,
        uri: str | None,
        experiment: str = "fedcore",
        artifact_location: str | None = None,
        base_dir: str | Path | None = None,
        retry_seconds: float | None = None,
    ) -> None:
        self.uri, default_artifacts = resolve_uri(uri, base_dir)
        self.artifact_root = artifact_location or default_artifacts
        super().__init__()
        self._params: dict[str, dict[str, str]] = {}
        # Outside CONNECT_ENV, which would pass for the user's own MLFLOW_HTTP_REQUEST_MAX_RETRIES.
        self.transport = Transport(self.uri, retry_seconds)
        with temp_env(CONNECT_ENV), quiet_store_setup():
            try:
                from mlflow import MlflowClient  # lazy: MLflow takes seconds; only where tracking talks to it

                if self.uri.startswith("sqlite:///"):
                    Path(self.uri.removeprefix("sqlite:///")).parent.mkdir(parents=True, exist_ok=True)

                self.client = MlflowClient(tracking_uri=self.uri, registry_uri=self.uri)
                self.experiment_id = self._ensure_experiment(experiment)
                self.experiment = experiment
            except TrackingError:
                raise
            except Exception as exc:  # any failure here means the store is unusable
                raise TrackingError(_connect_message(self.uri, exc)) from None

    def _ensure_experiment(self, name: str) -> str:
        from mlflow.exceptions import MlflowException  # lazy: MLflow takes seconds; only where tracking talks to it

        exp = self.client.get_experiment_by_name(name)
        if exp is None:
            try:
                return self.client.create_experiment(name, artifact_location=self.artifact_root,
                                                     tags={EXPERIMENT_KIND_TAG: TRAINING_KIND})
            except MlflowException as exc:
                # A sibling stage component may have created it between our two calls.
                if exc.error_code != "RESOURCE_ALREADY_EXISTS":
                    raise
                exp = self.client.get_experiment_by_name(name)
        elif self.artifact_root and exp.artifact_location != self.artifact_root:
            # MLflow fixes an experiment's artifact location at creation; say so rather than surprise.
            log.warning(
                "experiment '%s' keeps its artifact location %s (requested %s)",
                name, exp.artifact_location, self.artifact_root,
            )
        if exp.lifecycle_stage == "deleted":
            raise TrackingError(
                f"MLflow experiment '{name}' is deleted; restore it with `mlflow experiments restore "
                f"--experiment-id {exp.experiment_id}` or set another tracking.experiment"
            )
        if EXPERIMENT_KIND_TAG not in exp.tags:  # made before fedcore tagged its experiments
            self.client.set_experiment_tag(exp.experiment_id, EXPERIMENT_KIND_TAG, TRAINING_KIND)
        return exp.experiment_id

    def _call(self, what: str, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Run one client call under MLflow's retry settings (`fedcore.tracking.transport`); failures
        are one-line TrackingErrors, and TrackingUnavailable once it failed through those retries."""
        return self.transport.call(what, fn, *args, artifact=what.startswith("upload"), **kwargs)

    # -- lifecycle -----------------------------------------------------------------------

    def start(
        self,
        run_name: str,
        tags: dict[str, str],
        parent_run_id: str | None = None,
        run_id: str | None = None,
        nested: bool = False,
    ) -> str:
        tags = check_str_map("tags", tags)
        if run_id:
            return self._resume(run_id, tags)
        if nested and parent_run_id is None:
            if not self._stack:
                raise RuntimeError("nested=True needs an open parent run or parent_run_id")
            parent_run_id = self._stack[-1]
        if parent_run_id:
            tags[PARENT_TAG] = parent_run_id
        create = self.client.create_run
        run = self._call("create_run", create, self.experiment_id, tags=tags, run_name=run_name)
        rid = run.info.run_id
        self._stack.append(rid)
        self._params[rid] = {}
        return rid

    def _resume(self, run_id: str, tags: dict[str, str]) -> str:
        from mlflow.exceptions import MlflowException  # lazy: MLflow takes seconds; only where tracking talks to it

        try:
            run = self.client.get_run(run_id)
        except MlflowException as exc:
            if auth_status(exc):
                raise TrackingError(auth_message(self.uri, f"resuming run {run_id}", auth_status(exc))) from None
            raise TrackingError(
                f"cannot resume MLflow run {run_id} on {self.uri} ({_one_line(exc, 120)}); "
                "check tracking.run_id and tracking.uri"
            ) from None
        if run.info.lifecycle_stage == "deleted":
            raise TrackingError(f"MLflow run {run_id} is deleted; restore it or clear tracking.run_id")
        self._call("update_run", self.client.update_run, run_id, status="RUNNING")
        self._stack.append(run_id)
        self._params[run_id] = dict(run.data.params)
        if tags:
            self.set_tags(tags)
        return run_id

    def start_parent(self, run_name: str, tags: dict[str, str]) -> str:
        return self.start(run_name, {**tags, "fedcore.role": "parent"})

    def end(self, status: str = "FINISHED", end_ms: int | None = None) -> None:
        """End the open run; `end_ms` (epoch ms) when it ended earlier than now (a synced journal)."""
        check_status(status)
        rid = self._active()
        self.stop_system_metrics()
        self._call("set_terminated", self.client.set_terminated, rid, status=status, end_time=end_ms)
        self._stack.pop()

    # -- logging ------------------------------------------------------------------------

    def logged_params(self) -> dict[str, str]:
        return dict(self._params[self._active()])

    def log_params(self, params: Mapping[str, Any]) -> None:
        """Log params; ones already recorded with the same value are skipped (resumed runs)."""
        from mlflow.entities import Param  # lazy: MLflow takes seconds; only where tracking talks to it

        rid = self._active()
        known = self._params[rid]
        fresh = {k: v for k, v in check_str_map("params", params).items() if known.get(k) != v}
        items = [Param(k, v) for k, v in fresh.items()]
        for chunk in _chunks(items, PARAMS_TAGS_PER_BATCH):
            self._call("log_batch(params)", self.client.log_batch, rid, params=chunk)
        known.update(fresh)

    def log_metrics(self, metrics: Mapping[str, float], step: int, timestamp_ms: int | None = None) -> None:
        """timestamp_ms: when the values were measured (a replayed journal keeps the original time)."""
        from mlflow.entities import Metric  # lazy: MLflow takes seconds; only where tracking talks to it

        rid = self._active()
        ts = _now_ms() if timestamp_ms is None else int(timestamp_ms)
        items = [Metric(k, v, ts, step) for k, v in check_metrics(metrics, step).items()]
        for chunk in _chunks(items, METRICS_PER_BATCH):
            self._call("log_batch(metrics)", self.client.log_batch, rid, metrics=chunk)

    def set_tags(self, tags: Mapping[str, Any]) -> None:
        from mlflow.entities import RunTag  # lazy: MLflow takes seconds; only where tracking talks to it

        rid = self._active()
        items = [RunTag(k, v) for k, v in check_str_map("tags", tags).items()]
        for chunk in _chunks(items, PARAMS_TAGS_PER_BATCH):
            self._call("log_batch(tags)", self.client.log_batch, rid, tags=chunk)

    def log_artifact(self, local_path: str | Path, artifact_path: str | None = None) -> None:
        rid = self._active()
        path = Path(local_path)
        if not path.exists():
            raise FileNotFoundError(f"artifact {path} does not exist")
        fn = self.client.log_artifacts if path.is_dir() else self.client.log_artifact
        self._call(f"upload of {path.name}", fn, rid, str(path), artifact_path)

    def log_dict(self, obj: Any, artifact_file: str) -> None:
        self._call(f"upload of {artifact_file}", self.client.log_dict, self._active(), obj, artifact_file)

    def log_figure(self, fig: Any, artifact_file: str) -> None:
        self._call(f"upload of {artifact_file}", self.client.log_figure, self._active(), fig, artifact_file)

    def log_table(self, data: dict[str, list[Any]], artifact_file: str) -> None:
        self._call(f"upload of {artifact_file}", self.client.log_table, self._active(), data, artifact_file)

    def log_state_dict(self, state_dict: dict[str, Any], artifact_path: str) -> None:
        """Store as `<artifact_path>/state_dict.pth`, readable by mlflow.pytorch.load_state_dict."""
        from mlflow.pytorch import save_state_dict  # lazy: MLflow takes seconds; only where tracking talks to it

        rid = self._active()
        with tempfile.TemporaryDirectory(prefix="fedcore-sd-") as tmp:
            save_state_dict(state_dict, tmp)
            self._call(f"upload of {artifact_path}", self.client.log_artifacts, rid, tmp, artifact_path)

    def ui_command(self) -> str | None:
        """Shell command that opens this store in the MLflow UI; None for a server (its URL is the UI)."""
        return ui_command(self.uri, self.artifact_root)
