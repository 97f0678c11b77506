"""start_tracking (the pipeline run's parent MLflow run) and finish_tracking (the exit handler)."""

# No `from __future__ import annotations`: kfp reads the real annotation objects.
from kfp.dsl import Artifact, Output, PipelineTaskFinalStatus

from components.base import fedcore_component


@fedcore_component
def start_tracking(config: str, overrides: list, pipeline: str, job_id: str, methods: list, settings: list,
                   tracking: Output[Artifact]):
    """Open the parent MLflow run, named by method and setting and tagged with the Kubeflow run id.

    Its id travels as a small artifact ('' when tracking is off): kfp.local 2.17 replaces
    task-output parameters entering a ParallelFor body with the loop item, artifacts pass intact.
    """
    from fedcore.pipeline.inputs import parse_config
    from fedcore.pipeline.runs import start_tracking as start

    names = [s["setting"] for s in settings]
    rid = start(parse_config(config, overrides), pipeline, tracking.path, job_id, methods, names)
    tracking.metadata["parent_run_id"] = rid


@fedcore_component
def finish_tracking(config: str, overrides: list, job_id: str, settings: list,
                    status: PipelineTaskFinalStatus) -> str:
    """The exit handler: end the parent run FINISHED, or FAILED with the failed tasks named."""
    import json

    from fedcore.pipeline.inputs import parse_config
    from fedcore.pipeline.runs import finish

    names = [s["setting"] for s in settings]
    result = finish(parse_config(config, overrides), job_id, status.state, status.error_message or "", names)
    return json.dumps(result)
