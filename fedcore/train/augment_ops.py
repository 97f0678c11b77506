"""Primitives shared by the augmentation modules (`augment`, `simclr_aug`): per-sample random
draws from an explicit generator, per-sample blends, greyscale and affine resampling.

Every draw comes from `gen` (on its own device) and moves to the batch's device, so a CPU
generator drives augmentation of a batch on any device reproducibly.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torchvision.transforms.v2 import functional as TF

Gen = torch.Generator


def rand(
    gen: Gen, shape: tuple[int, ...], device: torch.device, lo: float = 0.0, hi: float = 1.0
) -> torch.Tensor:
    u = torch.rand(shape, generator=gen, device=gen.device).to(device)
    return lo + (hi - lo) * u


def coin(gen: Gen, b: int, p: float, device: torch.device) -> torch.Tensor:
    return rand(gen, (b,), device) < p


def sign(gen: Gen, b: int, device: torch.device) -> torch.Tensor:
    return torch.where(coin(gen, b, 0.5, device), 1.0, -1.0)


def per_sample(v: torch.Tensor) -> torch.Tensor:  # (B,) -> (B, 1, 1, 1)
    return v.view(-1, 1, 1, 1)


def blend(x: torch.Tensor, base: torch.Tensor, factor: torch.Tensor) -> torch.Tensor:
    """base + factor * (x - base), clamped: factor 1 = identity (PIL ImageEnhance semantics)."""
    return (base + per_sample(factor) * (x - base)).clamp(0.0, 1.0)


def gray(x: torch.Tensor) -> torch.Tensor:
    return TF.rgb_to_grayscale(x) if x.shape[1] == 3 else x.mean(1, keepdim=True)


def warp(x: torch.Tensor, theta: torch.Tensor) -> torch.Tensor:
    """Bilinear per-sample affine resampling; pixels from outside the image are black (0)."""
    grid = F.affine_grid(theta.to(x.dtype), list(x.shape), align_corners=False)
    return F.grid_sample(x, grid, mode="bilinear", padding_mode="zeros", align_corners=False)
