"""The work a peer framework is given in benchmarks/vs_flower.py, exported from a fedcore dataset artifact.

One .npz holds what a FedAvg run needs and nothing a method must not see: the training images as
stored (uint8), the working (noisy) labels, each client's indices into them in the artifact's order,
the test split, the normalization and the model's initial weights (fedcore's seeded init, so both
frameworks start from the same point). Ground truth (clean labels, noise flags) stays out.
`tests/benchmarks/test_peer_data.py` checks that the export reproduces the artifact's partition and
labels exactly.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch


def export(fed, path: str | Path, init: dict[str, torch.Tensor] | None = None) -> Path:
    """Write `fed` (a FederatedDataset) to `path` (.npz); `init`: the model's starting state_dict."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    sizes = np.array([len(idx) for idx in fed.client_indices], dtype=np.int64)
    flat = np.concatenate([np.asarray(idx, dtype=np.int64) for idx in fed.client_indices])
    arrays = {"x_train": fed.x_train.numpy(), "y_train": fed.y_train.numpy(), "x_test": fed.x_test.numpy(),
              "y_test": fed.y_test.numpy(), "client_sizes": sizes, "client_flat": flat,
              "mean": np.asarray(fed.meta["mean"], dtype=np.float32),
              "std": np.asarray(fed.meta["std"], dtype=np.float32),
              "num_classes": np.int64(fed.num_classes), "data_hash": np.array(str(fed.meta.get("data_hash", "")))}
    for k, v in (init or {}).items():
        arrays[f"init/{k}"] = v.detach().cpu().numpy()
    np.savez(path, **arrays)
    return path


def load(path: str | Path) -> dict:
    """The export as numpy arrays; `clients` is the list of per-client index arrays."""
    with np.load(path) as z:
        out = {k: z[k] for k in z.files if not k.startswith("init/")}
        out["init"] = {k[5:]: z[k] for k in z.files if k.startswith("init/")}
    out["clients"] = np.split(out.pop("client_flat"), np.cumsum(out["client_sizes"])[:-1])
    return out


def client_tensors(data: dict, cid: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Client `cid`'s normalized images (float32) and working labels, as fedcore's store serves them."""
    idx = data["clients"][cid]
    return normalize(data, data["x_train"][idx]), torch.from_numpy(data["y_train"][idx])


def normalize(data: dict, x: np.ndarray) -> torch.Tensor:
    mean = torch.from_numpy(data["mean"]).view(1, -1, 1, 1)
    std = torch.from_numpy(data["std"]).view(1, -1, 1, 1)
    return (torch.from_numpy(x).float() / 255.0 - mean) / std
