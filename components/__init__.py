"""Kubeflow Pipelines components: thin adapters over `fedcore.pipeline`.

Each one parses its inputs, calls one fedcore function and writes its outputs. Imports
sit inside the bodies because kfp ships only the function's source to the container
(the project image, which has fedcore installed). `base_image` is the project image
(`FEDCORE_IMAGE` or `fedcore.deploy.env.DEFAULT_IMAGE`); pipelines may override it per task.
"""

from components.data import latest_snapshot, prepare_data
from components.evaluate import compare, evaluate, merge_rows, train_evaluate
from components.retrain import champion
from components.tracking import finish_tracking, start_tracking
from components.train import identify_relabel_stage, identify_stage, relabel_stage, run_stage

__all__ = [
    "champion", "compare", "evaluate", "finish_tracking", "identify_relabel_stage", "identify_stage",
    "latest_snapshot", "merge_rows", "prepare_data", "relabel_stage", "run_stage", "start_tracking", "train_evaluate",
]
