"""A small-loss detector on any run's global model, kept on the metrics side.

Loss-based methods (FedCorr, FedNoRo, DivideMix, ...) flag a client's high-loss samples with a
2-component GMM on the per-sample CE. `LossProbe` applies that detector to the global model of
*any* run at every evaluation, without feeding anything back to training, so that a FedAvg+CE
run on the same artifact reports how well small loss would detect the noise there
(`detect/loss_probe/*`, scored like a method's own detector). It reads only the given labels; the
scorer compares its flags with the truth. Enabled by `train.loss_probe`.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch
import torch.nn.functional as F

from fedcore.data.federated import FederatedDataset
from fedcore.stats.gmm import clean_posterior


class LossProbe:
    """Per-client small-loss flags (client id -> bool mask over its samples) for a model's logits."""

    def __init__(self, fed: FederatedDataset, device: torch.device, seed: int) -> None:
        self.parts = [torch.as_tensor(np.asarray(p, dtype=np.int64), device=device) for p in fed.client_indices]
        self.y = fed.y_train.to(device)
        self.seed = seed

    def flags(self, logits_of: Callable[[torch.Tensor], torch.Tensor], rnd: int) -> dict[int, np.ndarray]:
        """logits_of(idx (m,)) -> (m, C) logits of those training samples under the model to probe."""
        out = {}
        for cid, idx in enumerate(self.parts):
            ce = F.cross_entropy(logits_of(idx).float(), self.y[idx], reduction="none").cpu().numpy()
            seed = int(np.random.default_rng([self.seed, rnd, cid]).integers(2**31))
            q, _ = clean_posterior(ce, seed=seed)
            out[cid] = q < 0.5
        return out
