"""Scheduled retraining: the latest data snapshot, and champion/challenger promotion.

The candidate and the current champion are scored by the same code on the same test
split (the one of the freshly prepared snapshot), so a promotion never rests on numbers
measured on different data. `decide` is the pure rule; `champion_decision` wires it to
the MLflow registry: register the candidate, move alias `champion` only when it wins,
tag the version with the decision either way.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch

from fedcore.config import ExperimentConfig
from fedcore.data.federated import FederatedDataset
from fedcore.errors import ConfigError, DataError, UserError
from fedcore.io import latest_under, write_bytes
from fedcore.metrics.scoring import Evaluator
from fedcore.models import build_model, resolve_device
from fedcore.pipeline.plan import require_served_model
from fedcore.registries import config_from_dict
from fedcore.run import make_context
from fedcore.tracking.registry import ModelRegistry

METRIC = "test/acc"  # single-label runs; multi-label runs are scored on MULTI_METRIC
MULTI_METRIC = "test/mAP"


def score_metric(task: str) -> str:
    """The test metric a champion and a candidate are compared on: mAP for multi-label data."""
    return MULTI_METRIC if task == "multi" else METRIC


def latest_snapshot(prefix: str) -> str:
    """The newest snapshot (greatest name) under a local folder or s3:// prefix; '' for no prefix."""
    if not prefix:
        return ""  # train on the config's own data.root
    latest = latest_under(prefix)
    if latest is None:
        raise DataError(f"no data snapshot under '{prefix}'; upload one (e.g. s3://bucket/data/2024-06-01/) first")
    return latest


def decide(candidate: float, champion: float | None, metric: str = METRIC, min_delta: float = 0.0,
           note: str = "") -> dict[str, Any]:
    """Promote when there is no champion, or the candidate beats it by more than `min_delta` (higher is better).

    A tie keeps the champion: replacing a model needs evidence, not a coin flip.
    """
    if champion is None:
        promote, why = True, "no comparable champion" + (f" ({note})" if note else "")
    elif candidate > champion + min_delta:
        promote, why = True, f"candidate {candidate:.4f} > champion {champion:.4f} on {metric}"
    else:
        promote, why = False, f"candidate {candidate:.4f} <= champion {champion:.4f} on {metric}"
    return {"promote": promote, "metric": metric, "candidate": candidate, "champion": champion,
            "min_delta": min_delta, "reason": why}


def score_state_dict(cfg: ExperimentConfig, fed: Any, state_dict: dict[str, torch.Tensor]) -> dict[str, float]:
    """Test metrics of a `cfg.model` with these weights on `fed`'s test split."""
    device = resolve_device(cfg.train.device)
    ctx = make_context(cfg, fed, device)
    model = build_model(cfg.model, ctx.store.in_shape, fed.num_classes, seed=cfg.seed)
    model.load_state_dict(state_dict)
    return Evaluator(fed, device, ctx.store, memorization=False)(model.to(device), 0)


def champion_score(registry: Any, name: str, cfg: ExperimentConfig, fed: Any) -> tuple[Any, float | None, str]:
    """(champion version or None, its score on this evaluation or None, why it has none)."""
    champ = registry.champion(name)
    if champ is None:
        return None, None, "first version"
    try:
        champ_cfg = config_from_dict(registry.run_config(champ.run_id))
        score = score_state_dict(champ_cfg.model_copy(update={"train": cfg.train}), fed,
                                 registry.state_dict(champ.run_id))
    except (RuntimeError, ValueError, UserError) as exc:
        # A champion of another architecture or task cannot be scored here; say so in the record.
        return champ, None, f"champion v{champ.version} not comparable: {' '.join(str(exc).split())[:200]}"
    return champ, score[score_metric(fed.task)], ""


def champion_decision(cfg: ExperimentConfig, model_name: str, run_id: str, data_dir: str | Path,
                      run_dir: str | Path, out_dir: str | Path, min_delta: float = 0.0) -> dict[str, Any]:
    """Score candidate and champion alike, register the candidate, promote it only if it wins."""
    if cfg.tracking.backend == "none" or not run_id:
        raise ConfigError("retrain registers models in MLflow; set tracking.backend: mlflow")
    require_served_model(cfg)  # a run-time override can still turn it off after compiling
    fed = FederatedDataset.load(data_dir)
    registry = ModelRegistry(cfg.tracking.uri, Path.cwd())
    candidate_sd = torch.load(Path(run_dir) / "model.pt", map_location="cpu", weights_only=True)
    metric = score_metric(fed.task)
    candidate = score_state_dict(cfg, fed, candidate_sd)[metric]
    champ, champ_score, note = champion_score(registry, model_name, cfg, fed)
    decision = decide(candidate, champ_score, metric, min_delta, note)
    version = registry.register(model_name, run_id, tags={"config_hash": cfg.config_hash()})
    decision.update(model=model_name, version=version.version, run_id=run_id, data_sha256=fed.sha256,
                    previous_champion=champ.version if champ else None)
    if decision["promote"]:
        registry.promote(version)
    registry.tag(version, {"retrain.decision": "promoted" if decision["promote"] else "kept",
                           "retrain.reason": decision["reason"], f"retrain.{metric}": f"{candidate:.6f}"})
    registry.log_decision(run_id, decision)
    write_bytes(Path(out_dir) / "decision.json", json.dumps(decision, indent=2).encode())
    return decision
