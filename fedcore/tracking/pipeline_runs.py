"""A pipeline run's MLflow runs as a whole: find its parent, and close it when the pipeline ends.

The pipelines' exit handler calls `close_pipeline_run` whatever happened. Kubeflow tells
it only that the pipeline failed, not where, and the exit task may take no outputs of
the tasks it guards; so the parent is found by the Kubeflow run id `start_tracking`
tagged it with, and the failed task is read off the child runs: each stage task tags its
child with its task name (`kfp.task`) and a failing one ends it FAILED. A setting whose
runs never started points at its prepare-data task.
"""

from __future__ import annotations

from typing import Any

from fedcore.tracking.base import Tracker

JOB_TAG = "kfp.run_id"
TASK_TAG = "kfp.task"
FAILED_PREFIX = "failed."  # on the parent: a task refused its inputs before it had a child run
ROLE_TAG = "fedcore.role"
PARENT_TAG = "mlflow.parentRunId"


def find_parent(tracker: Any, job_id: str) -> Any | None:
    """The parent run that `start_tracking` opened for Kubeflow run `job_id`, or None."""
    runs = tracker._call("search_runs", tracker.client.search_runs, [tracker.experiment_id],
                         filter_string=f"tags.`{JOB_TAG}` = '{job_id}' and tags.`{ROLE_TAG}` = 'parent'",
                         max_results=1)
    return runs[0] if runs else None


def source_of(tracker: Any, run_id: str) -> dict[str, str]:
    """The Source, user and commit tags of a run (a child takes its parent's)."""
    run = tracker._call("get_run", tracker.client.get_run, run_id)
    return {k: v for k, v in run.data.tags.items() if k.startswith(("mlflow.source.", "mlflow.user"))}


def tag_run(tracker: Any, run_id: str, tags: dict[str, str]) -> None:
    """Tag a run without opening or ending it (a parent other tasks are still working under)."""
    for key, value in tags.items():
        tracker._call("set_tag", tracker.client.set_tag, run_id, key, value)


def children(tracker: Any, parent_id: str) -> list[Any]:
    return tracker._call("search_runs", tracker.client.search_runs, [tracker.experiment_id],
                         filter_string=f"tags.`{PARENT_TAG}` = '{parent_id}'", max_results=5000)


def failure_report(parent_tags: dict[str, str], runs: list[Any], settings: list[str]) -> dict[str, Any]:
    """Which tasks failed, read off the parent's `failed.<task>` tags and the child runs
    (pure; `runs` are MLflow Run objects).

    A child that is not FINISHED failed in (or was stopped during) the task it names; a
    setting without children, and without a stage task that refused its inputs, never got
    past its prepare-data task.
    """
    early = {k[len(FAILED_PREFIX):]: v for k, v in parent_tags.items() if k.startswith(FAILED_PREFIX)}
    bad = [r for r in runs if r.info.status != "FINISHED"]
    tasks = [*early, *(r.data.tags.get(TASK_TAG) or r.info.run_name for r in bad)]
    errors = [*early.values(), *(r.data.tags["error"] for r in bad if r.data.tags.get("error"))]
    seen = {r.data.tags.get("setting") for r in runs}
    if not early:
        tasks += [f"prepare-data ({s})" if len(settings) > 1 else "prepare-data" for s in settings if s not in seen]
    return {"tasks": tasks, "errors": errors, "unfinished": [r.info.run_id for r in bad if r.info.status == "RUNNING"]}


def close_pipeline_run(tracker: Tracker, job_id: str, succeeded: bool, message: str = "",
                       settings: list[str] | None = None) -> dict[str, Any]:
    """End the parent of Kubeflow run `job_id`: FINISHED if it succeeded, else FAILED with
    tags naming the failed tasks; children left RUNNING by a failed task end FAILED too."""
    parent = find_parent(tracker, job_id)
    if parent is None:
        return {"parent_run_id": None, "status": None}
    pid = parent.info.run_id
    if succeeded:
        if parent.info.status == "RUNNING":
            tracker.start("", {}, run_id=pid)
            tracker.end("FINISHED")
        return {"parent_run_id": pid, "status": "FINISHED"}
    report = failure_report(dict(parent.data.tags), children(tracker, pid), settings or ["default"])
    failed = report["tasks"] or ["a task outside training (start-tracking, compare or champion); see the KFP run"]
    for rid in report["unfinished"]:
        tracker.start("", {}, run_id=rid)
        tracker.set_tags({"error": f"the pipeline run failed in {failed[0]}"})
        tracker.end("FAILED")
    tracker.start("", {}, run_id=pid)
    tracker.set_tags({"failed_task": failed[0], "failed_tasks": ", ".join(failed)[:5000],
                      "error": " | ".join([message, *report["errors"]]).strip(" |")[:5000] or "failed"})
    tracker.end("FAILED")
    return {"parent_run_id": pid, "status": "FAILED", "failed_tasks": failed}
