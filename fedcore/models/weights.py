"""Loading pretrained weights from a local file or an s3:// URI (never torch.hub).

A weights file is a torchvision-style state_dict saved with `torch.save`. Keys must match
the model exactly, except the head: when its shapes differ (another number of classes) or
it is absent (a backbone-only file), the freshly initialized head is kept.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import torch

from fedcore.errors import ArtifactError
from fedcore.io import download_file
from fedcore.models.base import FedModel

_SHOW = 4  # how many offending keys an error message lists


def load_weights(model: FedModel, uri: str) -> None:
    """Load `uri` (local path or s3:// file) into `model` in place; ArtifactError if it does not fit."""
    if uri.startswith("s3://"):
        with tempfile.TemporaryDirectory(prefix="fedcore-weights-") as tmp:
            local = Path(tmp) / (Path(uri).name or "weights.pt")
            download_file(uri, str(local))
            sd = read_state_dict(local, uri)
    else:
        sd = read_state_dict(Path(uri), uri)
    sd = model.adapt_state_dict(sd)
    _load_checked(model, sd, uri)


def read_state_dict(path: Path, uri: str) -> dict[str, torch.Tensor]:
    """Read a tensor dict from `path`; `uri` is only used in messages."""
    if not path.is_file():
        raise ArtifactError(
            f"weights file '{uri}' not found; set model.weights to an existing .pt state_dict"
        )
    try:
        obj = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:  # pickle, zip and EOF errors all mean the same to the user
        raise ArtifactError(
            f"weights file '{uri}' is unreadable ({type(err).__name__}); expected a file written by "
            "torch.save(model.state_dict(), path)"
        ) from None
    if isinstance(obj, dict) and isinstance(obj.get("state_dict"), dict):
        obj = obj["state_dict"]
    if not isinstance(obj, dict) or not all(isinstance(v, torch.Tensor) for v in obj.values()):
        raise ArtifactError(f"weights file '{uri}' does not hold a state_dict (a dict of tensors)")
    # Checkpoints saved from DataParallel/DDP prefix every key with "module.".
    return {k.removeprefix("module."): v for k, v in obj.items()}


def adapt_first_conv(sd: dict[str, torch.Tensor], key: str, in_channels: int) -> dict[str, torch.Tensor]:
    """Fit a pretrained first-conv weight (O, C_file, k, k) to `in_channels` inputs.

    The channel-mean kernel is repeated and rescaled by C_file / in_channels so a grey image
    replicated over the file's channels gives the same pre-activation as before.
    """
    w = sd.get(key)
    if w is None or w.ndim != 4 or w.shape[1] == in_channels:
        return sd
    new = w.mean(dim=1, keepdim=True).repeat(1, in_channels, 1, 1) * (w.shape[1] / in_channels)
    return {**sd, key: new}


def _is_head(key: str, prefixes: tuple[str, ...]) -> bool:
    return key.startswith(prefixes)


def _load_checked(model: FedModel, sd: dict[str, torch.Tensor], uri: str) -> None:
    own = model.state_dict()
    heads = model.head_keys()
    # A head whose shapes differ is dropped as a whole: half a head is worse than none.
    head_fits = all(k in own and own[k].shape == v.shape for k, v in sd.items() if _is_head(k, heads))
    if not head_fits:
        sd = {k: v for k, v in sd.items() if not _is_head(k, heads)}
    problems = []
    missing = [k for k in own if k not in sd and not _is_head(k, heads)]
    unexpected = [k for k in sd if k not in own]
    bad_shape = [
        f"{k} {tuple(v.shape)} (model {tuple(own[k].shape)})"
        for k, v in sd.items()
        if k in own and own[k].shape != v.shape
    ]
    for label, keys in (("missing", missing), ("unexpected", unexpected), ("wrong shape", bad_shape)):
        if keys:
            more = f" and {len(keys) - _SHOW} more" if len(keys) > _SHOW else ""
            problems.append(f"{label}: {', '.join(keys[:_SHOW])}{more}")
    if problems:
        name = model.model_name or type(model).__name__
        raise ArtifactError(
            f"weights file '{uri}' does not fit model '{name}' ({'; '.join(problems)}); "
            f"expected a state_dict of a torchvision-compatible '{name}'"
        )
    model.load_state_dict(sd, strict=False)
