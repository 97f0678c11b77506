"""One task per stage a method declares, checkpoint in, checkpoint out.

A stage that identifies noisy clients publishes its verdicts, one that relabels publishes
the working labels, each through its own component (`Stage.yields` picks it):

    run_stage               checkpoint (Model), metrics
    identify_stage          + verdicts (Artifact: JSON of per-client verdicts and rate estimates)
    relabel_stage           + labels (Dataset: labels.npz per client, relabeled.json)
    identify_relabel_stage  + verdicts + labels (e.g. FedCorr's preprocess)

`trainjob` (set by the pipeline when it was compiled with `--workers N`, N > 1: the task
resources) makes the task run its stage as a Kubeflow Trainer TrainJob of N nodes and wait
for it (`fedcore.pipeline.trainjob_stage`); empty, the task trains itself.
"""

# No `from __future__ import annotations`: kfp reads the real annotation objects.
from kfp.dsl import Artifact, Dataset, Input, Metrics, Model, Output

from components.base import fedcore_component


@fedcore_component
def run_stage(
    config: str, overrides: list, setting: dict, methods: list, seeds: list, slot: int, slots: int,
    stage: str, stages: list, label: str, dataset: Input[Dataset], tracking: Input[Artifact],
    checkpoint: Output[Model], metrics: Output[Metrics], previous: Input[Model] = None, run_id: str = "",
    data_root: str = "", trainjob: dict = {},  # noqa: B006 (kfp reads the default)
) -> str:
    """Train one stage (resuming `previous`); returns the child MLflow run id."""
    from fedcore.pipeline import ops
    from fedcore.pipeline.inputs import RunInputs

    inp = RunInputs(config, overrides, setting, methods, seeds, slot, slots, data_root)
    return ops.stage_component(inp, stage, stages, label, dataset, previous, checkpoint, metrics, tracking, run_id,
                               trainjob=trainjob)


@fedcore_component
def identify_stage(
    config: str, overrides: list, setting: dict, methods: list, seeds: list, slot: int, slots: int,
    stage: str, stages: list, label: str, dataset: Input[Dataset], tracking: Input[Artifact],
    checkpoint: Output[Model], metrics: Output[Metrics], verdicts: Output[Artifact], previous: Input[Model] = None,
    run_id: str = "", data_root: str = "", trainjob: dict = {},  # noqa: B006 (kfp reads the default)
) -> str:
    """Run an identification stage; its verdicts (which clients look noisy) become an artifact."""
    from fedcore.pipeline import ops
    from fedcore.pipeline.inputs import RunInputs

    inp = RunInputs(config, overrides, setting, methods, seeds, slot, slots, data_root)
    return ops.stage_component(inp, stage, stages, label, dataset, previous, checkpoint, metrics, tracking, run_id,
                               verdicts=verdicts, trainjob=trainjob)


@fedcore_component
def relabel_stage(
    config: str, overrides: list, setting: dict, methods: list, seeds: list, slot: int, slots: int,
    stage: str, stages: list, label: str, dataset: Input[Dataset], tracking: Input[Artifact],
    checkpoint: Output[Model], metrics: Output[Metrics], labels: Output[Dataset], previous: Input[Model] = None,
    run_id: str = "", data_root: str = "", trainjob: dict = {},  # noqa: B006 (kfp reads the default)
) -> str:
    """Run a relabeling stage; the clients' new working labels become a dataset artifact."""
    from fedcore.pipeline import ops
    from fedcore.pipeline.inputs import RunInputs

    inp = RunInputs(config, overrides, setting, methods, seeds, slot, slots, data_root)
    return ops.stage_component(inp, stage, stages, label, dataset, previous, checkpoint, metrics, tracking, run_id,
                               labels=labels, trainjob=trainjob)


@fedcore_component
def identify_relabel_stage(
    config: str, overrides: list, setting: dict, methods: list, seeds: list, slot: int, slots: int,
    stage: str, stages: list, label: str, dataset: Input[Dataset], tracking: Input[Artifact],
    checkpoint: Output[Model], metrics: Output[Metrics], verdicts: Output[Artifact], labels: Output[Dataset],
    previous: Input[Model] = None, run_id: str = "", data_root: str = "",
    trainjob: dict = {},  # noqa: B006 (kfp reads the default)
) -> str:
    """Run a stage that both identifies and relabels; verdicts and labels become artifacts."""
    from fedcore.pipeline import ops
    from fedcore.pipeline.inputs import RunInputs

    inp = RunInputs(config, overrides, setting, methods, seeds, slot, slots, data_root)
    return ops.stage_component(inp, stage, stages, label, dataset, previous, checkpoint, metrics, tracking, run_id,
                               verdicts=verdicts, labels=labels, trainjob=trainjob)
