"""Turning `train.device` into a `torch.device`."""

from __future__ import annotations

import torch

from fedcore.errors import ConfigError


def resolve_device(name: str) -> torch.device:
    """'auto' -> cuda when available else cpu; 'cpu'; 'cuda' or 'cuda:N' only if that GPU exists."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cpu":
        return torch.device("cpu")
    if name == "cuda" or name.startswith("cuda:"):
        if not torch.cuda.is_available():
            raise ConfigError(
                f"train.device is '{name}' but no CUDA GPU is visible; use train.device=auto or cpu"
            )
        index = name.partition(":")[2]
        if index and (not index.isdigit() or int(index) >= torch.cuda.device_count()):
            raise ConfigError(
                f"train.device '{name}' names a GPU that does not exist "
                f"({torch.cuda.device_count()} visible); use cuda or cuda:0"
            )
        return torch.device(name)
    raise ConfigError(f"unknown device '{name}'; use auto, cpu, cuda or cuda:N")
