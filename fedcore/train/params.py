"""Parameter ops: snapshot, in-place load, and weighted aggregation without per-key Python math."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

Params = dict[str, torch.Tensor]


def get_params(model: nn.Module) -> Params:
    """Detached copies of every state-dict entry (parameters and buffers)."""
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def load_params_(model: nn.Module, params: Params) -> None:
    """Copy `params` into the model's tensors in place (no new modules, no model copies)."""
    state = model.state_dict()
    missing = [k for k in state if k not in params]
    if missing:
        raise KeyError(f"params lack {len(missing)} model entries, e.g. {missing[0]}")
    dst = [state[k] for k in state]
    src = [params[k].to(device=state[k].device, dtype=state[k].dtype) for k in state]
    with torch.no_grad():
        torch._foreach_copy_(dst, src)


def weighted_average(params: Sequence[Params], weights: Sequence[float], keys: Sequence[str] | None = None) -> Params:
    """sum_k w_k * params_k / sum_k w_k over `keys` (default: all), with _foreach kernels.

    Integer buffers (e.g. BatchNorm's num_batches_tracked) are not averaged: the first
    client's value is kept, since they only count steps.
    """
    if not params:
        raise ValueError("nothing to aggregate")
    w = torch.tensor([float(x) for x in weights], dtype=torch.float64)
    if w.sum() <= 0:
        raise ValueError("aggregation weights must sum to a positive number")
    w = (w / w.sum()).tolist()
    keys = list(keys) if keys is not None else list(params[0])
    fkeys = [k for k in keys if params[0][k].is_floating_point()]
    out: Params = {k: params[0][k].clone() for k in keys if k not in set(fkeys)}
    acc = [torch.zeros_like(params[0][k]) for k in fkeys]
    for p, wk in zip(params, w, strict=True):
        torch._foreach_add_(acc, [p[k] for k in fkeys], alpha=wk)
    out.update(zip(fkeys, acc, strict=True))
    return out


def flat_distance(a: Params, b: Params, keys: Sequence[str] | None = None) -> float:
    """L2 distance between two parameter sets over all floating tensors (buffers included)."""
    keys = keys or [k for k in a if a[k].is_floating_point()]
    sq = torch._foreach_sub([a[k] for k in keys], [b[k] for k in keys])
    return float(torch.sqrt(sum(torch.sum(t.double() ** 2) for t in sq)))


def per_tensor_distance(a: Params, b: Params, keys: Sequence[str] | None = None) -> float:
    """Sum over floating tensors (buffers included) of each tensor's L2 distance, as FedNoRo's
    code measures models for DaAgg; never below `flat_distance` (triangle inequality)."""
    keys = keys or [k for k in a if a[k].is_floating_point()]
    sq = torch._foreach_sub([a[k] for k in keys], [b[k] for k in keys])
    return float(sum(torch.sqrt(torch.sum(t.double() ** 2)) for t in sq))
