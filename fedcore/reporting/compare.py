"""Compare finished runs: a table of final metrics, grouped into mean ± std over seeds
(`stats.summary.mean_std`: the sample std).

Runs are averaged together only when their configs agree on everything but the seed
(`group_key`); a label (the method, or method · setting) alone never merges them. When
runs share a label but not a config, each group's label gets the keys that tell them
apart, e.g. `fedavg [train.rounds=10]` and `fedavg [train.rounds=30]`.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from fedcore.errors import ArtifactError
from fedcore.stats.summary import mean_std
from fedcore.tracking.base import flatten_dict

COLUMNS = [
    ("final/acc_last10", "acc last10"), ("final/acc", "acc final"), ("final/acc_best", "acc best"),
    ("final/acc_best_round", "best round"), ("final/acc_at_val_best", "acc @val-best"),
    ("last/train/memorization", "memorized"), ("last/noise/rate_pearson", "rate r"),
    ("last/detect/client_f1", "client F1"), ("last/detect/sample_f1", "sample F1"),
    ("last/detect/sample_label_nmi", "flags~label NMI"),
    ("last/relabel/precision", "relabel P"),
    ("final/mAP_last10", "mAP last10"), ("final/mAP_best", "mAP best"), ("final/mAP_best_round", "best round"),
    ("final/mAP_at_val_best", "mAP @val-best"),
    ("last/test/CF1", "CF1"), ("last/test/OF1", "OF1"),
    ("last/test/corr_dist", "corr dist"),
]
# Keys that differ between the seeds of one group by construction.
SEED_KEYS = ("seed",)
SHOWN_KEYS = 3  # differing keys named in a label; the rest are counted


def flat_config(data: dict[str, Any]) -> dict[str, str]:
    """A config dict flattened the way runs log it as MLflow params."""
    return flatten_dict(data)


def seed_tied(key: str, config: dict[str, str]) -> bool:
    """The seed itself, or another `*.seed` set to the run's seed: a scene generator whose benchmark
    is drawn anew with each seed (data.params.seed=<seed> in the FedHarmony scripts) varies with
    the seed by construction, so those runs are seeds of one setting. A `*.seed` held fixed
    while the seed varies is a setting of its own and still splits the groups."""
    return key in SEED_KEYS or (key.endswith(".seed") and config.get(key) == config.get("seed"))


def group_key(config: dict[str, str]) -> str:
    """Digest of a flattened config without its seed: equal for the seeds of one setting."""
    items = sorted((k, v) for k, v in config.items() if not seed_tied(k, config))
    return hashlib.sha256(json.dumps(items).encode()).hexdigest()[:16]


def load_run(path: Path) -> dict[str, Any]:
    f = Path(path) / "metrics.json"
    if not f.is_file():
        raise ArtifactError(f"'{path}' has no metrics.json; pass run dirs written by `fedcore run` "
                            "or `fedcore pipeline run --local`")
    try:
        rec = json.loads(f.read_text())
        summary = rec["summary"]
        # Valid JSON of the wrong shape (a list, a null summary, text values) is corrupt too.
        if not isinstance(summary, dict) or not all(isinstance(v, int | float | None) for v in summary.values()):
            raise TypeError
    except (json.JSONDecodeError, KeyError, TypeError):
        raise ArtifactError(f"'{f}' is corrupt; re-run the experiment") from None
    rec["path"] = str(path)
    cfg_file = Path(path) / "config.yaml"
    if cfg_file.is_file():
        try:
            rec["config"] = flat_config(yaml.safe_load(cfg_file.read_text()) or {})
        except yaml.YAMLError:
            raise ArtifactError(f"'{cfg_file}' is corrupt; re-run the experiment") from None
    return rec


def differing_keys(configs: list[dict[str, str]]) -> list[str]:
    """Config keys (seed aside) whose values are not the same in every config."""
    keys = sorted(set().union(*configs)) if configs else []
    diff = [k for k in keys if not all(seed_tied(k, c) for c in configs) and len({c.get(k) for c in configs}) > 1]
    # An empty section flattens to one key ("method.params" = "{}") that a filled one lacks; the keys
    # below it already say how the configs differ, so the parent would only repeat it.
    return [k for k in diff if not any(o.startswith(k + ".") for o in diff)]


def _key(r: dict[str, Any]) -> str | None:
    return group_key(r["config"]) if r.get("config") else None


def group_records(records: list[dict[str, Any]], by: str = "method") -> dict[str, list[dict[str, Any]]]:
    """label -> records of one config (seeds aside); labels shared by several configs get
    the differing keys appended. Records without a config group by label alone."""
    groups: dict[tuple[str, str | None], list[dict[str, Any]]] = defaultdict(list)
    for r in records:
        groups[(str(r.get(by, r.get("path"))), _key(r))].append(r)
    by_label: dict[str, list[tuple[str, str | None]]] = defaultdict(list)
    for label, key in groups:
        by_label[label].append((label, key))
    out = {}
    for label, keys in by_label.items():
        if len(keys) == 1:
            out[label] = groups[keys[0]]
            continue
        configs = [groups[k][0].get("config") or {} for k in keys]
        diff = differing_keys(configs)
        for k, cfg in zip(keys, configs, strict=True):
            shown = [f"{d}={_short(cfg.get(d, '-'))}" for d in diff[:SHOWN_KEYS]]
            more = f", +{len(diff) - SHOWN_KEYS}" if len(diff) > SHOWN_KEYS else ""
            out[f"{label} [{', '.join(shown)}{more}]"] = groups[k]
    return out


def _short(value: Any) -> str:
    """A config value for a label: floats to 3 significant digits (a tuned lr of 0.11281115548016656
    reads 0.113), anything else as it is."""
    try:
        f = float(value)
    except (TypeError, ValueError):
        return str(value)
    return str(value) if isinstance(value, bool) or f.is_integer() else f"{f:.3g}"


def merge_notes(records: list[dict[str, Any]], by: str = "method") -> list[str]:
    """One line per label that holds several configs: which keys keep them apart."""
    labels: dict[str, list[dict[str, str]]] = defaultdict(list)
    seen: set[tuple[str, str | None]] = set()
    for r in records:
        label, key = str(r.get(by, r.get("path"))), _key(r)
        if (label, key) not in seen:
            seen.add((label, key))
            labels[label].append(r.get("config") or {})
    notes = []
    for label, configs in labels.items():
        if len(configs) > 1:
            diff = differing_keys(configs)
            values = "; ".join(f"{d}: {' | '.join(sorted({str(c.get(d, '-')) for c in configs}))}" for d in diff)
            notes.append(f"'{label}' holds {len(configs)} configs, kept apart; they differ in {values}")
    return notes


def training_rounds(r: dict[str, Any]) -> int | str:
    """The rounds a run was given to train: `train.stage_rounds.train` when set, else `train.rounds`.
    Rounds of the stages some methods add on top (FedSIR's identification round, FedRG's pretraining)
    are not counted, so every method is counted the same way; a run without a config counts the
    rounds it ran (metrics.json, else its history); "?" when nothing says."""
    cfg = r.get("config") or {}
    rounds = cfg.get("train.stage_rounds.train") or cfg.get("train.rounds") or r.get("rounds") \
        or (len(r["history"]) if r.get("history") else None) or "?"
    try:
        return int(float(rounds))
    except ValueError:
        return str(rounds)


def extra_rounds(r: dict[str, Any]) -> int:
    """Rounds a run ran beyond its training rounds: the stages its method adds (0 when none)."""
    train, ran = training_rounds(r), r.get("rounds")
    return max(0, int(ran) - train) if isinstance(train, int) and isinstance(ran, int | float) else 0


def budget_of(r: dict[str, Any]) -> str:
    """A run's training budget, "R rounds x E epochs": its training rounds (`training_rounds`) and its
    local epochs (or fixed local steps)."""
    cfg = r.get("config") or {}
    steps = cfg.get("train.local_steps")
    epochs = f"{cfg.get('train.local_epochs', '?')} epochs"
    local = f"{steps} steps" if steps not in (None, "None", "null", "") else epochs
    return f"{training_rounds(r)} rounds x {local}"


def budget_notes(records: list[dict[str, Any]], by: str = "method") -> list[str]:
    """A warning when the rows of one table trained on different budgets (training rounds or local
    epochs): a method given twice the rounds is not compared with the others. It names only the rows
    off the most common budget, so the odd ones out stand out."""
    budgets = {label: sorted({budget_of(r) for r in recs}) for label, recs in group_records(records, by).items()}
    if len({b for bs in budgets.values() for b in bs}) < 2:
        return []
    usual = Counter(tuple(bs) for bs in budgets.values()).most_common(1)[0][0]
    listed = "; ".join(f"{label}: {' | '.join(bs)}" for label, bs in budgets.items() if tuple(bs) != usual)
    listed += f"; the other rows: {' | '.join(usual)}"
    return [f"warning: the rows differ in training budget, so they are not an equal comparison ({listed})"]


def fedavg_margin(group: list[dict[str, Any]], records: list[dict[str, Any]]) -> float | None:
    """The group's mean last-10 minus the mean best round of FedAvg on the same setting; None for
    FedAvg itself or when no FedAvg run of that setting is in the records."""
    settings = {r.get("setting") for r in group}
    if len(settings) != 1 or any(r.get("method") in (None, "fedavg") for r in group):
        return None
    setting = settings.pop()
    ref = [r for r in records if r.get("method") == "fedavg" and r.get("setting") == setting]
    short = "acc" if any("final/acc_last10" in r["summary"] for r in group) else "mAP"
    mine, _ = mean_std([r["summary"].get(f"final/{short}_last10") for r in group])
    best, _ = mean_std([r["summary"].get(f"final/{short}_best") for r in ref])
    if not ref or np.isnan(mine) or np.isnan(best):
        return None
    return mine - best
