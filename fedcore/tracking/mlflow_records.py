"""What the MLflow backend records beyond params and metrics: the model, the dataset, system metrics.

`MlflowTracker` delegates here so that its client-call code stays in one place. Everything
imports mlflow lazily.
"""

from __future__ import annotations

import json
import logging
from typing import Any

import numpy as np

from fedcore.errors import TrackingError
from fedcore.tracking.base import DatasetInfo
from fedcore.tracking.transport import TrackingUnavailable

log = logging.getLogger(__name__)


def requirements() -> list[str]:
    """What loading the logged model needs: a pt2 program runs on torch alone (no fedcore).

    Given explicitly, MLflow skips inferring them, which loads the model in a subprocess.
    """
    import mlflow  # lazy: MLflow takes seconds; only where tracking talks to it
    import torch  # lazy: torch, only to log a model or tensor

    return [f"torch=={torch.__version__.split('+')[0]}", f"mlflow=={mlflow.__version__}", f"numpy=={np.__version__}"]


def log_model(client: Any, uri: str, experiment_id: str, run_id: str, model: Any, example: np.ndarray,
              name: str, step: int, params: dict[str, str]) -> str:
    """Log `model` as a LoggedModel of `run_id` in torch.export (pt2) format; returns its model id.

    example: a float32 batch the model takes; it becomes the input example and, with the
    model's output on it, the signature (the batch dimension stays free).
    """
    import mlflow  # lazy: MLflow takes seconds; only where tracking talks to it
    import mlflow.pytorch  # lazy: MLflow takes seconds; only where tracking talks to it
    import torch  # lazy: torch, only to log a model or tensor
    from mlflow.models import Model, infer_signature  # lazy: MLflow takes seconds; only where tracking talks to it
    from mlflow.tracking._tracking_service.utils import (
        _use_tracking_uri,  # lazy: MLflow takes seconds; only where tracking talks to it
    )

    x = np.ascontiguousarray(example, dtype=np.float32)
    with torch.no_grad():
        y = model(torch.from_numpy(x)).numpy()
    # Model.log reads the fluent tracking URI and, without a model id, the fluent experiment;
    # pinning both keeps this tracker free of global run state.
    with _use_tracking_uri(uri):
        logged = client.create_logged_model(experiment_id, name=name, source_run_id=run_id, params=params)
        Model.log(artifact_path=None, name=name, flavor=mlflow.pytorch, run_id=run_id, model_id=logged.model_id,
                  step=step, pytorch_model=model, signature=infer_signature(x, y), input_example=x,
                  serialization_format="pt2", pip_requirements=requirements())
    return logged.model_id


def _tensor_schema(spec: dict[str, Any]) -> str:
    from mlflow.types import Schema, TensorSpec  # lazy: MLflow takes seconds; only where tracking talks to it

    return Schema([TensorSpec(np.dtype(spec["dtype"]), tuple(spec["shape"]), spec.get("name"))]).to_json()


def dataset_input(ds: DatasetInfo) -> Any:
    """The MLflow DatasetInput of `ds`, tagged with its context (train)."""
    from mlflow.entities import (  # lazy: MLflow takes seconds; only where tracking talks to it
        Dataset,
        DatasetInput,
        InputTag,
    )

    schema = {"mlflow_tensorspec": {k: _tensor_schema(v) for k, v in ds.schema.items()}}
    entity = Dataset(name=ds.name, digest=ds.digest[:36], source_type=ds.source_type,
                     source=json.dumps({"uri": ds.source}), schema=json.dumps(schema),
                     profile=json.dumps(ds.profile, sort_keys=True))
    return DatasetInput(dataset=entity, tags=[InputTag(key="mlflow.data.context", value=ds.context)])


def system_monitor(run_id: str, uri: str, interval_s: float) -> Any:
    """A started monitor logging `system/*` metrics of this process's machine into `run_id`.

    It resumes the step count a previous stage of the same run reached.
    """
    from mlflow.system_metrics.system_metrics_monitor import (
        SystemMetricsMonitor,  # lazy: MLflow takes seconds; only where tracking talks to it
    )

    class Monitor(SystemMetricsMonitor):
        published = 0

        def publish_metrics(self, metrics: dict[str, float]) -> None:
            super().publish_metrics(metrics)
            self.published += 1

        def close(self) -> None:
            """Stop; a run shorter than one interval still gets one sample."""
            self.finish()
            if not self.published:
                self.collect_metrics()
                self.publish_metrics(self.aggregate_metrics())
                self.mlflow_logger.flush()

    # Its INFO lines ("Started monitoring system metrics") would land on stderr in every task.
    logging.getLogger("mlflow.system_metrics").setLevel(logging.WARNING)
    mon = Monitor(run_id, sampling_interval=interval_s, resume_logging=True, tracking_uri=uri)
    mon.start()
    return mon


class RecordsMixin:
    """MlflowTracker's model, dataset and system-metrics calls (it provides client, uri,
    experiment_id, `_active`, `_call` and `_params`)."""

    _monitors: dict[str, Any]

    def log_model(self, model: Any, example: Any, name: str = "model", step: int = 0) -> str:
        """A LoggedModel of the open run (pt2: loads with torch alone); returns its model id."""
        rid = self._active()
        return self._call(f"upload of model '{name}'", log_model, self.client, self.uri, self.experiment_id, rid,
                          model, example, name, step, self._params.get(rid, {}))

    def log_dataset(self, dataset: DatasetInfo) -> None:
        rid = self._active()
        inputs = [dataset_input(dataset)]
        try:
            self._call("log_inputs", self.client.log_inputs, rid, datasets=inputs)
        except TrackingUnavailable:
            raise
        except TrackingError as err:
            # MLflow's store looks the experiment's dataset up, then inserts it, in two steps: runs of
            # one experiment logging the same artifact at once (a bench's parallel tunes) collide on
            # its unique key, and all but one fail. The row now exists, so one more call links it.
            log.info("tracking: logging the dataset input again after %s", err)
            self._call("log_inputs", self.client.log_inputs, rid, datasets=inputs)

    def start_system_metrics(self, interval_s: float) -> None:
        rid = self._active()
        monitors = self.__dict__.setdefault("_monitors", {})
        if rid not in monitors:
            monitors[rid] = system_monitor(rid, self.uri, interval_s)

    def stop_system_metrics(self) -> None:
        mon = self.__dict__.get("_monitors", {}).pop(self._active(), None)
        if mon is not None:
            try:
                mon.close()
            except Exception as exc:  # samples are best effort: a down server must not fail the run's end
                log.warning("tracking: last system-metrics samples lost: %s", str(exc)[:200])
