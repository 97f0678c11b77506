"""`fedcore compare --experiment NAME`: the comparison table from an MLflow experiment (and a PNG with --out).

Reads finished child runs (one per method, seed, setting) with `mlflow.search_runs` and
groups runs whose logged configs agree on all but the seed into mean ± std over seeds,
labelled by (method, setting), like the sweep's `compare`.
"""

from __future__ import annotations

import math
import os
import re
from pathlib import Path
from typing import Any

from rich.console import Console

from fedcore.errors import TrackingError, UserError
from fedcore.reporting.compare import budget_notes, group_records, merge_notes
from fedcore.reporting.plots import compare_figure, save
from fedcore.reporting.terminal import console_table
from fedcore.stats.summary import mean_std
from fedcore.tracking.mlflow import CONNECT_ENV, _connect_message, quiet_store_setup, resolve_uri
from fedcore.tracking.transport import temp_env

PLOT_METRIC = "final/acc_last10"
MULTI_PLOT_METRIC = "final/mAP_last10"
# The params that are the flattened config (the rest is provenance: config_hash, git_commit, ...).
CONFIG_SECTIONS = ("data.", "partition.", "noise.", "model.", "train.", "method.")


def plot_metric(records: list[dict[str, Any]]) -> str:
    """The bar chart's metric: mAP when every run is multi-label (a `task` tag, or only mAP logged)."""
    def multi(r: dict[str, Any]) -> bool:
        task = r.get("task")
        if task is not None:
            return task == "multi"
        return MULTI_PLOT_METRIC in r["summary"] and PLOT_METRIC not in r["summary"]

    return MULTI_PLOT_METRIC if records and all(multi(r) for r in records) else PLOT_METRIC


def _slug(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "-", name).strip("-") or "experiment"


def local_store(uri: str) -> Path | None:
    """Where a local MLflow store lives: the sqlite file of `sqlite:///PATH`, the folder of a file
    store (`file:///PATH` or a plain path); None for a server or an in-memory database."""
    if uri.startswith("sqlite:///"):
        return Path(uri[len("sqlite:///"):])
    if "://" in uri and not uri.startswith("file://"):
        return None  # http(s)://, databricks://, postgresql://, sqlite:// (in memory)
    return Path(uri.removeprefix("file://"))


def require_store(experiment: str, uri: str) -> None:
    """Refuse a local store that does not exist: opening it would create it (an empty sqlite
    database of ~1 MB with its tables, issue 71.3), and a command that only reads writes nothing."""
    where = local_store(uri)
    if where is not None and not where.exists():
        raise UserError(f"no MLflow experiment '{experiment}': no MLflow store at {where} (nothing was tracked "
                        "there); point MLFLOW_TRACKING_URI at the store, or run from the folder that holds mlruns/")


def load_records(experiment: str, uri: str | None = None) -> list[dict[str, Any]]:
    """One record per finished child run: method, setting, seed, run id and its final metrics."""
    import mlflow  # lazy: MLflow takes seconds; for an MLflow read only

    tracking_uri, _ = resolve_uri(uri, Path.cwd())
    require_store(experiment, tracking_uri)
    with temp_env(CONNECT_ENV), quiet_store_setup():
        try:
            client = mlflow.MlflowClient(tracking_uri=tracking_uri)
            exp = client.get_experiment_by_name(experiment)
        except Exception as exc:  # unreachable server or unusable store
            raise TrackingError(_connect_message(tracking_uri, exc)) from None
        if exp is None:
            raise UserError(f"no MLflow experiment '{experiment}' at {tracking_uri}; "
                            "check the name (tracking.experiment) or MLFLOW_TRACKING_URI")
        from mlflow.tracking._tracking_service.utils import (
            _use_tracking_uri,  # lazy: MLflow takes seconds; for an MLflow read only
        )

        # Scoped: a process-wide set_tracking_uri would redirect later fluent calls (pyfunc.load_model).
        # Leaving the scope sets the URI back to None, which drops MLFLOW_TRACKING_URI from os.environ:
        # `fedcore report --experiment` then opened (and created) ./mlruns to download the artifacts.
        with temp_env({k: v for k, v in os.environ.items() if k == "MLFLOW_TRACKING_URI"}), \
                _use_tracking_uri(tracking_uri):
            df = mlflow.search_runs(experiment_ids=[exp.experiment_id],
                                    filter_string="attributes.status = 'FINISHED'")
    return [r for r in (_record(row) for _, row in df.iterrows()) if r is not None]


def _record(row: Any) -> dict[str, Any] | None:
    def get(col: str) -> Any:
        value = row.get(col)
        return None if value is None or (isinstance(value, float) and math.isnan(value)) else value

    if get("tags.fedcore.role") == "parent" or get("tags.method") is None:
        return None  # parents and runs fedcore did not make carry no per-method results
    metrics = {c[len("metrics."):]: float(v) for c, v in row.items()
               if c.startswith("metrics.") and get(c) is not None and not c.startswith("metrics.system/")}
    # A metric's value in MLflow is its last point: what a run dir's summary calls `last/<name>`.
    summary = {**metrics, **{f"last/{k}": v for k, v in metrics.items() if not k.startswith("final/")}}
    params = {c[len("params."):]: str(v) for c, v in row.items() if c.startswith("params.") and get(c) is not None}
    config = {k: v for k, v in params.items() if k == "seed" or k.startswith(CONFIG_SECTIONS)}
    setting = get("tags.setting") or get("tags.noise_type") or "default"
    method = get("tags.row") or get("tags.method")  # a sweep's variant row (fedgr-robust) apart from its method
    return {"method": method, "setting": setting, "seed": get("params.seed"), "task": get("tags.task"),
            "run_id": row["run_id"], "group": f"{method} · {setting}", "summary": summary,
            "config": config or None}


def compare_experiment(experiment: str, console: Console, uri: str | None = None,
                       out_dir: str | Path | None = None) -> Path | None:
    """Print the table of `experiment` and, given `out_dir`, write its bar chart there; returns the PNG
    path. Without `out_dir` nothing is written: comparing only reads (issue 71, read-only commands)."""
    records = load_records(experiment, uri)
    if not records:
        raise UserError(f"MLflow experiment '{experiment}' has no finished fedcore runs yet")
    console.print(console_table(records, by="group", title=f"MLflow experiment '{experiment}'"))
    for note in [*merge_notes(records, by="group"), *budget_notes(records, by="group")]:
        console.print(f"note: {note}", soft_wrap=True, markup=False, highlight=False)
    if out_dir is None:
        console.print("bar chart: pass --out FOLDER to draw it", markup=False, highlight=False, soft_wrap=True)
        return None
    groups = group_records(records, by="group")
    metric = plot_metric(records)
    stats = {g: mean_std([r["summary"].get(metric) for r in recs]) for g, recs in groups.items()}
    png = save(compare_figure(list(stats), [m for m, _ in stats.values()], [s for _, s in stats.values()],
                              metric), Path(out_dir) / f"compare-{_slug(experiment)}.png")
    console.print(f"bar chart: {png.resolve()}", markup=False, highlight=False, soft_wrap=True)
    return png
