"""Models by name: the built-in models, `available_models` and `build_model`.

The built-in modules (small, resnet, vit) register themselves with `fedcore.models.base`
when imported; importing them here, at the top, keeps base free of them, so they can import base.
torchvision is imported only when a torchvision model is built.
"""

from __future__ import annotations

from fedcore.config import ModelConfig
from fedcore.errors import ConfigError
from fedcore.models import resnet, small, vit  # noqa: F401  (registration side effects)
from fedcore.models.base import _REGISTRY, FedModel, seeded_init
from fedcore.models.weights import load_weights


def available_models() -> list[str]:
    return sorted(_REGISTRY)


def build_model(
    cfg: ModelConfig, in_shape: tuple[int, int, int], num_classes: int, seed: int = 0
) -> FedModel:
    """Build the model named in `cfg` on the CPU, initialized deterministically from `seed`.

    in_shape: (C, H, W) of one input. Pretrained weights come only from `cfg.weights`.
    """
    if cfg.name not in _REGISTRY:
        raise ConfigError(f"unknown model '{cfg.name}'; choose one of: {', '.join(sorted(_REGISTRY))}")
    if len(in_shape) != 3 or num_classes < 1:
        raise ValueError(f"in_shape must be (C, H, W) and num_classes >= 1, got {in_shape}, {num_classes}")
    with seeded_init(seed):
        model = _REGISTRY[cfg.name](cfg, tuple(in_shape), num_classes)
    model.model_name = cfg.name
    if cfg.weights:
        load_weights(model, cfg.weights)
    return model

