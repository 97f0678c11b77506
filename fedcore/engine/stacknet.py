"""A model called on stacked parameters: params (K, ...) and inputs (K, B, ...) -> outputs (K, B, ...).

Row k of the output is the model with row k of every parameter applied to row k of the
input. Two implementations give the same numbers:

- grouped layers, for models whose `stack_modules()` names a features and a head module
  built from Linear, Conv2d, GroupNorm, ReLU, pooling, Flatten and Sequential: a Linear
  becomes one `baddbmm` over the K clients, a Conv2d one convolution with K times the
  groups (clients side by side along the channels), a GroupNorm one group_norm with K
  times the groups. The number of kernel calls per step does not grow with K.
- `torch.func.vmap` over `functional_call`, for every other model.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call, vmap

Params = dict[str, torch.Tensor]
# An activation and its layout: "kb" = (K, B, ...); "bk" = (B, K * C, H, W) (clients along
# channels, for convolutions); "kf" = (K, F, B) (features first, for Linear chains: the weight
# gradient of W @ x comes out contiguous, the one of x @ W^T as a strided transpose)
Act = tuple[torch.Tensor, str]
Layer = Callable[[Params, Act, int], Act]


def _kb(a: Act, k: int) -> torch.Tensor:
    t, layout = a
    if layout == "kb":
        return t
    if layout == "kf":
        return t.transpose(1, 2)
    b = t.shape[0]
    return t.view(b, k, t.shape[1] // k, *t.shape[2:]).transpose(0, 1)


def _bk(a: Act, k: int) -> torch.Tensor:
    t, layout = a
    if layout == "bk":
        return t
    t = _kb(a, k)
    return t.transpose(0, 1).reshape(t.shape[1], k * t.shape[2], *t.shape[3:])


def _kf(a: Act, k: int) -> torch.Tensor:
    t, layout = a
    return t if layout == "kf" else _kb(a, k).transpose(1, 2)


def _linear(m: nn.Linear, name: str) -> Layer:
    def f(p: Params, a: Act, k: int) -> Act:
        w = p[name + "weight"]
        if m.bias is None:
            return torch.bmm(w, _kf(a, k)), "kf"
        return torch.baddbmm(p[name + "bias"].unsqueeze(2), w, _kf(a, k)), "kf"

    return f


def _conv(m: nn.Conv2d, name: str) -> Layer | None:
    if m.padding_mode != "zeros" or isinstance(m.padding, str):
        return None

    def f(p: Params, a: Act, k: int) -> Act:
        w = p[name + "weight"]
        bias = p[name + "bias"].reshape(-1) if m.bias is not None else None
        out = F.conv2d(_bk(a, k), w.reshape(-1, *w.shape[2:]), bias, m.stride, m.padding, m.dilation, m.groups * k)
        return out, "bk"

    return f


def _group_norm(m: nn.GroupNorm, name: str) -> Layer:
    def f(p: Params, a: Act, k: int) -> Act:
        w = p[name + "weight"].reshape(-1) if m.affine else None
        b = p[name + "bias"].reshape(-1) if m.affine else None
        return F.group_norm(_bk(a, k), m.num_groups * k, w, b, m.eps), "bk"

    return f


def _spatial(fn: Callable[[torch.Tensor], torch.Tensor]) -> Layer:
    """A per-channel op over (N, C, H, W): pooling works on the clients-along-channels layout."""
    return lambda p, a, k: (fn(_bk(a, k)), "bk")


def _flatten(m: nn.Flatten) -> Layer | None:
    if m.start_dim != 1 or m.end_dim != -1:
        return None
    return lambda p, a, k: (a if a[1] == "kf" else (_kb(a, k).flatten(2), "kb"))


def _elementwise(m: nn.Module) -> Layer:
    return lambda p, a, k: (m(a[0]), a[1])


def _compile(m: nn.Module, name: str) -> Layer | None:
    """The grouped version of module m (its parameters under `name` + '.'), or None if unsupported."""
    if isinstance(m, nn.Sequential):
        parts = [_compile(c, f"{name}{i}.") for i, c in enumerate(m)]
        if any(p is None for p in parts):
            return None

        def seq(p: Params, a: Act, k: int) -> Act:
            for part in parts:
                a = part(p, a, k)
            return a

        return seq
    if isinstance(m, nn.Linear):
        return _linear(m, name)
    if isinstance(m, nn.Conv2d):
        return _conv(m, name)
    if isinstance(m, nn.GroupNorm):
        return _group_norm(m, name)
    if isinstance(m, nn.Flatten):
        return _flatten(m)
    if isinstance(m, nn.ReLU | nn.LeakyReLU | nn.GELU | nn.SiLU | nn.Tanh | nn.Sigmoid | nn.Identity):
        return _elementwise(m)
    if isinstance(m, nn.Dropout) and m.p == 0:
        return _elementwise(m)
    if isinstance(m, nn.MaxPool2d | nn.AvgPool2d | nn.AdaptiveAvgPool2d | nn.AdaptiveMaxPool2d):
        return _spatial(m)
    return None


class _Bound(nn.Module):
    """One method of a model (features, head) as forward, for functional_call."""

    def __init__(self, model: nn.Module, fn: str) -> None:
        super().__init__()
        self.model, self.fn = model, fn

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return getattr(self.model, self.fn)(x)


def grouped_parts(model: nn.Module) -> tuple[Layer, Layer] | None:
    """(features, head) as grouped layers, when the model names them and every layer is supported."""
    parts = getattr(model, "stack_modules", lambda: None)()
    if parts is None:
        return None
    names = {m: n for n, m in model.named_modules()}
    layers = tuple(_compile(m, f"{names[m]}.") for m in parts)
    return None if any(f is None for f in layers) else layers  # type: ignore[return-value]


class StackedNet:
    """net(params, x), net.features(params, x), net.head(params, z) over a stack of K clients.

    params: the model's state-dict entries with a leading client dim (K, ...); x: (K, B, ...).
    `grouped=False` forces the vmap implementation (for tests and models it cannot group).
    """

    def __init__(self, model: nn.Module, grouped: bool = True) -> None:
        self.model = model
        self.parts = grouped_parts(model) if grouped else None
        self._fwd = vmap(lambda p, x: functional_call(model, p, (x,)))
        self._features = vmap(self._bound(_Bound(model, "features")))
        self._head = vmap(self._bound(_Bound(model, "head")))

    @property
    def grouped(self) -> bool:
        return self.parts is not None

    @staticmethod
    def _bound(module: _Bound):
        return lambda p, x: functional_call(module, {f"model.{k}": v for k, v in p.items()}, (x,))

    @staticmethod
    def _run(layer: Layer, params: Params, x: torch.Tensor) -> torch.Tensor:
        k = x.shape[0]
        return _kb(layer(params, (x, "kb"), k), k)

    def __call__(self, params: Params, x: torch.Tensor) -> torch.Tensor:
        if self.parts is None:
            return self._fwd(params, x)
        return self.head(params, self.features(params, x))

    def features(self, params: Params, x: torch.Tensor) -> torch.Tensor:
        return self._features(params, x) if self.parts is None else self._run(self.parts[0], params, x)

    def head(self, params: Params, z: torch.Tensor) -> torch.Tensor:
        return self._head(params, z) if self.parts is None else self._run(self.parts[1], params, z)
