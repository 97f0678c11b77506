"""evaluate (one run's final report) and compare (the sweep table)."""

# No `from __future__ import annotations`: kfp reads the real annotation objects.
from kfp.dsl import Artifact, ClassificationMetrics, Dataset, Input, Markdown, Metrics, Model, Output

from components.base import fedcore_component


@fedcore_component
def evaluate(
    config: str, overrides: list, setting: dict, methods: list, seeds: list, slot: int, slots: int,
    label: str, dataset: Input[Dataset], run: Input[Model], report: Input[Artifact], tracking: Input[Artifact],
    metrics: Output[Metrics], confusion: Output[ClassificationMetrics], figures: Output[Artifact],
    run_id: str = "", finish_parent: bool = False, rows: str = "[]", data_root: str = "",
) -> str:
    """Final metrics, confusion matrix, noise-rate figure and curves; returns `rows` plus this run's record."""
    import json
    from pathlib import Path

    from fedcore.pipeline import evaluation, runs
    from fedcore.pipeline.inputs import RunInputs, resolve

    inp = RunInputs(config, overrides, setting, methods, seeds, slot, slots, data_root)
    cfg = resolve(inp)
    try:
        ev = evaluation.evaluate(cfg, dataset.path, run.path, report.path, figures.path, run_id, inp.setting_name,
                                 label, row=inp.row)
    except BaseException as err:
        runs.fail_run(cfg, run_id, label, err)
        raise
    evaluation.publish(ev, metrics, confusion)
    if finish_parent:
        runs.finish_parent(cfg, runs.parent_of(tracking.path), [Path(figures.path) / "record.json"])
    return json.dumps([*json.loads(rows), ev.record])


@fedcore_component
def train_evaluate(
    config: str, overrides: list, setting: dict, methods: list, seeds: list, slot: int, slots: int,
    dataset: Input[Dataset], report: Input[Artifact], tracking: Input[Artifact], checkpoint: Output[Model],
    metrics: Output[Metrics], confusion: Output[ClassificationMetrics], figures: Output[Artifact],
) -> str:
    """A whole sweep run in one task (local pipelines): every stage of the slot's method, then
    evaluate; returns `[its record]` (JSON)."""
    import json

    from fedcore.pipeline import evaluation, ops
    from fedcore.pipeline.inputs import RunInputs

    inp = RunInputs(config, overrides, setting, methods, seeds, slot, slots)
    ev = ops.whole_run(inp, dataset, report.path, tracking.path, checkpoint.path, figures.path)
    evaluation.publish(ev, metrics, confusion)
    return json.dumps([ev.record])


@fedcore_component
def merge_rows(rows: list[str], previous: str = "[]") -> str:
    """One setting's run records (its loop's fan-in) appended to those of the settings before it."""
    import json

    return json.dumps([*json.loads(previous), *(r for chunk in rows for r in json.loads(chunk))])


@fedcore_component
def compare(
    config: str,
    overrides: list,
    rows: list[str],
    tracking: Input[Artifact],
    table: Output[Markdown],
    figures: Output[Artifact],
    title: str = "sweep",
    more_rows: str = "[]",
) -> str:
    """Mean ± std over the seeds of one config per (method, setting); closes the parent run.
    Returns every run's record (JSON). more_rows: records of settings outside the fan-in (JSON)."""
    import json
    import shutil
    from pathlib import Path

    from fedcore.pipeline import ops
    from fedcore.pipeline.inputs import parse_config
    from fedcore.pipeline.runs import finish_parent, parent_of

    records = [*json.loads(more_rows), *(r for chunk in rows for r in json.loads(chunk))]
    ops.compare(records, figures.path, title)
    shutil.copyfile(Path(figures.path) / "compare.md", table.path)
    finish_parent(parse_config(config, overrides), parent_of(tracking.path), sorted(Path(figures.path).iterdir()))
    return json.dumps(records)
