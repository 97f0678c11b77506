"""ViT-B/16 from torchvision (weights=None) at the dataset's image size.

Children are adopted under torchvision's names, so keys match torchvision checkpoints.
Pretrained position embeddings are interpolated to the configured size (ImageNet files
carry 14x14 patch positions, a 32x32 input has 2x2).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch import nn

from fedcore.config import ModelConfig
from fedcore.errors import ArtifactError, ConfigError
from fedcore.models.base import FedModel, model_params, register_model
from fedcore.models.weights import adapt_first_conv

if TYPE_CHECKING:
    from torchvision import models as tvm


class FedViT(FedModel):
    """features: patchify -> [class token; patches] -> encoder -> class token, (B, 768); head: `heads`."""

    head_prefixes = ("heads.",)

    def __init__(self, net: tvm.VisionTransformer) -> None:
        super().__init__()
        self.conv_proj = net.conv_proj
        self.class_token = net.class_token
        self.encoder = net.encoder
        self.heads = net.heads
        self.image_size = net.image_size
        self.patch_size = net.patch_size
        self.feature_dim = net.hidden_dim

    def features(self, x: torch.Tensor) -> torch.Tensor:
        if x.shape[-2:] != (self.image_size, self.image_size):
            raise ValueError(f"vit_b_16 was built for {self.image_size}px inputs, got {tuple(x.shape[-2:])}")
        tokens = self.conv_proj(x).flatten(2).transpose(1, 2)
        cls = self.class_token.expand(x.shape[0], -1, -1)
        return self.encoder(torch.cat([cls, tokens], dim=1))[:, 0]

    def head(self, z: torch.Tensor) -> torch.Tensor:
        return self.heads(z)

    def adapt_state_dict(self, sd: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        sd = adapt_first_conv(sd, "conv_proj.weight", self.conv_proj.in_channels)
        pos = sd.get("encoder.pos_embedding")
        if pos is not None and pos.shape != self.encoder.pos_embedding.shape:
            from torchvision.models.vision_transformer import (
                interpolate_embeddings,  # lazy: naming models and datasets loads no torchvision
            )

            try:
                sd = dict(interpolate_embeddings(self.image_size, self.patch_size, dict(sd)))
            except (ValueError, RuntimeError) as err:
                raise ArtifactError(
                    f"cannot fit the file's position embedding {tuple(pos.shape)} to "
                    f"{tuple(self.encoder.pos_embedding.shape)} ({err}); "
                    "expected a torchvision vit_b_16 state_dict"
                ) from None
        return sd


@register_model("vit_b_16")
def _vit_b_16(cfg: ModelConfig, in_shape: tuple[int, int, int], num_classes: int) -> FedModel:
    model_params(cfg, {})
    c, h, w = in_shape
    if h != w or h % 16:
        raise ConfigError(
            f"vit_b_16 needs square inputs whose side is a multiple of 16, got {h}x{w}; "
            "set data.image_size (e.g. 224) or pick another model"
        )
    from torchvision import models as tvm  # lazy: naming models and datasets loads no torchvision

    net = tvm.vit_b_16(weights=None, num_classes=num_classes, image_size=h)
    if c != 3:
        conv = nn.Conv2d(c, net.hidden_dim, 16, 16)
        # Same init torchvision gives the 3-channel projection.
        nn.init.trunc_normal_(conv.weight, std=(1.0 / (c * 16 * 16)) ** 0.5)
        nn.init.zeros_(conv.bias)
        net.conv_proj = conv
    return FedViT(net)
