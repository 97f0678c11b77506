"""FedGR label refining: confidence-masked pseudo-labels and the three-tier targets.

Shapes: logits (n, C); integer labels (n,); clean posteriors q (n,); targets (n, C)
probability rows; keep (n,) bool = the sample takes part in the self-training loss.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from fedcore.train import losses


def pseudo_labels(logits: torch.Tensor, tau_conf: float, soft: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """FixMatch-style pseudo-labels -> (y_pse, confident (n,) = max prob >= tau_conf).

    y_pse is the argmax (n,) or, with `soft`, the whole softmax (n, C) (a variant).
    """
    probs = F.softmax(logits.detach(), dim=-1)
    conf, pred = probs.max(dim=-1)
    return (probs if soft else pred), conf >= tau_conf


def refine_targets(
    y_hat: torch.Tensor,
    q: torch.Tensor,
    rate: float,
    y_pse: torch.Tensor,
    confident: torch.Tensor,
    beta: float,
    num_classes: int,
    clean_keep_label: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The three tiers of FedGR's label refining for one client -> (targets (n, C), keep (n,)).

    rate < beta and q >= 0.5: keep the given label y_hat.
    rate < beta and q <  0.5: q * onehot(y_hat) + (1 - q) * onehot(y_pse).
    rate >= beta:             onehot(y_pse).
    y_pse: integer pseudo-labels (n,) or probability rows (n, C), used in place of onehot(y_pse).
    A sample whose target uses an unconfident pseudo-label is dropped (keep False).
    clean_keep_label: in the rate >= beta tier too, q >= 0.5 samples keep y_hat (a variant).
    """
    hat = F.one_hot(y_hat, num_classes).float()
    pse = y_pse.to(hat.dtype) if y_pse.ndim == 2 else F.one_hot(y_pse, num_classes).to(hat.dtype)
    clean = q >= 0.5
    if rate >= beta:
        if clean_keep_label:
            return torch.where(clean[:, None], hat, pse), clean | confident
        return pse, confident.clone()
    q = q.to(hat.dtype)
    soft = q[:, None] * hat + (1.0 - q)[:, None] * pse
    return torch.where(clean[:, None], hat, soft), clean | confident


def select_targets(y_hat: torch.Tensor, q: torch.Tensor, num_classes: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Sieving without refining (the "w/o LR" ablation): given labels of the q >= 0.5 samples only."""
    return F.one_hot(y_hat, num_classes).float(), q >= 0.5


def masked_soft_ce(logits: torch.Tensor, targets: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
    """Soft cross-entropy summed over kept samples and divided by the whole batch size.

    Dividing by B rather than by the kept count (as FixMatch does) lets a batch with few
    trusted targets pull less, instead of letting a handful of samples dominate a step.
    """
    per = losses.soft_ce(logits, targets, reduction="none")
    return (per * keep.to(per.dtype)).sum() / max(len(per), 1)
