"""Loss functions shared by the methods: pure torch, no state.

Shapes: logits (B, C); integer labels y (B,); probability targets (B, C). Every loss takes
`reduction` in {"mean", "sum", "none"}; "none" gives one value per sample, shape (B,), so
methods can mask, weight or rank samples (small-loss selection, GMM sieving).
Teacher/reference inputs (`teacher_logits`, `f_global`) are detached: they are targets.
"""

from __future__ import annotations

import math
from typing import Literal

import torch
import torch.nn.functional as F

Reduction = Literal["mean", "sum", "none"]


def _reduce(per_sample: torch.Tensor, reduction: Reduction) -> torch.Tensor:
    if reduction == "none":
        return per_sample
    if reduction == "mean":
        return per_sample.mean()
    if reduction == "sum":
        return per_sample.sum()
    raise ValueError(f"reduction must be 'mean', 'sum' or 'none', got {reduction!r}")


def ce(logits: torch.Tensor, y: torch.Tensor, reduction: Reduction = "mean") -> torch.Tensor:
    """Cross-entropy with integer labels."""
    return _reduce(F.cross_entropy(logits, y, reduction="none"), reduction)


def ce_stacked(logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Per-sample cross-entropy over a stack of clients: logits (K, B, C), labels (K, B) -> (K, B).

    The same values as `ce(logits.flatten(0, 1), y.flatten(), "none")` (bitwise on the CPU), but
    computed with the classes on dim 1, cross_entropy's (N, C, d) form: its kernel then runs along
    the batch instead of along a few classes per row, 2.7x faster forward and backward at
    K=20, B=32, C=10 on one CPU thread. The grouped head's logits are already laid out that way.
    """
    return F.cross_entropy(logits.transpose(1, 2), y, reduction="none")


def soft_ce(logits: torch.Tensor, target_probs: torch.Tensor, reduction: Reduction = "mean") -> torch.Tensor:
    """Cross-entropy against probability targets (B, C): -sum_c p_c log softmax(logits)_c."""
    return _reduce(-(target_probs * F.log_softmax(logits, dim=-1)).sum(-1), reduction)


def sce(
    logits: torch.Tensor,
    y: torch.Tensor,
    alpha: float = 0.1,
    beta: float = 1.0,
    num_classes: int | None = None,
    log_zero: float = -4.0,
    reduction: Reduction = "mean",
) -> torch.Tensor:
    """Symmetric CE (Wang et al., ICCV 2019): alpha * CE + beta * RCE.

    RCE = -sum_c p_c log q_c with q the one-hot label and log 0 := `log_zero` (the paper's
    A = -4), which collapses to -log_zero * (1 - p_y) for any number of classes. The
    authors' code clamps the one-hot to 1e-4 instead, i.e. log_zero = log(1e-4) ~ -9.21.
    num_classes, when given, is checked against the logits (it is not otherwise needed).
    """
    if num_classes is not None and logits.shape[-1] != num_classes:
        raise ValueError(f"sce: logits have {logits.shape[-1]} classes, expected {num_classes}")
    p_y = F.softmax(logits, dim=-1).gather(-1, y[:, None]).squeeze(-1)
    rce = -log_zero * (1.0 - p_y)
    per = alpha * F.cross_entropy(logits, y, reduction="none") + beta * rce
    return _reduce(per, reduction)


def class_log_prior(labels: torch.Tensor, num_classes: int, absent: Literal["one", "neg_inf"] = "one") -> torch.Tensor:
    """log pi_c from integer labels (N,) -> (C,).

    absent="one" counts a class the labels lack as one sample (finite prior); "neg_inf"
    gives it log 0 = -inf, as FedNoRo's code does: its logit then never wins, and the
    losses below mask it so that -inf never meets a zero weight as NaN.
    """
    counts = torch.bincount(labels, minlength=num_classes).to(torch.float32)
    if absent == "one":
        counts = counts.clamp(min=1)
    elif absent != "neg_inf":
        raise ValueError(f"absent must be 'one' or 'neg_inf', got {absent!r}")
    return torch.log(counts / counts.sum())


def adjust_logits(logits: torch.Tensor, log_prior: torch.Tensor, tau: float) -> torch.Tensor:
    """logits + tau * log_prior; tau = 0 leaves the logits alone (0 * -inf would be NaN)."""
    return logits if tau == 0 else logits + tau * log_prior


def la_ce(
    logits: torch.Tensor,
    y: torch.Tensor,
    log_prior: torch.Tensor,
    tau: float = 1.0,
    reduction: Reduction = "mean",
) -> torch.Tensor:
    """Logit-adjusted CE (Menon et al., ICLR 2021): CE(logits + tau * log_prior, y). log_prior: (C,)."""
    return ce(adjust_logits(logits, log_prior, tau), y, reduction)


def kd_kl(
    student_logits: torch.Tensor,
    teacher_logits: torch.Tensor,
    T: float = 1.0,
    scale_t2: bool = False,
    reduction: Reduction = "mean",
) -> torch.Tensor:
    """KL(softmax(teacher/T) || softmax(student/T)) per sample.

    Unscaled by default because the FedGR and FedSIR objectives are written without T^2;
    `scale_t2=True` gives Hinton's scaling, which keeps gradient size independent of T.
    """
    log_p_t = F.log_softmax(teacher_logits.detach() / T, dim=-1)
    log_p_s = F.log_softmax(student_logits / T, dim=-1)
    per = (log_p_t.exp() * (log_p_t - log_p_s)).sum(-1)
    return _reduce(per * (T * T if scale_t2 else 1.0), reduction)


def la_kd(
    student_logits: torch.Tensor,
    teacher_logits: torch.Tensor,
    y: torch.Tensor,
    log_prior: torch.Tensor,
    w_kd: float,
    T: float = 0.8,
    tau: float = 1.0,
    kd_mask: torch.Tensor | None = None,
    reduction: Reduction = "mean",
    soften_student: bool = True,
) -> torch.Tensor:
    """FedNoRo/FedSIR LA-KD: w_kd * KL(softmax(teacher/T) || softmax(s')) + (1 - w_kd) * LA-CE.

    s' is the logit-adjusted student (logits + tau * log_prior), divided by T as well when
    `soften_student` (FedNoRo's code softens only the teacher: soften_student=False).
    Classes whose prior is -inf get log q = 0 in the KL sum, as in FedNoRo's code: a
    constant term with no gradient, so the loss stays finite. kd_mask (B,) bool limits KD
    to those samples (FedSIR's disagreeing set); averaging the masked per-sample loss over
    the whole batch weights KD by the fraction of KD samples.
    """
    adjusted = adjust_logits(student_logits, log_prior, tau)
    log_q = F.log_softmax(adjusted / T if soften_student else adjusted, dim=-1)
    log_q = torch.where(torch.isinf(log_q), torch.zeros_like(log_q), log_q)
    log_p_t = F.log_softmax(teacher_logits.detach() / T, dim=-1)
    kd = (log_p_t.exp() * (log_p_t - log_q)).sum(-1)
    if kd_mask is not None:
        kd = kd * kd_mask.to(kd.dtype)
    per = w_kd * kd + (1.0 - w_kd) * ce(adjusted, y, reduction="none")
    return _reduce(per, reduction)


def kd_ramp_weight(rnd: int, begin: int, end: int, a: float) -> float:
    """a * exp(-5 (1 - s)^2), s ramping linearly 0 -> 1 from round `begin` to `end` (clipped).

    Like FedNoRo's sigmoid ramp-up, the weight before `begin` is a * exp(-5), not 0.
    """
    if end <= begin:
        s = 1.0 if rnd >= begin else 0.0
    else:
        s = min(max((rnd - begin) / (end - begin), 0.0), 1.0)
    return a * math.exp(-5.0 * (1.0 - s) ** 2)


def bce(logits: torch.Tensor, y01: torch.Tensor, reduction: Reduction = "mean") -> torch.Tensor:
    """Multi-label binary CE on logits (B, C) vs 0/1 targets (B, C); per sample = mean over labels."""
    per = F.binary_cross_entropy_with_logits(logits, y01.to(logits.dtype), reduction="none").mean(-1)
    return _reduce(per, reduction)


def forward_corrected_nll(
    logits: torch.Tensor, y: torch.Tensor, T: torch.Tensor, eps: float = 1e-6, reduction: Reduction = "mean"
) -> torch.Tensor:
    """FedRG noisy-sample term: -log((softmax(logits) @ T)[y] + eps). T: (C, C) row-stochastic."""
    noisy_probs = F.softmax(logits, dim=-1) @ T
    return _reduce(-torch.log(noisy_probs.gather(-1, y[:, None]).squeeze(-1) + eps), reduction)


def nt_xent(
    z1: torch.Tensor, z2: torch.Tensor, temperature: float = 0.5, reduction: Reduction = "mean"
) -> torch.Tensor:
    """Symmetric NT-Xent (SimCLR) on projections z1, z2 (B, d) of two views of the same B samples.

    Each of the 2B views must pick its partner among the other 2B - 1 by cosine similarity
    / temperature. Per sample: mean of its two directions, (B,).
    """
    b = z1.shape[0]
    z = F.normalize(torch.cat([z1, z2]), dim=-1)
    sim = (z @ z.T) / temperature
    sim = sim.masked_fill(torch.eye(2 * b, dtype=torch.bool, device=z.device), float("-inf"))
    partner = torch.cat([torch.arange(b, 2 * b), torch.arange(b)]).to(z.device)
    per_view = F.cross_entropy(sim, partner, reduction="none")
    return _reduce((per_view[:b] + per_view[b:]) / 2, reduction)


def cosine_repr_reg(
    f_local: torch.Tensor, f_global: torch.Tensor, reduction: Reduction = "mean"
) -> torch.Tensor:
    """FedGR representation regularizer: 1 - cos(f_local, f_global) per sample; f_global is frozen."""
    return _reduce(1.0 - F.cosine_similarity(f_local, f_global.detach(), dim=-1), reduction)


def mix(v: torch.Tensor, lam: float, perm: torch.Tensor) -> torch.Tensor:
    """Mixup's convex combination along the batch: lam * v + (1 - lam) * v[perm] (inputs or soft targets)."""
    return lam * v + (1.0 - lam) * v[perm]


def mixup_inputs(
    x: torch.Tensor, y: torch.Tensor, lam: float, perm: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Mixup (Zhang et al., ICLR 2018): lam * x + (1 - lam) * x[perm] and the partner labels y[perm]."""
    return mix(x, lam, perm), y[perm]


def mixup_ce(
    logits: torch.Tensor, y_a: torch.Tensor, y_b: torch.Tensor, lam: float, reduction: Reduction = "mean"
) -> torch.Tensor:
    """The mixup loss: lam * CE(logits, y_a) + (1 - lam) * CE(logits, y_b)."""
    per = lam * ce(logits, y_a, reduction="none") + (1.0 - lam) * ce(logits, y_b, reduction="none")
    return _reduce(per, reduction)
