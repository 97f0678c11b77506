"""The `FedModel` contract, the model registry (`register_model`) and helpers models share.

Every model splits into a backbone (`features`) and a linear head (`head`) because the
methods need both halves: representation regularizers, spectral identification and vMF
geometry read the features, while the losses read the logits. Models register here;
`fedcore.models.build` imports the built-in ones and builds them by name.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch import nn

from fedcore.config import ModelConfig
from fedcore.errors import ConfigError


class FedModel(nn.Module):
    """Backbone + head. Subclasses set `feature_dim` and `head_prefixes`.

    features(x): (B, C_in, H, W) -> (B, feature_dim); head(z): (B, feature_dim) -> (B, num_classes).
    """

    feature_dim: int
    head_prefixes: tuple[str, ...] = ("classifier.",)
    model_name: str = ""

    def features(self, x: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def head(self, z: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x))

    def stack_modules(self) -> tuple[nn.Module, nn.Module] | None:
        """(features module, head module) when features(x) and head(z) are exactly those modules'
        forwards (and forward is head(features(x))): lets the batched executor run the model as
        grouped layers over a stack of clients. None: it falls back to torch.func.vmap."""
        return None

    def head_keys(self) -> tuple[str, ...]:
        """State-dict key prefixes owned by the head (re-initialized when pretrained shapes differ)."""
        return self.head_prefixes

    def adapt_state_dict(self, sd: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """Hook for pretrained files: reshape what can be reshaped (first conv, positions)."""
        return sd


Factory = Callable[[ModelConfig, tuple[int, int, int], int], FedModel]
_REGISTRY: dict[str, Factory] = {}


def register_model(name: str) -> Callable[[Factory], Factory]:
    """Register `fn(cfg, in_shape, num_classes) -> FedModel` under `name`."""

    def deco(fn: Factory) -> Factory:
        if name in _REGISTRY:
            raise ValueError(f"model '{name}' registered twice")
        _REGISTRY[name] = fn
        return fn

    return deco


@contextlib.contextmanager
def seeded_init(seed: int) -> Iterator[None]:
    """Layers built inside draw their initial weights from `seed` alone.

    torch.nn layers and torchvision models initialize from the global RNG and accept no
    generator, so the one way to make init a pure function of the seed is to seed that RNG.
    Forking it first leaves the caller's stream exactly as it was on exit. Models are built
    on the CPU, so only the CPU generator is seeded: torch.manual_seed would also reseed the
    CUDA generators, which fork_rng(devices=[]) does not restore.
    """
    with torch.random.fork_rng(devices=[]):
        torch.random.default_generator.manual_seed(seed)
        yield


def model_params(cfg: ModelConfig, defaults: dict[str, Any]) -> dict[str, Any]:
    """cfg.params merged over `defaults`; unknown keys are a ConfigError."""
    unknown = sorted(set(cfg.params) - set(defaults))
    if unknown:
        allowed = ", ".join(sorted(defaults)) or "none"
        raise ConfigError(f"model '{cfg.name}' has no params {unknown}; allowed: {allowed}")
    return {**defaults, **cfg.params}


NORMS = ("batch", "group", "none")


def norm_layer(kind: str, model: str) -> Callable[[int], nn.Module]:
    """Factory `channels -> normalization module` for `model.params.norm`."""
    if kind == "batch":
        return nn.BatchNorm2d
    if kind == "group":
        return lambda c: nn.GroupNorm(_groups(c), c)
    if kind == "none":
        return lambda c: nn.Identity()
    raise ConfigError(f"model '{model}': params.norm must be one of {', '.join(NORMS)}, got '{kind}'")


def _groups(channels: int) -> int:
    # 32 groups is the GroupNorm paper default; narrow layers fall back to a divisor.
    for g in (32, 16, 8, 4, 2):
        if channels % g == 0 and channels // g >= 2:
            return g
    return 1
