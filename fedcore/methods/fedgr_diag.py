"""FedGR's per-round diagnosis and premise guard (fedcore's, in both profiles; `fedcore.methods.fedgr`).

"Learning Locally, Revising Globally: Global Reviser for Federated Learning with Noisy
Labels." ICML 2026, arXiv:2412.00452. Nothing here changes training: a client counts what it
already computed (its flags, given labels, the global model's and the teacher's predictions on
its weak view), the server pools the counts into `refine/*`, `teacher/*` and `premise/*`
scalars, and the teacher's test accuracy is scored by the engine on the cohort's mean revised
teacher (`FedGR.extra_eval_models`). No ground truth enters; the maths is `stats.premise`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from fedcore.stats.premise import premise_checks

__all__ = ["client_counts", "lambda_b_at", "mean_params", "round_scalars"]


def lambda_b_at(rnd: int, alpha: int, lambda_b: float, ramp: int) -> float:
    """lambda_B in round `rnd`: linear from lambda_b / ramp at the first round after the
    warm-up (`alpha`) to lambda_b after `ramp` rounds; ramp 0 gives lambda_b unchanged."""
    if ramp <= 0:
        return lambda_b
    return lambda_b * min(1.0, max(rnd - alpha + 1, 0) / ramp)


def client_counts(labels: torch.Tensor, flagged: torch.Tensor, global_pred: torch.Tensor,
                  teacher: torch.Tensor | None, targets: torch.Tensor, b_weight: torch.Tensor | None,
                  num_classes: int) -> dict[str, Any]:
    """One visit's premise and teacher counts (numpy / ints, summed over the cohort by the server).

    global_pred: w^t's class on the weak view; its disagreement with the given label is the
    label-free noise estimate the premise guard compares the flags with. teacher: the revised
    teacher's logits on the same view, or None without B. The teacher/student agreement is taken
    against w^t, the student at the start of the visit (the trained student is not scored again,
    which would cost a pass over the data); `t_agree_target` against the refined target.
    """
    y, f = labels.long(), flagged.bool()
    est = global_pred != y
    out: dict[str, Any] = {
        "label_table": np.stack([np.bincount(y[~f].cpu().numpy(), minlength=num_classes),
                                 np.bincount(y[f].cpu().numpy(), minlength=num_classes)]),
        "noise_table": np.array([[int((~f & ~est).sum()), int((~f & est).sum())],
                                 [int((f & ~est).sum()), int((f & est).sum())]]),
    }
    if teacher is not None:
        t_pred = teacher.argmax(1)
        same = t_pred == global_pred
        out.update({
            "t_agree_flagged": int((same & f).sum()), "t_agree_kept": int((same & ~f).sum()),
            "t_agree_target": int((t_pred == targets.argmax(1)).sum()),
            "b_active": int((b_weight > 0).sum()) if b_weight is not None else int(len(y)),
        })
    return out


def mean_params(states: Sequence[tuple[dict[str, torch.Tensor], int]]) -> dict[str, torch.Tensor] | None:
    """Sample-weighted mean of parameter dicts [(params, n)], or None for none."""
    if not states:
        return None
    total = float(sum(n for _, n in states))
    return {k: sum(p[k].float() * (n / total) for p, n in states) for k in states[0][0]}


def _kl_share(metrics: dict[str, float], lambda_b: float, lambda_r: float) -> float | None:
    """lambda_B b / (sr + lambda_B b + lambda_R r) of one client's mean loss terms."""
    if "fedgr/loss_b" not in metrics:
        return None
    parts = {"sr": 1.0, "b": lambda_b, "r": lambda_r}
    total = sum(w * metrics.get(f"fedgr/loss_{k}", 0.0) for k, w in parts.items())
    return lambda_b * metrics["fedgr/loss_b"] / total if total > 0 else float("nan")


def round_scalars(updates, means: dict[int, tuple[float, float]], lambda_b: float, lambda_r: float,
                  bic: tuple[float, float] | None) -> dict[str, float]:
    """Pooled refining shares of the round's cohort (from the clients' counts), the GMM means,
    the teacher diagnosis and the premise checks."""
    out: dict[str, float] = {}
    if means:
        out["fedgr/gmm_mu_clean"] = float(np.mean([m[0] for m in means.values()]))
        out["fedgr/gmm_mu_noisy"] = float(np.mean([m[1] for m in means.values()]))
    counts = [u.uploads["counts"] for u in updates if "counts" in u.uploads]
    if not counts:
        return {**out, **premise_checks(bic, None, None, None, None)}
    n = sum(c["n"] for c in counts)
    flagged = sum(c["flagged"] for c in counts)
    out.update({
        "refine/tier_high_share": sum(c["n"] * c["high"] for c in counts) / n,
        "refine/tier_high_clients": float(np.mean([c["high"] for c in counts])),
        "refine/cache_coverage": sum(c["cached"] for c in counts) / n,
        "refine/confident_share": sum(c["confident"] for c in counts) / flagged if flagged else float("nan"),
        "refine/skipped_share": sum(c["skipped"] for c in counts) / n,
        "refine/teacher_resets": float(np.mean([c["reset"] for c in counts])),
    })
    label_table = sum(c["label_table"] for c in counts)
    out.update(premise_checks(bic, label_table[1], label_table.sum(0), label_table,
                              sum(c["noise_table"] for c in counts)))
    if "t_agree_kept" in counts[0]:
        kept = n - flagged
        out.update({
            "teacher/agree_flagged": sum(c["t_agree_flagged"] for c in counts) / flagged if flagged else float("nan"),
            "teacher/agree_kept": sum(c["t_agree_kept"] for c in counts) / kept if kept else float("nan"),
            "teacher/agree_target": sum(c["t_agree_target"] for c in counts) / n,
            "teacher/distilled_share": sum(c["b_active"] for c in counts) / n,
            "teacher/lambda_b": lambda_b,
        })
        shares = [s for u in updates if (s := _kl_share(u.metrics, lambda_b, lambda_r)) is not None]
        if shares:
            out["teacher/kl_share"] = float(np.nanmean(shares))
    return out
