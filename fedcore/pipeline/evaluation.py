"""The evaluate task: a finished run's record, confusion matrix, curves and noise-rate figure.

It is the metrics side of a pipeline: it reads the scene's truth to draw each client's
estimated noise rate against its true one. It logs its figures to the run's MLflow
child and closes it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fedcore.config import ExperimentConfig
from fedcore.data.federated import FederatedDataset
from fedcore.errors import ArtifactError
from fedcore.io import write_bytes
from fedcore.pipeline.runs import tracker_for
from fedcore.reporting.compare import flat_config
from fedcore.reporting.plots import confusion_figure, curves_figure, rate_trajectories, save
from fedcore.reporting.report import rate_series, read_history
from fedcore.tracking.base import run_name_for
from fedcore.tracking.pipeline_runs import TASK_TAG

REPORT_FILES = ("scene.json", "scene.png")


@dataclass
class Evaluation:
    record: dict[str, Any]
    confusion: list[list[int]] | None = None
    class_names: list[str] = field(default_factory=list)
    figures: list[Path] = field(default_factory=list)


def write_json(path: Path, obj: Any) -> None:
    """obj as indented JSON at a local path or s3:// URI (what is not JSON, as its str)."""
    write_bytes(path, json.dumps(obj, indent=2, default=str).encode())


def record(cfg: ExperimentConfig, final: dict[str, Any], run_id: str, setting: str, task: str,
           row: str = "") -> dict[str, Any]:
    """One run's row for `compare`: labels, the flattened config (for grouping) and its summary.
    row: the sweep row, when a variant (fedgr-robust) names it rather than its method."""
    row = row or cfg.method.name
    return {"setting": setting, "method": row, "group": f"{row} · {setting}",
            "seed": cfg.seed, "config_hash": cfg.config_hash(), "config": flat_config(cfg.to_dict()),
            "data_sha256": final.get("data_sha256"), "run_id": run_id, "rounds": final.get("rounds"),
            "summary": final["summary"], "task": task}


def evaluate(cfg: ExperimentConfig, data_dir: str | Path, run_dir: str | Path, report_dir: str | Path,
             out_dir: str | Path, run_id: str = "", setting: str = "", label: str = "", row: str = "") -> Evaluation:
    """Final metrics, confusion matrix, noise-rate figure and curves of a finished run; closes its child run."""
    run_dir, out = Path(run_dir), Path(out_dir)
    metrics_file = run_dir / "metrics.json"
    if not metrics_file.is_file():
        raise ArtifactError(f"'{run_dir}' has no metrics.json; the last stage did not finish")
    final = json.loads(metrics_file.read_text())
    history = read_history(run_dir / "history.csv")
    fed = FederatedDataset.load(data_dir)
    ev = Evaluation(record=record(cfg, final, run_id, setting or "default", fed.task, row),
                    class_names=list(fed.meta.get("class_names") or []))
    ev.figures = _figures(cfg, fed, history, run_dir, out, ev)
    write_json(out / "record.json", ev.record)
    if run_id and cfg.tracking.backend != "none":
        _log_evaluation(cfg, run_id, out, Path(report_dir), label)
    return ev


def publish(ev: Evaluation, metrics: Any, confusion: Any) -> None:
    """An evaluation's summary and confusion matrix onto the task's kfp Metrics and ClassificationMetrics."""
    for key, value in ev.record["summary"].items():
        if value is not None:
            metrics.log_metric(key, value)
    if ev.confusion is not None:
        confusion.log_confusion_matrix(ev.class_names or [str(i) for i in range(len(ev.confusion))], ev.confusion)


def _figures(cfg, fed, history, run_dir: Path, out: Path, ev: Evaluation) -> list[Path]:
    figs = [save(curves_figure(history, run_name_for(cfg), task=fed.task), out / "curves.png")]
    if (run_dir / "confusion.json").is_file():
        ev.confusion = json.loads((run_dir / "confusion.json").read_text())
        figs.append(save(confusion_figure(ev.confusion, ev.class_names), out / "confusion.png"))
    series = rate_series(history)
    if series:
        # Truth is read here, on the metrics side, to draw what the method estimated against it.
        true = {c: float(fed.truth.realized_rate[c]) for c in series}
        figs.append(save(rate_trajectories(series, true, run_name_for(cfg)), out / "noise_rates.png"))
        cids = sorted(series)
        write_json(out / "noise_rates.json", {"client": cids, "true": [true[c] for c in cids],
                                               "estimated": [series[c][-1][1] for c in cids],
                                               "rounds": {str(c): series[c] for c in cids}})
    return figs


def _log_evaluation(cfg: ExperimentConfig, run_id: str, out: Path, report_dir: Path, label: str) -> None:
    tracker = tracker_for(cfg)
    tracker.start("", {TASK_TAG: label} if label else {}, run_id=run_id)
    try:
        for f in sorted(out.iterdir()):
            tracker.log_artifact(f, "evaluation")
        for name in REPORT_FILES:
            if (report_dir / name).is_file():
                tracker.log_artifact(report_dir / name, "reports")
        tracker.set_tags({"evaluated": "true"})
    except BaseException as err:
        tracker.set_tags({"error": " ".join(str(err).split())[:1000] or type(err).__name__})
        tracker.end("FAILED")
        raise
    tracker.end("FINISHED")
