"""Single-label classification metrics (spec: baselines-and-metrics.md)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def accuracy(y_true: np.ndarray, y_pred: np.ndarray) -> float:
    y_true, y_pred = np.asarray(y_true), np.asarray(y_pred)
    return float(np.mean(y_true == y_pred)) if len(y_true) else float("nan")


def confusion(y_true: np.ndarray, y_pred: np.ndarray, num_classes: int) -> np.ndarray:
    """(C, C) counts; rows are true classes, columns predictions."""
    m = np.zeros((num_classes, num_classes), dtype=np.int64)
    np.add.at(m, (np.asarray(y_true, dtype=np.int64), np.asarray(y_pred, dtype=np.int64)), 1)
    return m


def macro_prf(y_true: np.ndarray, y_pred: np.ndarray, num_classes: int) -> dict[str, float]:
    """Macro precision/recall/F1 over classes present in y_true or y_pred (zero_division=0)."""
    m = confusion(y_true, y_pred, num_classes)
    tp = np.diag(m).astype(float)
    pred, true = m.sum(axis=0).astype(float), m.sum(axis=1).astype(float)
    seen = (pred + true) > 0
    prec = np.divide(tp, pred, out=np.zeros_like(tp), where=pred > 0)
    rec = np.divide(tp, true, out=np.zeros_like(tp), where=true > 0)
    f1 = np.divide(2 * prec * rec, prec + rec, out=np.zeros_like(tp), where=(prec + rec) > 0)
    return {"precision": float(prec[seen].mean()), "recall": float(rec[seen].mean()), "f1": float(f1[seen].mean())}


def last_k_mean(values: Sequence[float], k: int = 10) -> float:
    vals = [v for v in values if v is not None and np.isfinite(v)]
    return float(np.mean(vals[-k:])) if vals else float("nan")


def summarize_history(history: Sequence[dict], key: str = "test/acc") -> dict[str, float]:
    """final/acc, final/acc_best (with final/acc_best_round) and final/acc_last10 from the history.

    The best round is the `round` of the first evaluation that reached the best value (ties go
    to the earliest); an entry without `round` counts by its 1-based position among the
    evaluations. For multi-label runs key is e.g. 'test/mAP' and names follow it (final/mAP ...).
    """
    evals = [(float(h[key]), float(h.get("round", i + 1))) for i, h in enumerate(h for h in history if key in h)]
    short = key.split("/", 1)[1]
    if not evals:
        return {}
    vals = [v for v, _ in evals]
    finite = [i for i, v in enumerate(vals) if np.isfinite(v)]
    best = max(finite, key=lambda i: (vals[i], -i)) if finite else len(vals) - 1
    return {f"final/{short}": vals[-1], f"final/{short}_best": vals[best],
            f"final/{short}_best_round": evals[best][1], f"final/{short}_last10": last_k_mean(vals, 10)}


def at_val_best(history: Sequence[dict], test_key: str = "test/acc", val_key: str = "val/acc") -> dict[str, float]:
    """Test score at the round validation picks: early stopping as a user without test labels runs it.

    The picked round is the first evaluation with the highest finite `val_key` (ties go to the
    earliest), among the evaluations that also scored `test_key`. Returns, for test_key
    'test/acc' and val_key 'val/acc': final/acc_at_val_best, final/val_acc_best,
    final/val_best_round and final/val_acc_last10 (the mean of the last 10 validation scores,
    the tuning objective of a run judged at its end); {} when no round was validated.
    The val_server/* keys name theirs after the prefix (final/acc_at_val_server_best, ...).
    """
    evals = [(float(h[val_key]), float(h[test_key]), float(h.get("round", i + 1)))
             for i, h in enumerate(h for h in history if val_key in h and test_key in h)]
    finite = [i for i, (v, _, _) in enumerate(evals) if np.isfinite(v)]
    if not finite:
        return {}
    best = max(finite, key=lambda i: (evals[i][0], -i))
    short, vshort = test_key.split("/", 1)[1], val_key.replace("/", "_")
    where = vshort.rsplit("_", 1)[0]  # 'val' or 'val_server'
    return {f"final/{short}_at_{where}_best": evals[best][1], f"final/{vshort}_best": evals[best][0],
            f"final/{where}_best_round": evals[best][2],
            f"final/{vshort}_last10": last_k_mean([v for v, _, _ in evals], 10)}
