"""The Tracker protocol and pure helpers that turn an ExperimentConfig into run names, tags and params.

Nothing here imports mlflow: the helpers are shared by every backend and by tests.
"""

from __future__ import annotations

import functools
import getpass
import json
import math
import os
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from fedcore import __version__

if TYPE_CHECKING:
    from fedcore.config import ExperimentConfig

# MLflow rejects param values longer than this (mlflow.utils.validation.MAX_PARAM_VAL_LENGTH).
MAX_PARAM_VALUE_LENGTH = 6000
TERMINAL_STATUSES = ("FINISHED", "FAILED", "KILLED")
NOISE_SHORT = {"symmetric": "sym", "pairflip": "pair", "asymmetric": "asym"}
# MLflow 3's UI opens an experiment by its kind; without one it guesses GenAI and shows traces.
EXPERIMENT_KIND_TAG = "mlflow.experimentKind"
TRAINING_KIND = "custom_model_development"


class RunStack:
    """The open runs of a tracker, innermost last; shared by every backend."""

    def __init__(self) -> None:
        self._stack: list[str] = []

    @property
    def run_id(self) -> str | None:
        """Id of the open run on top of the stack, or None."""
        return self._stack[-1] if self._stack else None

    def _active(self) -> str:
        if not self._stack:
            raise RuntimeError("no run is open: call start() first")
        return self._stack[-1]

    def abandon(self) -> str:
        """Close the top run here without telling the store (it is unreachable: the journal
        keeps its end for `fedcore tracking sync`); returns its id."""
        rid = self._active()
        self._stack.pop()
        return rid


@runtime_checkable
class Tracker(Protocol):
    """Where a run's params, per-round metrics and artifacts go.

    Runs form a stack: `start` pushes (a fresh, child or resumed run), `end` pops, and every
    logging call targets the run on top, whose id is `run_id` (None when nothing is open).
    """

    @property
    def run_id(self) -> str | None: ...

    def start(
        self,
        run_name: str,
        tags: dict[str, str],
        parent_run_id: str | None = None,
        run_id: str | None = None,
        nested: bool = False,
    ) -> str:
        """Open a run and return its id; with run_id, resume that run; nested: child of the open run."""
        ...

    def start_parent(self, run_name: str, tags: dict[str, str]) -> str:
        """Open a parent run (one per pipeline run or sweep); later nested starts become its children."""
        ...

    def logged_params(self) -> dict[str, str]:
        """Params already recorded on the open run (non-empty when resuming)."""
        ...

    def log_params(self, params: Mapping[str, Any]) -> None: ...

    def log_metrics(self, metrics: Mapping[str, float], step: int) -> None: ...

    def set_tags(self, tags: Mapping[str, Any]) -> None: ...

    def log_artifact(self, local_path: str | Path, artifact_path: str | None = None) -> None:
        """Upload a file, or a directory's contents, under artifact_path."""
        ...

    def log_dict(self, obj: Any, artifact_file: str) -> None: ...

    def log_figure(self, fig: Any, artifact_file: str) -> None: ...

    def log_table(self, data: dict[str, list[Any]], artifact_file: str) -> None:
        """A table (column name -> values, equal lengths) as a JSON artifact the UI shows as a table."""
        ...

    def log_state_dict(self, state_dict: dict[str, Any], artifact_path: str) -> None: ...

    def log_model(self, model: Any, example: Any, name: str = "model", step: int = 0) -> str | None:
        """Log a torch module as an MLflow model (signature and input example from `example`,
        linked to the metrics at `step`); returns its model id (None when nothing is recorded)."""
        ...

    def log_dataset(self, dataset: DatasetInfo) -> None:
        """Record the run's input dataset (MLflow's Datasets panel)."""
        ...

    def start_system_metrics(self, interval_s: float) -> None:
        """Sample CPU, memory, disk, network (and GPU where present) into the open run until it ends."""
        ...

    def stop_system_metrics(self) -> None: ...

    def end(self, status: str = "FINISHED") -> None: ...


@dataclass(frozen=True)
class DatasetInfo:
    """What a run's Datasets panel shows about its FederatedDataset: no MLflow types, so
    every backend can take it. digest: at most 36 characters (MLflow's limit)."""

    name: str
    digest: str
    source: str
    source_type: str
    schema: dict[str, Any]
    profile: dict[str, Any]
    context: str = "train"


# -- input checks shared by the backends ---------------------------------------------------


def check_str_map(kind: str, items: Mapping[str, Any]) -> dict[str, str]:
    """Validate string keys and stringify values (params and tags are strings in MLflow)."""
    if not isinstance(items, Mapping):
        raise TypeError(f"{kind} must be a mapping, got {type(items).__name__}")
    out = {}
    for k, v in items.items():
        if not isinstance(k, str) or not k:
            raise TypeError(f"{kind} keys must be non-empty strings, got {k!r}")
        out[k] = v if isinstance(v, str) else json.dumps(v, sort_keys=True, default=str)
    return out


def check_metrics(metrics: Mapping[str, Any], step: int) -> dict[str, float]:
    """Validate names and the step; return the values as floats (non-finite ones included)."""
    if isinstance(step, bool) or not isinstance(step, int) or step < 0:
        raise TypeError(f"step must be a non-negative int, got {step!r}")
    if not isinstance(metrics, Mapping):
        raise TypeError(f"metrics must be a mapping, got {type(metrics).__name__}")
    out = {}
    for k, v in metrics.items():
        if not isinstance(k, str) or not k:
            raise TypeError(f"metric names must be non-empty strings, got {k!r}")
        out[k] = float(v)  # numpy and 0-d torch scalars convert; anything else is a bug
    return out


def check_table(data: Mapping[str, Any]) -> None:
    """A table is column name -> list, all of one length (what mlflow's log_table takes as a dict)."""
    if not isinstance(data, Mapping) or not data:
        raise TypeError("a table is a non-empty mapping of column name -> list of values")
    lengths = {k: len(v) for k, v in data.items() if isinstance(v, list)}
    if len(lengths) != len(data) or len(set(lengths.values())) != 1:
        raise ValueError(f"table columns must be lists of one length, got {lengths or 'no lists'}")


def check_status(status: str) -> str:
    if status not in TERMINAL_STATUSES:
        raise ValueError(f"run status must be one of {TERMINAL_STATUSES}, got {status!r}")
    return status


def split_finite(metrics: Mapping[str, float]) -> tuple[dict[str, float], list[str]]:
    """Separate finite values (loggable) from the names of NaN/inf ones."""
    finite = {k: v for k, v in metrics.items() if math.isfinite(v)}
    return finite, [k for k in metrics if k not in finite]


# -- config -> params, tags, names ---------------------------------------------------------


def _param_value(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, sort_keys=True)
    if len(text) > MAX_PARAM_VALUE_LENGTH:
        text = text[: MAX_PARAM_VALUE_LENGTH - 3] + "..."
    return text


def _flatten(prefix: str, node: Any, out: dict[str, str]) -> None:
    if isinstance(node, dict) and node:
        for key, child in node.items():
            _flatten(f"{prefix}.{key}" if prefix else str(key), child, out)
    else:
        out[prefix] = _param_value(node)


def flatten_config(cfg: ExperimentConfig) -> dict[str, str]:
    """Dotted keys -> string values; lists and empty dicts JSON-encoded, long values truncated.

    The tracking section is left out: it never changes results, and tracking.run_id differs
    between the stage that creates a run and the stages that resume it, which MLflow would
    reject as a changed param.
    """
    return flatten_dict(cfg.to_dict())


def flatten_dict(data: dict[str, Any]) -> dict[str, str]:
    """A config dict as MLflow params: dotted keys, string values, the tracking section left out."""
    data = {k: v for k, v in data.items() if k != "tracking"}
    out: dict[str, str] = {}
    _flatten("", data, out)
    return out


def _num(x: float) -> str:
    return str(round(float(x), 4))


def _rate_text(cfg: ExperimentConfig) -> str:
    rate = cfg.noise.rate
    if rate.kind == "uniform":
        return f"U({_num(rate.min)},{_num(rate.max)})"
    if rate.kind == "linspace":
        return f"lin({_num(rate.min)},{_num(rate.max)})"
    if rate.kind == "fedcorr":
        return f"fedcorr({_num(rate.rho)},{_num(rate.tau)})"
    return _num(rate.value)


def noise_label(cfg: ExperimentConfig) -> str:
    """Short noise-scene text, e.g. `sym U(0.5,1.0)`, `pair 0.4 localized`, `real`, `none`."""
    kind = cfg.noise.type
    parts = [NOISE_SHORT.get(kind, kind)]
    if kind not in ("none", "real"):
        parts.append(_rate_text(cfg))
    if cfg.noise.scope == "localized" and kind != "none":
        parts.append("localized")
    return " ".join(parts)


def run_name_for(cfg: ExperimentConfig, row: str | None = None, setting: str | None = None) -> str:
    """Readable default run name, e.g. `fedgr · sym U(0.5,1.0) · seed 0`. In a sweep, `row` (a variant
    such as fedgr-robust) replaces the method and the setting's name follows it, `fedsir · default · sym
    U(0.7,1.0) · seed 0`, so the name starts as the console's `fedsir · default` row does."""
    noise = noise_label(cfg)
    head = [row or cfg.method.name, *([setting] if setting and setting != noise else [])]
    return " · ".join([*head, noise, f"seed {cfg.seed}"])


def standard_tags(cfg: ExperimentConfig) -> dict[str, str]:
    """Tags every run carries so the MLflow UI can filter and group by them."""
    return {
        "method": cfg.method.name,
        "dataset": cfg.data.name,
        "noise_type": cfg.noise.type,
        "noise_scope": cfg.noise.scope,
        "partition": cfg.partition.kind,
        "config_hash": cfg.config_hash(),
    }


@functools.lru_cache(maxsize=1)
def _git_head() -> str | None:
    # Ask about the checkout fedcore itself lives in, not the user's cwd.
    try:
        res = subprocess.run(
            ["git", "rev-parse", "HEAD"],
            cwd=Path(__file__).resolve().parent,
            capture_output=True,
            text=True,
            timeout=5,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    head = res.stdout.strip()
    return head if res.returncode == 0 and head else None


def git_commit() -> str:
    """FEDCORE_GIT_COMMIT (set when building images without .git), else `git rev-parse HEAD`."""
    return os.environ.get("FEDCORE_GIT_COMMIT") or _git_head() or "unknown"


def user() -> str:
    """Who started the run (MLflow's `mlflow.user`, shown as "Created by")."""
    try:
        return getpass.getuser()
    except (KeyError, OSError):  # a container uid without a passwd entry
        return "unknown"


def source_tags(source: str, source_type: str = "LOCAL") -> dict[str, str]:
    """The tags MLflow's UI shows as Source, Created by and Git commit.

    source_type: MLflow's kinds, LOCAL for a command on this machine, JOB for a pipeline task.
    """
    tags = {"mlflow.source.name": source, "mlflow.source.type": source_type, "mlflow.user": user()}
    commit = git_commit()
    if commit != "unknown":
        tags["mlflow.source.git.commit"] = commit
    return tags


def run_params(cfg: ExperimentConfig, data_sha256: str | None) -> dict[str, str]:
    """Flattened config plus provenance: config_hash, data_sha256, fedcore_version, git_commit."""
    params = flatten_config(cfg)
    params.update(
        config_hash=cfg.config_hash(),
        data_sha256=data_sha256 or "unknown",
        fedcore_version=__version__,
        git_commit=git_commit(),
    )
    return params
