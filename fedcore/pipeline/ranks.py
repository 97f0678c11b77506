"""One pipeline stage over several processes, and the callbacks of a stage on any rank.

    python -m torch.distributed.run --standalone --nproc-per-node N -m fedcore.pipeline.ranks SPEC.json
    torchrun -m fedcore.pipeline.ranks s3://bucket/trainjobs/JOB/spec.json     # every TrainJob node

SPEC holds the stage's config (as YAML, its hash checked) and `run_stage`'s arguments. Every
rank runs the stage with the distributed executor; rank 0 alone writes the run dir and logs
to the stage's MLflow child run, which the launching task opened. The first form is a pod with
N GPUs (`ops.run_stage`); the second a Kubeflow Trainer TrainJob (`trainjob_stage`), whose
spec names s3:// inputs and an `upload` prefix: rank 0 downloads the run dir to resume, trains
into a local folder and uploads it there when the stage ends.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path
from typing import Any

import yaml

from fedcore.config import ExperimentConfig
from fedcore.engine.callbacks import Callback, EarlyStopping
from fedcore.engine.distributed import init_distributed, launch, shutdown
from fedcore.io import download_dir, read_bytes, upload_dir
from fedcore.models import resolve_device
from fedcore.registries import config_from_dict
from fedcore.run import run_experiment
from fedcore.tracking import make_tracker
from fedcore.tracking.callback import TrackingCallback


def stage_callbacks(cfg: ExperimentConfig, run_id: str, keep_open: bool, main: bool = True,
                    tags: dict[str, str] | None = None, data_source: str | None = None) -> list[Any]:
    """Early stopping and tracking of a stage; on ranks other than 0 tracking is a placeholder.
    tags, data_source: passed to the TrackingCallback (the pipeline task's name, the dataset's URI).

    Same callbacks in the same order in every stage: checkpoints restore their state by position.
    """
    callbacks: list[Any] = [EarlyStopping(cfg.train.early_stop_patience)] if cfg.train.early_stop_patience else []
    if cfg.tracking.backend != "none":
        tracked = cfg.model_copy(update={"tracking": cfg.tracking.model_copy(update={"run_id": run_id})})
        callbacks.append(TrackingCallback(make_tracker(cfg.tracking, Path.cwd()), tracked, keep_open=keep_open,
                                          tags=tags, data_source=data_source)
                         if main else Callback())
    return callbacks


def launch_stage(cfg: ExperimentConfig, nproc: int, spec: dict[str, Any]) -> None:
    """Run the stage `spec` describes on `nproc` local ranks; raise when one of them failed."""
    with tempfile.TemporaryDirectory(prefix="fedcore-stage-") as tmp:
        path = Path(tmp) / "spec.json"
        path.write_text(json.dumps({**spec, "config": cfg.to_yaml(), "config_hash": cfg.config_hash()}))
        code = launch(nproc, "fedcore.pipeline.ranks", [str(path)])
    if code:
        raise RuntimeError(f"stage '{spec['stage']}' failed on {nproc} processes (torchrun exit code {code}); "
                           "the failing rank's error is above, and a retry resumes the stage's input checkpoint")


def main(spec_path: str) -> None:
    spec = json.loads(read_bytes(spec_path))
    cfg = config_from_dict(yaml.safe_load(spec["config"]))
    if cfg.config_hash() != spec["config_hash"]:
        raise RuntimeError(f"the stage config changed on its way to the ranks ({cfg.config_hash()})")
    info = init_distributed(resolve_device(cfg.train.device))
    main_rank = info is None or info.is_main
    try:
        if spec.get("upload"):
            _run_remote(cfg, spec, info, main_rank)
        else:
            _run(cfg, spec, spec["out_dir"], spec["resume"], info, main_rank)
    finally:
        shutdown(info)


def _run(cfg: ExperimentConfig, spec: dict[str, Any], out_dir: str, resume: str | None, info: Any,
         main_rank: bool) -> None:
    run_experiment(cfg, out_dir, data=spec["data_dir"], resume=resume, stages=[spec["stage"]],
                   callbacks=stage_callbacks(cfg, spec["run_id"], spec["keep_open"], main=main_rank,
                                             **spec.get("tracking", {})), dist=info)


def _run_remote(cfg: ExperimentConfig, spec: dict[str, Any], info: Any, main_rank: bool) -> None:
    """A TrainJob rank: the nodes share no disk, so rank 0 (the only reader of the checkpoint and
    the only writer) stages the previous run dir from S3 and uploads the new one at the end."""
    with tempfile.TemporaryDirectory(prefix="fedcore-rank-") as tmp:
        resume = spec["resume"]
        if resume is not None and main_rank:
            resume = str(download_dir(resume, Path(tmp) / "resume"))
        out = Path(tmp) / "out"
        _run(cfg, spec, str(out), resume, info, main_rank)
        if main_rank:
            upload_dir(out, spec["upload"])


if __name__ == "__main__":
    main(sys.argv[1])
