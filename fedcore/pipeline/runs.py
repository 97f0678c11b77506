"""The MLflow runs of a pipeline run: one parent, one child per (method, seed, setting).

`start_tracking` opens the parent (named by method and setting, tagged with the Kubeflow
run id); the first stage of a run opens its child, later stages resume it by id,
`evaluate` adds the report figures and closes it, `compare` (or the last evaluate, or
`champion`) attaches the summary to the parent, and the exit handler's `finish` closes
the parent: FINISHED, or FAILED naming the failed task. With `tracking.backend: none`
every run id is "" and nothing is logged.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from fedcore.config import ExperimentConfig
from fedcore.errors import ArtifactError, TrackingError, UserError
from fedcore.io import write_bytes
from fedcore.pipeline.inputs import parse_config
from fedcore.tracking import make_tracker
from fedcore.tracking.base import noise_label, run_name_for, source_tags, standard_tags
from fedcore.tracking.pipeline_runs import FAILED_PREFIX, JOB_TAG, TASK_TAG, close_pipeline_run, source_of, tag_run

MAX_NAME = 250  # MLflow shows long run names cut anyway


def tracker_for(cfg: ExperimentConfig) -> Any:
    return make_tracker(cfg.tracking, Path.cwd())


def parent_name(pipeline: str, cfg: ExperimentConfig, methods: list[str] | None = None,
                settings: list[str] | None = None) -> str:
    """e.g. `fedsir · sym 0.4 · digits`, `sweep · fedavg, fedprox · noisy, clean · digits`."""
    setting = ", ".join(settings) if settings else noise_label(cfg)
    method = ", ".join(methods) if methods else cfg.method.name
    head = [] if pipeline == "experiment" else [pipeline]
    return " · ".join([*head, method, setting, cfg.data.name])[:MAX_NAME]


def start_tracking(cfg: ExperimentConfig, pipeline: str, out: str | Path, job_id: str = "",
                   methods: list[str] | None = None, settings: list[str] | None = None) -> str:
    """Open the pipeline run's parent MLflow run; write and return its id ('' without tracking)."""
    rid = ""
    if cfg.tracking.backend != "none":
        tags = {"pipeline": pipeline, "dataset": cfg.data.name, "config_hash": cfg.config_hash(),
                "methods": ", ".join(methods or [cfg.method.name]), **({JOB_TAG: job_id} if job_id else {}),
                **source_tags(f"fedcore-{pipeline} (Kubeflow pipeline)", "JOB")}
        if settings:
            tags["settings"] = ", ".join(settings)
        rid = tracker_for(cfg).start_parent(parent_name(pipeline, cfg, methods, settings), tags)
    write_bytes(Path(out), json.dumps({"parent_run_id": rid}).encode())
    return rid


def parent_of(tracking_file: str | Path) -> str:
    """The parent run id `start_tracking` wrote."""
    try:
        return str(json.loads(Path(tracking_file).read_text())["parent_run_id"])
    except (OSError, ValueError, KeyError):
        raise ArtifactError(f"'{tracking_file}' is not a start_tracking output; rerun the pipeline") from None


def open_child(cfg: ExperimentConfig, parent_run_id: str, setting: str, row: str = "") -> str:
    """Create the child run of one (method, seed, setting), RUNNING for the stages; it takes
    the parent's Source tags (a task's own command line means nothing to a reader). row: the
    sweep row when it is a variant (fedgr-robust), tagged `row` and named so, as fedgr and
    fedgr-robust runs of one sweep would otherwise read alike."""
    tracker = tracker_for(cfg)
    row = row or cfg.method.name
    tags = {**standard_tags(cfg), "row": row, "setting": setting or "default", "fedcore.role": "child"}
    if parent_run_id:
        tags.update(source_of(tracker, parent_run_id))
    name = cfg.tracking.run_name or run_name_for(cfg, row, setting or "default")
    return tracker.start(name, tags, parent_run_id=parent_run_id or None)


def finish_parent(cfg: ExperimentConfig, parent_run_id: str, files: list[Path]) -> None:
    """Attach the summary files to the parent run and end it."""
    if not parent_run_id or cfg.tracking.backend == "none":
        return
    tracker = tracker_for(cfg)
    tracker.start("", {}, run_id=parent_run_id)
    for f in files:
        if f.name == "compare.json":
            # The table view in the run's artifacts, so the UI shows the comparison without a download.
            tracker.log_table(compare_table(json.loads(f.read_text())), "summary/compare_table.json")
        if f.is_file():
            tracker.log_artifact(f, "summary")
    tracker.end("FINISHED")


def compare_table(compare: dict[str, Any]) -> dict[str, list[Any]]:
    """compare.json's header and rows as the column -> values mapping mlflow's log_table takes."""
    header, rows = compare["header"], compare["rows"]
    return {name: [row[i] for row in rows] for i, name in enumerate(header)}


def finish(cfg: ExperimentConfig, job_id: str, state: str, message: str = "",
           settings: list[str] | None = None) -> dict[str, Any]:
    """The exit handler: close the parent of Kubeflow run `job_id` whatever happened (see
    `fedcore.tracking.pipeline_runs`); {} without tracking."""
    if cfg.tracking.backend == "none":
        return {}

    return close_pipeline_run(tracker_for(cfg), job_id, state == "SUCCEEDED", message, settings)


def fail_run(cfg: ExperimentConfig, run_id: str, label: str, error: BaseException) -> None:
    """Mark a child run FAILED by task `label` (a task that died before or after its own
    tracking did); never raises over the original error."""
    if not run_id or cfg.tracking.backend == "none":
        return
    try:
        tracker = tracker_for(cfg)
        tracker.start("", {TASK_TAG: label} if label else {}, run_id=run_id)
        tracker.set_tags({"error": " ".join(str(error).split())[:1000] or type(error).__name__})
        tracker.end("FAILED")
    except TrackingError:
        pass  # the store itself is what failed; the exit handler reports the task


def note_failure(inp: Any, parent_run_id: str, label: str, error: BaseException) -> None:
    """Record on the parent that task `label` failed before it had a child run (its inputs
    were refused); the exit handler names it. Never raises over the original error."""
    if not parent_run_id or not label:
        return
    for overrides in (inp.overrides, ()):  # the tracking settings, even if an override is what failed
        try:
            cfg = parse_config(inp.config, overrides)
            break
        except UserError:
            continue
    else:
        return
    if cfg.tracking.backend == "none":
        return
    try:  # the parent stays RUNNING: other tasks may still be working; the exit handler ends it
        tag_run(tracker_for(cfg), parent_run_id,
                {f"{FAILED_PREFIX}{label}": " ".join(str(error).split())[:1000] or type(error).__name__})
    except UserError:
        pass
