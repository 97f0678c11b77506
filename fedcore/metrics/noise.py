"""Noise-estimation, identification, detection, relabeling and memorization metrics.

These are the only functions (with scoring.py) that read ground truth.
"""

from __future__ import annotations

import numpy as np


def rate_pearson_mae(estimated: np.ndarray, true: np.ndarray) -> dict[str, float]:
    """Pearson correlation and mean absolute error between estimated and true client rates."""
    est, tru = np.asarray(estimated, float), np.asarray(true, float)
    ok = np.isfinite(est) & np.isfinite(tru)
    est, tru = est[ok], tru[ok]
    mae = float(np.mean(np.abs(est - tru))) if len(est) else float("nan")
    if len(est) < 2 or np.std(est) == 0 or np.std(tru) == 0:
        return {"pearson": float("nan"), "mae": mae}
    return {"pearson": float(np.corrcoef(est, tru)[0, 1]), "mae": mae}


def binary_prf(pred_pos: np.ndarray, true_pos: np.ndarray) -> dict[str, float]:
    """Precision/recall/F1/accuracy with 'positive' = noisy. Empty denominators give 0."""
    p, t = np.asarray(pred_pos, bool), np.asarray(true_pos, bool)
    tp = float(np.sum(p & t))
    prec = tp / p.sum() if p.sum() else 0.0
    rec = tp / t.sum() if t.sum() else 0.0
    f1 = 2 * prec * rec / (prec + rec) if prec + rec else 0.0
    acc = float(np.mean(p == t)) if len(p) else float("nan")
    return {"precision": float(prec), "recall": float(rec), "f1": float(f1), "acc": acc}


def noise_majority(labels: np.ndarray, is_noisy: np.ndarray) -> np.ndarray:
    """Per sample of one client (n,): True where its given label's group on the client holds more
    noisy than clean samples (a tie counts as clean-majority). labels: (n,) given labels."""
    labels, noisy = np.asarray(labels), np.asarray(is_noisy, bool)
    groups, inv = np.unique(labels, return_inverse=True)
    n_noisy = np.bincount(inv, weights=noisy, minlength=len(groups))
    return (n_noisy > np.bincount(inv, minlength=len(groups)) - n_noisy)[inv]


def split_prf(pred_pos: np.ndarray, true_pos: np.ndarray, majority: np.ndarray) -> dict[str, float]:
    """`binary_prf` within the noise-majority samples (keys *_majority) and within the rest (*_minority)."""
    p, t, m = (np.asarray(v, bool) for v in (pred_pos, true_pos, majority))
    out: dict[str, float] = {}
    for name, sel in (("majority", m), ("minority", ~m)):
        prf = binary_prf(p[sel], t[sel])
        out.update({f"{k}_{name}": prf[k] for k in ("precision", "recall", "f1")})
    return out


def flag_dependence(flags: np.ndarray, labels: np.ndarray) -> float:
    """Normalized mutual information between a detector's noisy flags and per-sample labels.

    With the given labels this says whether a detector sorts by class instead of by noise
    (1: the flags are a function of the label; 0: independent); with the true noise flags
    it is a threshold-free view of detection quality. Empty input gives NaN.
    """
    f, y = np.asarray(flags, bool), np.asarray(labels)
    if not len(f):
        return float("nan")
    from sklearn.metrics import normalized_mutual_info_score  # lazy: scikit-learn adds ~2 s to start-up

    return float(normalized_mutual_info_score(y, f))


def relabel_metrics(y_before: np.ndarray, y_after: np.ndarray, y_true: np.ndarray) -> dict[str, float]:
    """Relabel precision/recall/damage/label_acc/changed (spec definitions).

    y_before: labels before relabeling (the noisy labels); y_after: working labels now.
    """
    b, a, t = (np.asarray(v) for v in (y_before, y_after, y_true))
    changed = a != b
    noisy, clean = b != t, b == t
    return {
        "precision": float(np.mean(a[changed] == t[changed])) if changed.any() else 0.0,
        "recall": float(np.mean(a[noisy] == t[noisy])) if noisy.any() else 0.0,
        "damage": float(np.mean(changed[clean])) if clean.any() else 0.0,
        "label_acc": float(np.mean(a == t)) if len(a) else float("nan"),
        "changed": float(np.mean(changed)) if len(a) else 0.0,
    }


def memorization_rate(pred: np.ndarray, y_noisy: np.ndarray, is_noisy: np.ndarray) -> float:
    """Fraction of noisy training samples where the model predicts the noisy label."""
    m = np.asarray(is_noisy, bool)
    return float(np.mean(np.asarray(pred)[m] == np.asarray(y_noisy)[m])) if m.any() else float("nan")
