"""Multi-label metrics (spec: fedharmony.md, following FedLGT's evaluation).

All values are fractions in [0, 1] (like test/acc); the literature prints them x100.

- mAP: macro mean of per-label average precision over labels with positives in y.
- O-mAP: micro AP over all (sample, label) entries.
- CP, CR: per-label precision / recall at threshold 0.5 averaged over the labels with
  positives in y (a label without predictions has precision 0); CF1 = 2 CP CR / (CP + CR).
- OP, OR, OF1: the same from counts pooled over all labels.
- corr_dist: Frobenius distance between the phi correlation of the model's test scores
  and the true correlation, over off-diagonal entries (the diagonal of the truth is 1 by
  definition and of soft scores measures confidence, not co-occurrence).
- corr_dist_hard: the same for the thresholded predictions (score >= 0.5). The soft phi
  divides by p (1 - p) of the mean score, so it shrinks toward 0 as scores grow uncertain
  and mixes confidence into the distance (spec v2 notes); this one scores what the model predicts.

AP follows scikit-learn's `average_precision_score`: sum_n (R_n - R_{n-1}) P_n over the
distinct score thresholds, ties forming one threshold.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from fedcore.stats.correlation import phi_correlation


def average_precision(y: np.ndarray, s: np.ndarray) -> float:
    """AP of scores s (N,) for binary targets y (N,); NaN when y has no positive."""
    y = np.asarray(y).astype(bool)
    s = np.asarray(s, dtype=np.float64)
    n_pos = int(y.sum())
    if n_pos == 0:
        return float("nan")
    order = np.argsort(-s, kind="mergesort")
    s_sorted, y_sorted = s[order], y[order]
    ends = np.r_[np.flatnonzero(np.diff(s_sorted)), len(s) - 1]  # last position of each distinct score
    tps = np.cumsum(y_sorted)[ends]
    precision = tps / (ends + 1)
    recall = tps / n_pos
    return float(np.sum(np.diff(np.r_[0.0, recall]) * precision))


def label_aps(y: np.ndarray, s: np.ndarray) -> np.ndarray:
    """Per-label AP (C,) for targets y (N, C) and scores s (N, C); NaN for labels without positives."""
    return np.array([average_precision(y[:, c], s[:, c]) for c in range(y.shape[1])])


def mean_ap(y: np.ndarray, s: np.ndarray) -> float:
    aps = label_aps(y, s)
    return float(np.nanmean(aps)) if np.isfinite(aps).any() else float("nan")


def overall_ap(y: np.ndarray, s: np.ndarray) -> float:
    return average_precision(np.asarray(y).ravel(), np.asarray(s).ravel())


def threshold_prf(y: np.ndarray, pred: np.ndarray) -> dict[str, float]:
    """CP/CR/CF1 and OP/OR/OF1 for 0/1 targets y and predictions pred, both (N, C)."""
    y, pred = np.asarray(y).astype(bool), np.asarray(pred).astype(bool)
    tp = (y & pred).sum(axis=0).astype(np.float64)
    n_pred, n_true = pred.sum(axis=0).astype(np.float64), y.sum(axis=0).astype(np.float64)
    has = n_true > 0
    prec = np.divide(tp, n_pred, out=np.zeros_like(tp), where=n_pred > 0)
    rec = np.divide(tp, n_true, out=np.zeros_like(tp), where=n_true > 0)
    cp = float(prec[has].mean()) if has.any() else float("nan")
    cr = float(rec[has].mean()) if has.any() else float("nan")
    op = float(tp.sum() / n_pred.sum()) if n_pred.sum() > 0 else 0.0
    orec = float(tp.sum() / n_true.sum()) if n_true.sum() > 0 else float("nan")
    return {"CP": cp, "CR": cr, "CF1": _f1(cp, cr), "OP": op, "OR": orec, "OF1": _f1(op, orec)}


def _f1(p: float, r: float) -> float:
    return 2 * p * r / (p + r) if p + r > 0 else 0.0


def corr_distance(probs: np.ndarray | torch.Tensor, true_corr: np.ndarray) -> float:
    """Off-diagonal Frobenius distance between phi(probs (N, C)) and true_corr (C, C)."""
    r = phi_correlation(torch.as_tensor(probs).double()).numpy()
    d = r - np.asarray(true_corr, dtype=np.float64)
    np.fill_diagonal(d, 0.0)
    return float(np.sqrt(np.sum(d * d)))


def true_correlation(extras: dict[str, Any] | None, y_test: np.ndarray | torch.Tensor) -> np.ndarray:
    """The reference correlation (C, C): the dataset's exact one when it records it
    (extras['true_corr'], e.g. digits_mosaic), else the phi correlation of the test labels."""
    if extras and extras.get("true_corr") is not None:
        return np.asarray(extras["true_corr"], dtype=np.float64)
    return phi_correlation(torch.as_tensor(np.asarray(y_test)).double(), eps=0.0).numpy()


def multilabel_eval(
    logits: torch.Tensor, y: torch.Tensor, true_corr: np.ndarray | None = None
) -> dict[str, float]:
    """Every multi-label test metric for logits (N, C) and 0/1 targets y (N, C)."""
    probs = torch.sigmoid(logits.detach().double().cpu())
    s, yt = probs.numpy(), y.detach().cpu().numpy().astype(np.uint8)
    out = {"test/mAP": mean_ap(yt, s), "test/OmAP": overall_ap(yt, s)}
    out.update({f"test/{k}": v for k, v in threshold_prf(yt, s >= 0.5).items()})
    out["test/loss"] = float(F.binary_cross_entropy_with_logits(logits.detach().float().cpu(),
                                                                y.detach().float().cpu()))
    if true_corr is not None:
        out["test/corr_dist"] = corr_distance(probs, true_corr)
        out["test/corr_dist_hard"] = corr_distance((probs >= 0.5).double(), true_corr)
    return out
