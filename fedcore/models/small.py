"""Small models for the CPU-sized datasets: an MLP and a compact CNN.

The CNN defaults to GroupNorm. In federated training BatchNorm's running statistics are
averaged across clients whose label mixes differ, so the aggregated statistics match no
client and test accuracy suffers (Hsieh et al., "The Non-IID Data Quagmire of
Decentralized Machine Learning", ICML 2020, arXiv 1910.00189). GroupNorm keeps no running
buffers, behaves the same in train and eval mode, and is unaffected by tiny local batches.
`params.norm: batch` remains available for comparisons.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from fedcore.config import ModelConfig
from fedcore.models.base import FedModel, model_params, norm_layer, register_model


class _BackboneClassifier(FedModel):
    """features = self.backbone, head = self.classifier (a linear layer)."""

    backbone: nn.Module
    classifier: nn.Linear

    def features(self, x: torch.Tensor) -> torch.Tensor:
        return self.backbone(x)

    def head(self, z: torch.Tensor) -> torch.Tensor:
        return self.classifier(z)

    def stack_modules(self) -> tuple[nn.Module, nn.Module]:
        return self.backbone, self.classifier


class MLP(_BackboneClassifier):
    """flatten -> width -> width (ReLU) = features; linear head."""

    def __init__(self, in_shape: tuple[int, int, int], width: int, num_classes: int) -> None:
        super().__init__()
        self.backbone = nn.Sequential(
            nn.Flatten(),
            nn.Linear(math.prod(in_shape), width),
            nn.ReLU(inplace=True),
            nn.Linear(width, width),
            nn.ReLU(inplace=True),
        )
        self.classifier = nn.Linear(width, num_classes)
        self.feature_dim = width


def _conv_block(c_in: int, c_out: int, norm: nn.Module) -> nn.Sequential:
    # Bias is redundant in front of a normalization layer, needed without one.
    bias = isinstance(norm, nn.Identity)
    return nn.Sequential(nn.Conv2d(c_in, c_out, 3, padding=1, bias=bias), norm, nn.ReLU(inplace=True))


class SmallCNN(_BackboneClassifier):
    """Three 3x3 conv blocks (width/4, width/2, width channels), up to two 2x max-pools,
    adaptive 2x2 average pool, then a width-d ReLU layer = features; linear head.

    Pools are only inserted while the map stays at least 4x4, so 8x8 digits, 16x16 mosaics,
    28x28 MNIST and 32x32 CIFAR all work.
    """

    def __init__(self, in_shape: tuple[int, int, int], width: int, num_classes: int, norm: str) -> None:
        super().__init__()
        make_norm = norm_layer(norm, "cnn")
        chans = [in_shape[0], max(1, width // 4), max(1, width // 2), width]
        side = min(in_shape[1], in_shape[2])
        layers: list[nn.Module] = []
        for i in range(3):
            layers.append(_conv_block(chans[i], chans[i + 1], make_norm(chans[i + 1])))
            if i < 2 and side >= 8:
                layers.append(nn.MaxPool2d(2))
                side //= 2
        layers += [nn.AdaptiveAvgPool2d(2), nn.Flatten(), nn.Linear(4 * width, width), nn.ReLU(inplace=True)]
        self.backbone = nn.Sequential(*layers)
        self.classifier = nn.Linear(width, num_classes)
        self.feature_dim = width


@register_model("mlp")
def _mlp(cfg: ModelConfig, in_shape: tuple[int, int, int], num_classes: int) -> FedModel:
    model_params(cfg, {})
    return MLP(in_shape, cfg.width, num_classes)


@register_model("cnn")
def _cnn(cfg: ModelConfig, in_shape: tuple[int, int, int], num_classes: int) -> FedModel:
    p = model_params(cfg, {"norm": "group"})
    return SmallCNN(in_shape, cfg.width, num_classes, p["norm"])
