"""start_tracking: the pipeline run's parent MLflow run."""

# No `from __future__ import annotations`: kfp reads the real annotation objects.
from kfp.dsl import Artifact, Output

from components.base import fedcore_component


@fedcore_component
def start_tracking(config_yaml: str, pipeline: str, tracking: Output[Artifact]):
    """Open the parent MLflow run; its id travels as a small artifact ('' when tracking is off).

    An artifact rather than a string output: kfp.local 2.17 replaces task-output parameters
    entering a ParallelFor body with the loop item, while artifacts pass through intact.
    """
    from fedcore.pipeline import ops

    tracking.metadata["parent_run_id"] = ops.start_tracking(config_yaml, pipeline, tracking.path)
