"""run_stage: one task per stage the method declares, checkpoint in, checkpoint out."""

# No `from __future__ import annotations`: kfp reads the real annotation objects.
from kfp.dsl import Artifact, Dataset, Input, Metrics, Model, Output

from components.base import fedcore_component


@fedcore_component
def run_stage(
    config_yaml: str,
    overrides: str,
    config_hash: str,
    stage: str,
    dataset: Input[Dataset],
    tracking: Input[Artifact],
    checkpoint: Output[Model],
    metrics: Output[Metrics],
    previous: Input[Model] = None,
    run_id: str = "",
    setting: str = "",
    data_root: str = "",
) -> str:
    """Train one stage (resuming `previous`); returns the child MLflow run id."""
    import json
    from pathlib import Path

    from fedcore.pipeline import ops

    cfg = ops.task_config(config_yaml, overrides, config_hash, data_root)
    prev = previous.path if previous is not None else None
    rid = ops.run_stage(cfg, stage, dataset.path, prev, checkpoint.path, ops.parent_of(tracking.path), run_id, setting)
    summary = json.loads((Path(checkpoint.path) / "metrics.json").read_text())["summary"]
    for key, value in summary.items():
        if value is not None:
            metrics.log_metric(key, value)
    checkpoint.metadata.update(stage=stage, method=cfg.method.name, config_hash=config_hash, run_id=rid)
    return rid
