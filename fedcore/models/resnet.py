"""ResNets from torchvision (weights=None), optionally with the CIFAR stem.

The torchvision modules are adopted as direct children, so state-dict keys are exactly
torchvision's (`conv1.weight`, `layer1.0.bn1.running_mean`, `fc.weight`, ...): a torchvision
checkpoint loads here and a fedcore `state_dict` loads back into torchvision.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch import nn

from fedcore.config import ModelConfig
from fedcore.models.base import FedModel, model_params, norm_layer, register_model
from fedcore.models.weights import adapt_first_conv

if TYPE_CHECKING:
    from torchvision import models as tvm


class TorchvisionResNet(FedModel):
    """features: stem -> layer1..4 -> global average pool, (B, 512 or 2048); head: `fc`."""

    head_prefixes = ("fc.",)

    def __init__(self, net: tvm.ResNet) -> None:
        super().__init__()
        for name, child in net.named_children():
            self.add_module(name, child)
        self.feature_dim = net.fc.in_features

    def features(self, x: torch.Tensor) -> torch.Tensor:
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return torch.flatten(self.avgpool(x), 1)

    def head(self, z: torch.Tensor) -> torch.Tensor:
        return self.fc(z)

    def adapt_state_dict(self, sd: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        return adapt_first_conv(sd, "conv1.weight", self.conv1.in_channels)


def _stem(in_channels: int, cifar: bool) -> nn.Conv2d:
    # CIFAR images are 32x32: a 7x7/2 conv plus max-pool would shrink them to 8x8 before
    # layer1, so the CIFAR variants use a 3x3/1 stem and no max-pool.
    conv = (
        nn.Conv2d(in_channels, 64, 3, 1, 1, bias=False)
        if cifar
        else nn.Conv2d(in_channels, 64, 7, 2, 3, bias=False)
    )
    nn.init.kaiming_normal_(conv.weight, mode="fan_out", nonlinearity="relu")  # as torchvision does
    return conv


def _resnet(
    arch: str,
    cfg: ModelConfig,
    in_shape: tuple[int, int, int],
    num_classes: int,
    cifar: bool,
) -> FedModel:
    # Every config load checks model.name against the registered models: that costs no torchvision.
    from torchvision import models as tvm  # lazy: naming models and datasets loads no torchvision

    p = model_params(cfg, {"norm": "batch"})
    net = getattr(tvm, arch)(weights=None, num_classes=num_classes, norm_layer=norm_layer(p["norm"], cfg.name))
    if cifar or in_shape[0] != 3:
        net.conv1 = _stem(in_shape[0], cifar)
    if cifar:
        net.maxpool = nn.Identity()
    return TorchvisionResNet(net)


@register_model("resnet18_cifar")
def _resnet18_cifar(cfg: ModelConfig, in_shape: tuple[int, int, int], num_classes: int) -> FedModel:
    return _resnet("resnet18", cfg, in_shape, num_classes, cifar=True)


@register_model("resnet34_cifar")
def _resnet34_cifar(cfg: ModelConfig, in_shape: tuple[int, int, int], num_classes: int) -> FedModel:
    return _resnet("resnet34", cfg, in_shape, num_classes, cifar=True)


@register_model("resnet18")
def _resnet18(cfg: ModelConfig, in_shape: tuple[int, int, int], num_classes: int) -> FedModel:
    return _resnet("resnet18", cfg, in_shape, num_classes, cifar=False)


@register_model("resnet50")
def _resnet50(cfg: ModelConfig, in_shape: tuple[int, int, int], num_classes: int) -> FedModel:
    return _resnet("resnet50", cfg, in_shape, num_classes, cifar=False)
