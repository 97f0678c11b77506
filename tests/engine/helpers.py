"""Tiny hand-made federations for engine tests."""

import numpy as np
import torch
from torch import nn

from fedcore.config import ExperimentConfig
from fedcore.data.federated import FederatedDataset, GroundTruth
from fedcore.engine.store import ClientData, TensorStore
from fedcore.engine.types import RunContext


def tiny_fed(values=(0, 51, 102, 153, 204, 255), parts=((0, 1, 2), (3, 4, 5))) -> FederatedDataset:
    """Six 1x1x1 'images' whose [0, 1] values are 0, .2, .4, .6, .8, 1; two clients of three points."""
    x = torch.tensor(values, dtype=torch.uint8).view(-1, 1, 1, 1)
    y = torch.tensor([0, 1, 0, 1, 0, 1])
    truth = GroundTruth(
        y_true=np.array([0, 0, 0, 1, 1, 1]), is_noisy_sample=np.array([0, 1, 0, 0, 1, 0], bool),
        is_noisy_client=np.array([True, True]), noise_type=["symmetric"] * 2,
        target_rate=np.array([1 / 3, 1 / 3]), realized_rate=np.array([1 / 3, 1 / 3]),
    )
    meta = {"name": "tiny", "task": "single", "num_classes": 2, "mean": [0.0], "std": [1.0], "in_shape": [1, 1, 1]}
    return FederatedDataset(x, y, x.clone(), y.clone(), [np.array(p) for p in parts], truth, meta)


def tiny_context(fed: FederatedDataset, cfg: ExperimentConfig | None = None, seed: int = 0) -> RunContext:
    store = TensorStore(fed.x_train, fed.meta["mean"], fed.meta["std"], torch.device("cpu"))
    clients = [ClientData(c, store, p, fed.y_train[torch.as_tensor(p)]) for c, p in enumerate(fed.client_indices)]
    return RunContext(cfg=cfg or ExperimentConfig(), view=fed.view(), store=store, clients=clients,
                      device=torch.device("cpu"), seed=seed)


class Scalar(nn.Module):
    """w (and optionally a personal p): forward gives two logits so evaluation works."""

    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.zeros(()))
        self.p = nn.Parameter(torch.zeros(()))

    def forward(self, x):
        z = x.flatten(1) * self.w
        return torch.cat([z, -z], dim=1)
