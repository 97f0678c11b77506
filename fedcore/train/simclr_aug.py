"""SimCLR's two views (FedRG's federated contrastive stage): random resized crop, mirror and
colour distortion, batched with per-sample parameters from an explicit generator.

Chen et al., "A Simple Framework for Contrastive Learning of Visual Representations", ICML 2020.
"""

from __future__ import annotations

import math

import torch

from fedcore.train.augment_ops import Gen, blend, coin, gray, per_sample, rand, sign, warp


def _resized_crop_theta(gen: Gen, b: int, dev: torch.device, min_scale: float, flip: bool) -> torch.Tensor:
    """(B, 2, 3) theta: a crop of area U(min_scale, 1) and aspect in [3/4, 4/3], resized to
    the full image, mirrored for half the samples when `flip`."""
    area = rand(gen, (b,), dev, min_scale, 1.0)
    log_r = rand(gen, (b,), dev, math.log(3 / 4), math.log(4 / 3))
    sw = torch.sqrt(area * log_r.exp()).clamp(max=1.0)
    sh = torch.sqrt(area / log_r.exp()).clamp(max=1.0)
    cx = rand(gen, (b,), dev, -1.0, 1.0) * (1 - sw)
    cy = rand(gen, (b,), dev, -1.0, 1.0) * (1 - sh)
    mirror = sign(gen, b, dev) if flip else torch.ones(b, device=dev)
    zero = torch.zeros_like(sw)
    return torch.stack([torch.stack([sw * mirror, zero, cx], -1), torch.stack([zero, sh, cy], -1)], -2)


def hue_rotate(x: torch.Tensor, hue: torch.Tensor) -> torch.Tensor:
    """Shift hue by `hue` turns (B,) as a rotation of RGB about the grey axis (keeps grey grey)."""
    ang = 2 * math.pi * hue
    k = torch.full((3,), 1 / math.sqrt(3), dtype=x.dtype, device=x.device)
    cross = torch.tensor(
        [[0.0, -1.0, 1.0], [1.0, 0.0, -1.0], [-1.0, 1.0, 0.0]], dtype=x.dtype, device=x.device
    )
    cos, sin = torch.cos(ang).view(-1, 1, 1), torch.sin(ang).view(-1, 1, 1)
    eye = torch.eye(3, dtype=x.dtype, device=x.device)
    rot = cos * eye + sin * cross / math.sqrt(3) + (1 - cos) * torch.outer(k, k)
    return torch.einsum("bij,bjhw->bihw", rot, x).clamp(0.0, 1.0)


def _color_distort(x: torch.Tensor, gen: Gen, strength: float) -> torch.Tensor:
    """SimCLR colour distortion: with p=0.8 jitter brightness and contrast (+ saturation and
    hue on RGB); then greyscale with p=0.2 on RGB, or Gaussian noise on 1 channel, where
    colour has no meaning and noise supplies the missing appearance change."""
    b, dev, s = x.shape[0], x.device, 0.8 * strength

    def factor() -> torch.Tensor:
        return rand(gen, (b,), dev, 1 - s, 1 + s)

    jit = per_sample(coin(gen, b, 0.8, dev))
    out = blend(x, torch.zeros_like(x), factor())
    out = blend(out, gray(out).mean((1, 2, 3), keepdim=True).expand_as(out), factor())
    if x.shape[1] != 3:
        noise = torch.randn(x.shape, generator=gen, device=gen.device, dtype=x.dtype).to(dev)
        out = torch.where(jit, out, x)
        return (out + per_sample(rand(gen, (b,), dev, 0.0, 0.1)) * noise).clamp(0.0, 1.0)
    out = blend(out, gray(out).expand_as(out), factor())
    out = torch.where(jit, hue_rotate(out, rand(gen, (b,), dev, -0.2 * strength, 0.2 * strength)), x)
    return torch.where(per_sample(coin(gen, b, 0.2, dev)), gray(out).expand_as(out), out)


def simclr_view(
    x: torch.Tensor, gen: Gen, flip: bool = True, min_scale: float = 0.2, strength: float = 0.5
) -> torch.Tensor:
    """One SimCLR view: random resized crop (+ mirror when `flip`) and colour distortion."""
    theta = _resized_crop_theta(gen, x.shape[0], x.device, min_scale, flip)
    return _color_distort(warp(x, theta), gen, strength)


def simclr_views(
    x: torch.Tensor, gen: Gen, flip: bool = True, min_scale: float = 0.2, strength: float = 0.5
) -> tuple[torch.Tensor, torch.Tensor]:
    """Two independent SimCLR views of the batch, each (B, C, H, W).

    min_scale 0.2 instead of SimCLR's ImageNet 0.08: an 8% crop of a 32px image is a few
    pixels. strength is SimCLR's colour-distortion s (0.5 is its CIFAR setting).
    """
    return simclr_view(x, gen, flip, min_scale, strength), simclr_view(x, gen, flip, min_scale, strength)
