"""champion: register the retrained model; move alias `champion` only when it wins."""

# No `from __future__ import annotations`: kfp reads the real annotation objects.
from kfp.dsl import Artifact, Dataset, Input, Model, Output

from components.base import fedcore_component


@fedcore_component
def champion(
    config: str,
    overrides: list,
    model_name: str,
    dataset: Input[Dataset],
    run: Input[Model],
    tracking: Input[Artifact],
    decision: Output[Artifact],
    run_id: str,
    data_root: str = "",
    min_delta: float = 0.0,
) -> bool:
    """Score candidate and champion on the same test split, register, promote on a win; True if promoted."""
    from pathlib import Path

    from fedcore.pipeline.inputs import RunInputs, resolve
    from fedcore.pipeline.retrain import champion_decision
    from fedcore.pipeline.runs import finish_parent, parent_of

    cfg = resolve(RunInputs(config, overrides, data_root=data_root))
    result = champion_decision(cfg, model_name, run_id, dataset.path, run.path, decision.path, min_delta)
    decision.metadata.update({k: v for k, v in result.items() if isinstance(v, str | int | float | bool)})
    finish_parent(cfg, parent_of(tracking.path), [Path(decision.path) / "decision.json"])
    return bool(result["promote"])
