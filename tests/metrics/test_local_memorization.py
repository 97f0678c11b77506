"""train/local_memorization on a constructed case: a 'local model' that always predicts one class."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from fedcore.data.build import build
from fedcore.engine.store import TensorStore
from fedcore.engine.types import ClientUpdate
from fedcore.metrics.scoring import LocalMemorization
from fedcore.registries import load_config


class Constant(torch.nn.Module):
    def __init__(self, cls: int) -> None:
        super().__init__()
        self.cls = cls

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.one_hot(torch.full((len(x),), self.cls), 10).float()


def test_pooled_share_of_noisy_labels_the_local_models_predict():
    fed = build(load_config("configs/quickstart.yaml", ["partition.num_clients=4"]))
    store = TensorStore(fed.x_train, fed.meta["mean"], fed.meta["std"], torch.device("cpu"))
    score = LocalMemorization(fed, torch.device("cpu"), store, batch_size=7)
    # Client c's "local model" predicts class c; client 3 sent no params (e.g. a stats-only stage).
    updates = [ClientUpdate(cid=c, num_examples=1, params={"cls": torch.tensor(c)}) for c in range(3)]
    updates.append(ClientUpdate(cid=3, num_examples=1, params=None))
    out = score(lambda p: Constant(int(p["cls"])), updates)
    y, noisy = fed.y_train.numpy(), fed.truth.is_noisy_sample
    hits = total = 0
    for c in range(3):
        idx = np.asarray(fed.client_indices[c])[noisy[fed.client_indices[c]]]
        hits, total = hits + int((y[idx] == c).sum()), total + len(idx)
    assert total > 0 and out["train/local_memorization"] == pytest.approx(hits / total)
    assert score(lambda p: Constant(0), updates[3:]) == {}
