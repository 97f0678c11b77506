"""The model a run hands to serving: raw images in, class probabilities out.

Training feeds normalized tensors to logits-producing modules; someone calling
`mlflow.pyfunc.load_model(...).predict(images)` has neither the dataset's mean and std
nor a reason to know them, so the served module carries the normalization and the
final softmax (sigmoid for multi-label data) itself.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence

import torch
from torch import nn


class ServingModel(nn.Module):
    """(B, C, H, W) float images in [0, 1] -> (B, K) probabilities."""

    def __init__(self, model: nn.Module, mean: Sequence[float], std: Sequence[float], channels: int,
                 multi_label: bool = False) -> None:
        super().__init__()
        self.model = model
        reps = channels // len(mean)
        self.register_buffer("mean", torch.tensor(list(mean) * reps, dtype=torch.float32).view(1, channels, 1, 1))
        self.register_buffer("std", torch.tensor(list(std) * reps, dtype=torch.float32).view(1, channels, 1, 1))
        self.multi_label = multi_label

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        logits = self.model((x - self.mean) / self.std)
        return torch.sigmoid(logits) if self.multi_label else torch.softmax(logits, dim=1)


def serving_model(model: nn.Module, mean: Sequence[float], std: Sequence[float], channels: int,
                  multi_label: bool = False) -> ServingModel:
    """A CPU copy of `model` (left untouched) wrapped for serving, in eval mode."""
    return ServingModel(copy.deepcopy(model).cpu(), mean, std, channels, multi_label).eval()
