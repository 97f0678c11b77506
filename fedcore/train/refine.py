"""FedGR label refining: confidence-masked pseudo-labels, the pseudo-label cache and the two tiers.

Shapes: logits (n, C); integer labels (n,); clean posteriors q (n,); a cache is an integer
label per sample (n,) with -1 where nothing is cached; targets are (n, C) probability rows and
weights (n,) in [0, 1] scale each sample's cross-entropy (0 = the sample sits out this round).
"""

from __future__ import annotations

from typing import Literal

import torch
import torch.nn.functional as F

from fedcore.train import losses

EMPTY = -1
CacheMode = Literal["trusted", "pseudo", "none"]
Missing = Literal["zero", "given", "drop"]


def pseudo_labels(logits: torch.Tensor, tau_conf: float) -> tuple[torch.Tensor, torch.Tensor]:
    """FixMatch-style pseudo-labels -> (argmax (n,), confident (n,) = max softmax >= tau_conf)."""
    conf, pred = F.softmax(logits.detach(), dim=-1).max(dim=-1)
    return pred, conf >= tau_conf


def update_cache(cache: torch.Tensor | None, y_hat: torch.Tensor, flagged: torch.Tensor, y_pse: torch.Tensor,
                 confident: torch.Tensor, mode: CacheMode) -> torch.Tensor:
    """This round's cache (a new tensor; entries are overwritten, never emptied, so coverage only grows).

    trusted (the authors' code): GMM-clean samples cache their given label, flagged samples a
        confident pseudo-label; other entries keep what an earlier visit cached.
    pseudo (spec v2): flagged samples cache a confident pseudo-label; nothing else changes.
    none (spec v1): no memory; the result holds this round's confident pseudo-labels, for every sample.
    """
    if mode == "none":
        return torch.where(confident, y_pse, torch.full_like(y_hat, EMPTY))
    new_pse = flagged & confident
    out = torch.full_like(y_hat, EMPTY) if cache is None else cache.clone()
    out = torch.where(new_pse, y_pse, out)
    return torch.where(~flagged, y_hat, out) if mode == "trusted" else out


def tier_targets(y_hat: torch.Tensor, q: torch.Tensor, rate: float, ref: torch.Tensor, beta: float,
                 num_classes: int, missing: Missing = "zero", soften_clean: bool = True,
                 clean_given: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
    """Targets and weights of one client's samples -> (targets (n, C), weights (n,)).

    ref: the reference label of each sample (the cache, -1 = none); clean means q >= 0.5.
    rate < beta (keep/soften): q * onehot(y_hat) + (1 - q) * onehot(ref), for every sample or,
        without `soften_clean`, for flagged ones only (clean ones keep onehot(y_hat)). Where ref
        is -1 the second term is `missing`: 'zero' drops it (the sample weighs q, as the
        authors' ignored index does), 'given' uses y_hat (weight 1), 'drop' skips the sample.
    rate >= beta (pseudo-label tier): onehot(ref) where ref >= 0, else skipped; with
        `clean_given`, clean samples train on y_hat instead.
    """
    hat = F.one_hot(y_hat, num_classes).to(q.dtype)
    has, clean = ref >= 0, q >= 0.5
    ref1 = F.one_hot(torch.where(has, ref, y_hat), num_classes).to(q.dtype)
    ones, zeros = torch.ones_like(q), torch.zeros_like(q)
    if rate >= beta:
        given = clean & clean_given
        return torch.where(given[:, None], hat, ref1), torch.where(given | has, ones, zeros)
    soft = torch.where(has[:, None], q[:, None] * hat + (1.0 - q)[:, None] * ref1, hat)
    w_missing = {"zero": q, "given": ones, "drop": zeros}[missing]
    weights = torch.where(has, ones, w_missing)
    if not soften_clean:
        soft, weights = torch.where(clean[:, None], hat, soft), torch.where(clean, ones, weights)
    return soft, weights


def batch_soft_targets(y_hat: torch.Tensor, q: torch.Tensor, ref: torch.Tensor, num_classes: int,
                       missing: Missing = "zero", soften_clean: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
    """The keep/soften tier of one batch as the authors' code computes it -> (targets (B, C), weights (B,)).

    Their loss multiplies per-sample CEs (B,) by posteriors shaped (B, 1), which broadcasts to
    (B, B): its mean is mean(q) * mean CE(y_hat) + (1 - mean(q)) * mean CE(ref), i.e. every
    sample weighs the batch's mean posterior instead of its own. `tier_targets` with q set to
    the batch mean gives exactly that (CE is linear in a soft target).
    """
    q_bar = torch.full_like(q, float(q.mean())) if len(q) else q
    return tier_targets(y_hat, q_bar, 0.0, ref, 1.0, num_classes, missing, soften_clean)


def select_targets(y_hat: torch.Tensor, q: torch.Tensor, num_classes: int,
                   weighted: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """Sieving without refining (the "w/o LR" ablation) -> (onehot(y_hat), weights).

    weighted=False (the authors' code, spec v1): only GMM-clean samples (q >= 0.5) count.
    weighted=True (spec v2's text): every sample's CE is weighted by its q.
    """
    hat = F.one_hot(y_hat, num_classes).to(q.dtype)
    return hat, (q if weighted else (q >= 0.5).to(q.dtype))


def weighted_soft_ce(logits: torch.Tensor, targets: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """sum_i w_i * CE(targets_i, logits_i) / B (the whole batch size B).

    Dividing by B rather than by the kept weight (as FixMatch does) lets a batch with few
    trusted targets pull less, instead of letting a handful of samples dominate a step.
    """
    per = losses.soft_ce(logits, targets, reduction="none")
    return (per * weights.to(per.dtype)).sum() / max(len(per), 1)


def confident_agreement(teacher_logits: torch.Tensor, targets: torch.Tensor, conf: float) -> torch.Tensor:
    """Where a teacher may be distilled (fedcore's robust FedGR) -> bool (n,): its softmax
    confidence is >= conf and its class is the refined target's (argmax of targets (n, C)).

    Elsewhere the teacher would teach its own guess against the label the sieve kept, which
    is how a teacher that drifts to a few classes pulls the student after it.
    """
    prob = F.softmax(teacher_logits.float(), dim=-1)
    top, cls = prob.max(dim=-1)
    return (top >= conf) & (cls == targets.argmax(dim=-1))
