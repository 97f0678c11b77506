"""The work behind each pipeline component; components only parse inputs and write outputs.

Tracking: `start_tracking` opens one parent run per pipeline run; the first stage of a
(method, seed, setting) opens its child run, later stages resume it by id, `evaluate`
adds the report figures and closes it, and `compare` (or the last evaluate) closes the
parent. With `tracking.backend: none` every run id is "" and nothing is logged.
"""

from __future__ import annotations

import csv
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fedcore.config import ExperimentConfig
from fedcore.errors import ArtifactError, ConfigError
from fedcore.io import write_bytes
from fedcore.pipeline.plan import apply, load_run_config, stage_names

REPORT_FILES = ("scene.json", "scene.png")


def with_data_root(cfg: ExperimentConfig, data_root: str) -> ExperimentConfig:
    """Point the dataset at a snapshot resolved at run time (retrain); '' keeps the config's root."""
    return apply(cfg, [f"data.root={data_root}"]) if data_root else cfg


def task_config(config_yaml: str, overrides_json: str, config_hash: str, data_root: str = "") -> ExperimentConfig:
    return with_data_root(load_run_config(config_yaml, overrides_json, config_hash), data_root)


def _tracker(cfg: ExperimentConfig):
    from fedcore.tracking import make_tracker

    return make_tracker(cfg.tracking, Path.cwd())


def _write_json(path: Path, obj: Any) -> None:
    write_bytes(path, json.dumps(obj, indent=2, default=str).encode())


# -- tracking ---------------------------------------------------------------------------------


def start_tracking(config_yaml: str, pipeline: str, out: str | Path, run_name: str = "") -> str:
    """Open the pipeline run's parent MLflow run; write and return its id ('' without tracking)."""
    cfg = load_run_config(config_yaml)
    rid = ""
    if cfg.tracking.backend != "none":
        tags = {"pipeline": pipeline, "dataset": cfg.data.name, "config_hash": cfg.config_hash()}
        rid = _tracker(cfg).start_parent(run_name or f"{pipeline} · {cfg.data.name}", tags)
    _write_json(Path(out), {"parent_run_id": rid})
    return rid


def parent_of(tracking_file: str | Path) -> str:
    """The parent run id `start_tracking` wrote."""
    try:
        return str(json.loads(Path(tracking_file).read_text())["parent_run_id"])
    except (OSError, ValueError, KeyError):
        raise ArtifactError(f"'{tracking_file}' is not a start_tracking output; rerun the pipeline") from None


def open_child(cfg: ExperimentConfig, parent_run_id: str, setting: str) -> str:
    """Create the child run of one (method, seed, setting) and leave it RUNNING for the stages."""
    from fedcore.tracking.base import run_name_for, standard_tags

    tags = {**standard_tags(cfg), "setting": setting or "default", "fedcore.role": "child"}
    return _tracker(cfg).start(cfg.tracking.run_name or run_name_for(cfg), tags, parent_run_id=parent_run_id or None)


def finish_parent(cfg: ExperimentConfig, parent_run_id: str, files: list[Path]) -> None:
    """Attach the summary files to the parent run and end it."""
    if not parent_run_id or cfg.tracking.backend == "none":
        return
    tracker = _tracker(cfg)
    tracker.start("", {}, run_id=parent_run_id)
    for f in files:
        if f.is_file():
            tracker.log_artifact(f, "summary")
    tracker.end("FINISHED")


# -- data -------------------------------------------------------------------------------------


def prepare(config_yaml: str, overrides_json: str, data_hash: str, data_dir: str | Path,
            report_dir: str | Path, data_root: str = "") -> dict[str, Any]:
    """Build the FederatedDataset into `data_dir` and the noise-scene report (JSON + PNG) into `report_dir`."""
    from fedcore.data.build import build_federated_dataset
    from fedcore.data.federated import scene_report
    from fedcore.reporting.plots import save, scene_figure

    cfg = load_run_config(config_yaml, overrides_json)
    if data_hash and cfg.data_hash() != data_hash:
        raise ConfigError(f"data hash {cfg.data_hash()} != {data_hash} the pipeline was compiled for; recompile it")
    fed = build_federated_dataset(with_data_root(cfg, data_root))
    fed.save(data_dir)
    report = scene_report(fed)
    _write_json(Path(report_dir) / "scene.json", report)
    save(scene_figure(report), Path(report_dir) / "scene.png")
    return {"sha256": fed.sha256, "data_hash": fed.meta["data_hash"], "clients": fed.num_clients,
            "noisy_clients": report["noisy_clients"], "overall_noise_rate": report["overall_noise_rate"]}


# -- training ---------------------------------------------------------------------------------


def run_stage(cfg: ExperimentConfig, stage: str, data_dir: str | Path, checkpoint_in: str | Path | None,
              out_dir: str | Path, parent_run_id: str = "", run_id: str = "", setting: str = "") -> str:
    """Run one stage of `cfg`'s method, resuming from the previous stage's run dir; returns the child run id.

    The first stage (no run_id) opens the child run; the method's last stage closes it
    unless evaluate follows (it always does in the pipelines, which reopen it by id).
    """
    from fedcore.engine.callbacks import EarlyStopping
    from fedcore.run import run_experiment

    stages = stage_names(cfg)
    if stage not in stages:
        raise ConfigError(f"method '{cfg.method.name}' has stages {list(stages)}; no stage '{stage}'")
    # Same callbacks in the same order in every stage: checkpoints restore their state by position.
    callbacks: list[Any] = [EarlyStopping(cfg.train.early_stop_patience)] if cfg.train.early_stop_patience else []
    rid = ""
    if cfg.tracking.backend != "none":
        from fedcore.tracking.callback import TrackingCallback

        rid = run_id or open_child(cfg, parent_run_id, setting)
        tracked = cfg.model_copy(update={"tracking": cfg.tracking.model_copy(update={"run_id": rid})})
        callbacks.append(TrackingCallback(_tracker(cfg), tracked, keep_open=stage != stages[-1]))
    if checkpoint_in is not None and stage != stages[0]:
        _require_checkpoint(Path(checkpoint_in))
    resume = checkpoint_in if stage != stages[0] else None
    run_experiment(cfg, out_dir, data=data_dir, resume=resume, stages=[stage], callbacks=callbacks)
    return rid


def _require_checkpoint(path: Path) -> None:
    if not (path / "checkpoints" / "latest.pt").is_file():
        raise ArtifactError(f"no checkpoint in '{path}'; the previous stage's output is missing or incomplete")


# -- evaluation -------------------------------------------------------------------------------


@dataclass
class Evaluation:
    record: dict[str, Any]
    confusion: list[list[int]] | None = None
    class_names: list[str] = field(default_factory=list)
    figures: list[Path] = field(default_factory=list)


def read_history(path: Path) -> list[dict[str, Any]]:
    """history.csv rows with numbers parsed back (stage stays text, blanks are dropped)."""
    with open(path, newline="") as f:
        return [{k: (v if k == "stage" else float(v)) for k, v in row.items() if v not in ("", None)}
                for row in csv.DictReader(f)]


def rate_estimates(history: list[dict[str, Any]]) -> dict[int, float]:
    """The last per-client noise-rate estimates a run logged ({} for methods that estimate none)."""
    prefix = "noise/rate_est/client_"
    for row in reversed(history):
        est = {int(k[len(prefix):]): v for k, v in row.items() if k.startswith(prefix)}
        if est:
            return est
    return {}


def evaluate(cfg: ExperimentConfig, data_dir: str | Path, run_dir: str | Path, report_dir: str | Path,
             out_dir: str | Path, run_id: str = "", setting: str = "") -> Evaluation:
    """Final metrics, confusion matrix, rate scatter and curves of a finished run; closes its child run."""
    from fedcore.data.federated import FederatedDataset

    run_dir, out = Path(run_dir), Path(out_dir)
    metrics_file = run_dir / "metrics.json"
    if not metrics_file.is_file():
        raise ArtifactError(f"'{run_dir}' has no metrics.json; the last stage did not finish")
    final = json.loads(metrics_file.read_text())
    history = read_history(run_dir / "history.csv")
    fed = FederatedDataset.load(data_dir)
    setting = setting or "default"
    ev = Evaluation(record={
        "setting": setting, "method": cfg.method.name, "group": f"{cfg.method.name} · {setting}", "seed": cfg.seed,
        "config_hash": cfg.config_hash(), "data_sha256": final.get("data_sha256"), "run_id": run_id,
        "rounds": final.get("rounds"), "summary": final["summary"], "task": fed.task,
    }, class_names=list(fed.meta.get("class_names") or []))
    ev.figures = _figures(cfg, fed, history, run_dir, out, ev)
    _write_json(out / "record.json", ev.record)
    if run_id and cfg.tracking.backend != "none":
        _log_evaluation(cfg, run_id, out, Path(report_dir))
    return ev


def _figures(cfg, fed, history, run_dir: Path, out: Path, ev: Evaluation) -> list[Path]:
    from fedcore.reporting.plots import confusion_figure, curves_figure, rate_scatter, save
    from fedcore.tracking.base import run_name_for

    figs = [save(curves_figure(history, run_name_for(cfg), task=fed.task), out / "curves.png")]
    if (run_dir / "confusion.json").is_file():
        ev.confusion = json.loads((run_dir / "confusion.json").read_text())
        figs.append(save(confusion_figure(ev.confusion, ev.class_names), out / "confusion.png"))
    est = rate_estimates(history)
    if est:
        cids = sorted(est)
        true = [float(fed.truth.realized_rate[c]) for c in cids]
        figs.append(save(rate_scatter(true, [est[c] for c in cids], run_name_for(cfg)), out / "noise_rates.png"))
        _write_json(out / "noise_rates.json", {"client": cids, "true": true, "estimated": [est[c] for c in cids]})
    return figs


def _log_evaluation(cfg: ExperimentConfig, run_id: str, out: Path, report_dir: Path) -> None:
    tracker = _tracker(cfg)
    tracker.start("", {}, run_id=run_id)
    try:
        for f in sorted(out.iterdir()):
            tracker.log_artifact(f, "evaluation")
        for name in REPORT_FILES:
            if (report_dir / name).is_file():
                tracker.log_artifact(report_dir / name, "reports")
        tracker.set_tags({"evaluated": "true"})
    except BaseException:
        tracker.end("FAILED")
        raise
    tracker.end("FINISHED")


# -- comparison -------------------------------------------------------------------------------


def plot_metric(records: list[dict[str, Any]]) -> str:
    """final/mAP_last10 when the runs are multi-label (record `task`; older records: only mAP in the
    summary), else final/acc_last10."""
    multi = [r.get("task") == "multi" or ("task" not in r and "final/mAP_last10" in r["summary"]
                                           and "final/acc_last10" not in r["summary"]) for r in records]
    return "final/mAP_last10" if records and all(multi) else "final/acc_last10"


def compare(rows: list[dict[str, Any]], out_dir: str | Path, title: str = "sweep") -> str:
    """Mean ± std over seeds per (method, setting): writes compare.md/.json/.png, returns the Markdown table."""
    from fedcore.reporting.compare import comparison_rows, mean_std
    from fedcore.reporting.plots import compare_figure, save

    if not rows:
        raise ArtifactError("no finished runs to compare; every run of the sweep failed or was skipped")
    records = [{**r, "group": f"{r['method']} · {r['setting']}"} for r in rows]
    header, table = comparison_rows(records, by="group")
    header[0] = "method · setting"
    md = "\n".join([f"### {title}", "", "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
                   + ["| " + " | ".join(row) + " |" for row in table]) + "\n"
    out = Path(out_dir)
    write_bytes(out / "compare.md", md.encode())
    _write_json(out / "compare.json", {"header": header, "rows": table, "runs": rows})
    metric = plot_metric(records)
    groups: dict[str, list[float]] = {}
    for r in records:
        groups.setdefault(r["group"], []).append(r["summary"].get(metric))
    stats = {g: mean_std(v) for g, v in groups.items()}
    save(compare_figure(list(stats), [m for m, _ in stats.values()], [s for _, s in stats.values()], metric),
         out / "compare.png")
    return md
