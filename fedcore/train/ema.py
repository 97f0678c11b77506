"""Exponential moving averages of parameters, including FedGR's global revision of a local EMA.

Both operate on whole state dicts (parameters and floating buffers); integer buffers such
as BatchNorm's step counters are copied from the source because they only count steps.
"""

from __future__ import annotations

import torch
from torch import nn

from fedcore.train.params import Params


def _float_keys(params: Params) -> list[str]:
    return [k for k, v in params.items() if v.is_floating_point()]


def ema_update_(ema: Params, src: Params, decay: float) -> None:
    """In place: ema <- decay * ema + (1 - decay) * src, for every floating entry."""
    if not 0.0 <= decay <= 1.0:
        raise ValueError(f"decay must lie in [0, 1], got {decay}")
    keys = _float_keys(ema)
    with torch.no_grad():
        # lerp(a, b, w) = a + w (b - a) = (1 - w) a + w b, so w = 1 - decay.
        torch._foreach_lerp_([ema[k] for k in keys], [src[k].to(ema[k]) for k in keys], 1.0 - decay)
        floating = set(keys)
        for k in ema:
            if k not in floating:
                ema[k].copy_(src[k])


def revise(ema_prev: Params | None, global_params: Params, gamma_g: float) -> Params:
    """FedGR's round-start revision: gamma_g * ema_prev + (1 - gamma_g) * w_g, as a new dict.

    On a client's first visit (ema_prev None) the teacher starts as a copy of w_g.
    """
    out = {k: v.detach().clone() for k, v in (ema_prev if ema_prev is not None else global_params).items()}
    if ema_prev is not None:
        ema_update_(out, global_params, gamma_g)
    return out


def ema_step_(ema_model: nn.Module, model: nn.Module, decay: float) -> None:
    """One local-step EMA update of `ema_model` towards `model` (same architecture), in place."""
    ema_update_(ema_model.state_dict(), model.state_dict(), decay)


def ramped_decay(step: int, gamma_l: float) -> float:
    """Mean-teacher decay of the `step`-th update (0-based): min(gamma_l, 1 - 1 / (step + 1)).

    0 at the first update (the teacher copies the student), 0.5 at the second, then rising
    to gamma_l; with gamma_l = 0.99 it reaches the cap at step 99.
    """
    if step < 0:
        raise ValueError(f"step must be >= 0, got {step}")
    return min(gamma_l, 1.0 - 1.0 / (step + 1))


def ramped_weights(steps: torch.Tensor, gamma_l: float, ramp: bool = True) -> torch.Tensor:
    """Per-row interpolation weights 1 - decay for step counts (K,) (float64): `ramped_decay`
    (or the constant gamma_l when `ramp` is off) row by row, in the same double arithmetic."""
    if not ramp:
        return torch.full_like(steps, 1.0 - gamma_l)
    return 1.0 - torch.clamp(1.0 - 1.0 / (steps + 1.0), max=gamma_l)


def stacked_ema_update(ema: Params, src: Params, weights: torch.Tensor) -> Params:
    """`ema_update_` on stacked models (every entry (K, ...)), row k towards src's row k by
    weights[k] = 1 - decay_k, as a new dict; non-floating entries are copied from src."""
    out = {}
    for k, old in ema.items():
        new = src[k].detach()
        if old.is_floating_point():
            w = weights.to(old.dtype).view(-1, *[1] * (old.dim() - 1))
            out[k] = torch.lerp(old, new.to(old.dtype), w)
        else:
            out[k] = new
    return out


def teacher_reset(rate: float, coverage: float, beta: float, min_coverage: float) -> bool:
    """FedGR's teacher reset: a client estimated noisier than `beta` whose pseudo-label cache
    covers less than `min_coverage` of its samples restarts its teacher from w_g (its own EMA
    then holds little more than its noisy labels)."""
    return rate > beta and coverage < min_coverage
