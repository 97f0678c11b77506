"""The work behind the data, stage and compare components; components only parse inputs and write outputs.

Every task resolves its config from the pipeline's run-time inputs (`fedcore.pipeline.inputs`).
The MLflow side (parent, children, the exit handler) is in `fedcore.pipeline.runs`, the
evaluate task in `fedcore.pipeline.evaluation`.
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path
from typing import Any

import torch

from fedcore.config import ExperimentConfig
from fedcore.data.build import build_federated_dataset
from fedcore.data.federated import scene_report
from fedcore.engine.beliefs import BELIEFS_FILE, LABELS_FILE
from fedcore.errors import ArtifactError
from fedcore.io import write_bytes
from fedcore.models import resolve_device
from fedcore.pipeline import evaluation
from fedcore.pipeline.done import done_line
from fedcore.pipeline.inputs import RunInputs, check_stages, resolve, slot_of
from fedcore.pipeline.plan import stage_names
from fedcore.pipeline.ranks import launch_stage, stage_callbacks
from fedcore.pipeline.resources import PipelineResources, check_accelerators
from fedcore.pipeline.runs import fail_run, note_failure, open_child, parent_of
from fedcore.pipeline.trainjob_stage import run_on_trainjob
from fedcore.reporting.compare import group_records, merge_notes
from fedcore.reporting.plots import compare_figure, save, scene_figure
from fedcore.reporting.terminal import console_rows
from fedcore.run import run_experiment
from fedcore.stats.summary import mean_std
from fedcore.tracking.pipeline_runs import TASK_TAG

# -- data -------------------------------------------------------------------------------------


def prepare(inp: RunInputs, data_dir: str | Path, report_dir: str | Path) -> dict[str, Any]:
    """Build the FederatedDataset into `data_dir` and the noise-scene report (JSON + PNG) into `report_dir`."""
    fed = build_federated_dataset(resolve(inp))
    fed.save(data_dir)
    report = scene_report(fed)
    evaluation.write_json(Path(report_dir) / "scene.json", report)
    save(scene_figure(report), Path(report_dir) / "scene.png")
    return {"sha256": fed.sha256, "data_hash": fed.meta["data_hash"], "clients": fed.num_clients,
            "noisy_clients": report["noisy_clients"], "overall_noise_rate": report["overall_noise_rate"]}


# -- training ---------------------------------------------------------------------------------


def run_stage(inp: RunInputs, stage: str, stages: list[str], data_dir: str | Path,
              checkpoint_in: str | Path | None, out_dir: str | Path, parent_run_id: str = "", run_id: str = "",
              label: str = "", data_uri: str = "", nproc: int | None = None,
              trainjob: dict[str, Any] | None = None, **trainjob_api: Any) -> tuple[ExperimentConfig, str]:
    """Run one stage, resuming from the previous stage's run dir; returns (config, child run id).

    stages: what the pipeline was compiled for (the run-time method must declare the same).
    The first stage (no run_id) opens the child run; the last closes it (evaluate reopens it).
    nproc: processes for the stage (None: one per visible GPU on CUDA, so a pod given
    `--gpus N` trains on all N through torch.distributed; one on the CPU).
    trainjob: the PipelineResources (as a dict) of a stage compiled with `workers > 1`: the
    stage then runs as a Kubeflow Trainer TrainJob (`trainjob_stage`; trainjob_api: its `api`,
    `namespace` and polling arguments, for tests) and `nproc` is not used.
    """
    cfg, rid = None, ""
    try:
        cfg = resolve(inp)
        if cfg.tracking.backend != "none":
            # Opened first: whatever fails from here on is recorded on this run's child.
            rid = run_id or open_child(cfg, parent_run_id, inp.setting_name, inp.row)
        check_stages(cfg, stages)
        if stage != stages[0]:
            _require_checkpoint(Path(checkpoint_in) if checkpoint_in is not None else None)
        resume = checkpoint_in if stage != stages[0] else None
        keep_open = stage != stages[-1]
        extra = {"tags": {TASK_TAG: label} if label else None, "data_source": data_uri or None}
        spec = {"stage": stage, "data_dir": str(data_dir), "out_dir": str(out_dir),
                "resume": None if resume is None else str(resume), "run_id": rid, "keep_open": keep_open,
                "tracking": extra}
        if trainjob:
            _on_trainjob(cfg, spec, trainjob, label, trainjob_api)
        elif (nproc := stage_processes(cfg) if nproc is None else nproc) > 1:
            launch_stage(cfg, nproc, spec)
        else:
            run_experiment(cfg, out_dir, data=data_dir, resume=resume, stages=[stage],
                           callbacks=stage_callbacks(cfg, rid, keep_open, **extra))
    except BaseException as err:
        if rid:
            fail_run(cfg, rid, label, err)
        else:
            note_failure(inp, parent_run_id, label, err)
        raise
    return cfg, rid


def whole_run(inp: RunInputs, dataset: Any, report_dir: str | Path, tracking_dir: str | Path, out_dir: str | Path,
              figures_dir: str | Path) -> Any:
    """One sweep slot in one task (the local sweep's folded shape): every stage of the slot's
    method into `out_dir`, each resuming the one before, then its evaluation; returns the Evaluation."""
    start = time.monotonic()
    cfg = resolve(inp)
    method, seed = slot_of(inp.methods, inp.seeds, inp.slot, inp.slots)
    label = f"{method}-s{seed}" if len(set(inp.seeds)) > 1 else method
    stages, rid = list(stage_names(cfg)), ""
    for i, stage in enumerate(stages):
        cfg, rid = run_stage(inp, stage, stages, dataset.path, out_dir if i else None, out_dir, parent_of(tracking_dir),
                             rid, f"{label}-{stage}", getattr(dataset, "uri", "") or "")
    try:
        ev = evaluation.evaluate(cfg, dataset.path, out_dir, report_dir, figures_dir, rid, inp.setting_name,
                                 f"{label}-evaluate", row=method)
    except BaseException as err:
        fail_run(cfg, rid, f"{label}-evaluate", err)
        raise
    # kfp.local names every iteration of the run loop alike: this line says which run ended.
    tuned = bool((inp.setting.get("method_overrides") or {}).get(method))
    print(done_line(label, inp.setting_name, tuned, time.monotonic() - start), flush=True)
    return ev


def _on_trainjob(cfg: ExperimentConfig, spec: dict[str, Any], trainjob: dict[str, Any], label: str,
                 api: dict[str, Any]) -> None:
    res = PipelineResources.model_validate(trainjob)
    check_accelerators(res, cfg.train.device)  # the run-time config may have changed the device
    run_on_trainjob(cfg, spec, res, spec["out_dir"], label=label or spec["stage"], **api)


def stage_processes(cfg: ExperimentConfig) -> int:
    """One process per visible GPU when the stage trains on CUDA, else one."""
    return torch.cuda.device_count() if resolve_device(cfg.train.device).type == "cuda" else 1


def stage_outputs(run_dir: str | Path, verdicts: str | Path | None = None,
                  labels: str | Path | None = None) -> dict[str, Any]:
    """Publish what a stage decided: the client verdicts (JSON) and the relabeled working
    labels (labels.npz plus a summary), from the beliefs the run wrote; returns their metadata."""
    run_dir = Path(run_dir)
    beliefs = json.loads((run_dir / BELIEFS_FILE).read_text()) if (run_dir / BELIEFS_FILE).is_file() else {}
    meta: dict[str, Any] = {}
    if verdicts is not None:
        keep = {k: beliefs.get(k, {}) for k in ("noisy_clients", "client_noisy", "client_rate", "rounds")}
        evaluation.write_json(Path(verdicts), keep)
        meta["noisy_clients"] = len(keep["noisy_clients"])
    if labels is not None:
        out = Path(labels)
        out.mkdir(parents=True, exist_ok=True)
        relabeled = beliefs.get("relabeled", {})
        evaluation.write_json(out / "relabeled.json", {"relabeled": relabeled, "rounds": beliefs.get("rounds", {})})
        if (run_dir / LABELS_FILE).is_file():
            shutil.copyfile(run_dir / LABELS_FILE, out / LABELS_FILE)
        meta["relabeled_samples"] = int(sum(relabeled.values()))
    return meta


def _require_checkpoint(path: Path | None) -> None:
    if path is None or not (path / "checkpoints" / "latest.pt").is_file():
        raise ArtifactError(f"no checkpoint in '{path}'; the previous stage's output is missing or incomplete")


# -- comparison -------------------------------------------------------------------------------


def plot_metric(records: list[dict[str, Any]]) -> str:
    """final/mAP_last10 when the runs are multi-label (record `task`; older records: only mAP in the
    summary), else final/acc_last10."""
    multi = [r.get("task") == "multi" or ("task" not in r and "final/mAP_last10" in r["summary"]
                                           and "final/acc_last10" not in r["summary"]) for r in records]
    return "final/mAP_last10" if records and all(multi) else "final/acc_last10"


def compare(rows: list[dict[str, Any]], out_dir: str | Path, title: str = "sweep") -> str:
    """Mean ± std over the seeds of one config per (method, setting): writes compare.md/.json/.png,
    returns the Markdown table (with a note for labels that hold several configs)."""
    if not rows:
        raise ArtifactError("no finished runs to compare; every run of the sweep failed or was skipped")
    records = [{**r, "group": f"{r['method']} · {r['setting']}"} for r in rows]
    header, table = console_rows(records, by="group")  # the console's table: shares in %, as a person reads them
    header[0] = "method · setting"
    notes = merge_notes(records, by="group")
    md = "\n".join([f"### {title}", "", "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
                   + ["| " + " | ".join(row) + " |" for row in table] + [""] + [f"Note: {n}" for n in notes]) + "\n"
    out = Path(out_dir)
    write_bytes(out / "compare.md", md.encode())
    evaluation.write_json(out / "compare.json", {"header": header, "rows": table, "notes": notes, "runs": rows})
    metric = plot_metric(records)
    groups = group_records(records, "group")
    stats = {g: mean_std([r["summary"].get(metric) for r in recs]) for g, recs in groups.items()}
    save(compare_figure(list(stats), [m for m, _ in stats.values()], [s for _, s in stats.values()], metric),
         out / "compare.png")
    return md


def stage_component(inp: RunInputs, stage: str, stages: list[str], label: str, dataset: Any, previous: Any,
                    checkpoint: Any, metrics: Any, tracking: Any, run_id: str, verdicts: Any = None,
                    labels: Any = None, trainjob: dict[str, Any] | None = None) -> str:
    """A stage component's whole body, on its kfp artifacts: run the stage, log its summary to
    `metrics`, publish the verdicts and labels the component yields, tag the checkpoint; returns
    the run id. trainjob: see `run_stage`."""
    summary, meta, rid = stage_task(inp, stage, stages, label, dataset, previous.path if previous else None,
                                    checkpoint.path, tracking.path, run_id, trainjob)
    for key, value in summary.items():
        metrics.log_metric(key, value)
    if verdicts is not None:
        verdicts.metadata.update(stage_outputs(checkpoint.path, verdicts=verdicts.path))
    if labels is not None:
        labels.metadata.update(stage_outputs(checkpoint.path, labels=labels.path))
    checkpoint.metadata.update(meta)
    return rid


def stage_task(inp: RunInputs, stage: str, stages: list[str], label: str, dataset: Any, previous: str | None,
               checkpoint: str, tracking: str, run_id: str,
               trainjob: dict[str, Any] | None = None) -> tuple[dict[str, float], dict[str, Any], str]:
    """What every stage component does: run the stage into `checkpoint` (artifact paths in;
    `dataset` is the input artifact, whose URI names the run's dataset source); returns
    (the stage's finite summary for its Metrics, the checkpoint's metadata, the run id)."""
    cfg, rid = run_stage(inp, stage, stages, dataset.path, previous, checkpoint, parent_of(tracking), run_id, label,
                         getattr(dataset, "uri", "") or "", trainjob=trainjob)
    summary = json.loads((Path(checkpoint) / "metrics.json").read_text())["summary"]
    meta = {"stage": stage, "method": cfg.method.name, "config_hash": cfg.config_hash(), "run_id": rid}
    return {k: float(v) for k, v in summary.items() if v is not None}, meta, rid
