"""Detector views scored on the metrics side: F1 split by noise-majority (client, label) groups,
and the small-loss probe on any run's global model (train.loss_probe)."""

import numpy as np
import pytest
import torch
from torch import nn

from fedcore.data.federated import FederatedDataset, GroundTruth
from fedcore.engine.store import TensorStore
from fedcore.engine.types import Estimates
from fedcore.metrics import noise_majority, split_prf
from fedcore.metrics.probe import LossProbe
from fedcore.metrics.scoring import Evaluator, Scorer
from tests.engine.helpers import tiny_fed


def test_noise_majority_groups_by_hand():
    labels = np.array([0, 0, 0, 1, 1, 2, 2, 2, 2])
    noisy = np.array([1, 1, 0, 0, 1, 1, 0, 0, 0], bool)
    # label 0: 2 noisy vs 1 clean (majority); label 1: 1 vs 1 (a tie is not a majority); label 2: 1 vs 3
    np.testing.assert_array_equal(noise_majority(labels, noisy), [1, 1, 1, 0, 0, 0, 0, 0, 0])


def test_split_prf_by_hand():
    majority = np.array([1, 1, 1, 0, 0, 0, 0, 0, 0], bool)
    true = np.array([1, 1, 0, 0, 1, 1, 0, 0, 0], bool)
    pred = np.array([1, 0, 1, 1, 1, 1, 0, 0, 0], bool)
    out = split_prf(pred, true, majority)
    # majority: pred [1,0,1] vs true [1,1,0] -> tp 1: P 1/2, R 1/2, F1 1/2
    # minority: pred [1,1,1,0,0,0] vs true [0,1,1,0,0,0] -> tp 2: P 2/3, R 1, F1 0.8
    assert out == pytest.approx({"precision_majority": 0.5, "recall_majority": 0.5, "f1_majority": 0.5,
                                 "precision_minority": 2 / 3, "recall_minority": 1.0, "f1_minority": 0.8})


def test_scorer_splits_detection_by_noise_majority_groups():
    fed = tiny_fed()  # client 0: labels [0,1,0], noisy [0,1,0]; client 1: labels [1,0,1], noisy [0,1,0]
    scorer = Scorer(fed)
    np.testing.assert_array_equal(np.concatenate(scorer.majority), [0, 1, 0, 0, 1, 0])  # each noisy label is alone
    out = scorer(Estimates(sample_noisy={"main": {0: np.array([0, 1, 1], bool), 1: np.array([0, 0, 0], bool)}}), 1)
    # majority samples: pred [1, 0] vs true [1, 1]; minority: pred [0, 1, 0, 0] vs true all clean
    assert out["detect/sample_f1_majority"] == pytest.approx(2 / 3)
    assert out["detect/sample_recall_majority"] == 0.5 and out["detect/sample_precision_majority"] == 1.0
    assert out["detect/sample_f1_minority"] == 0.0 and out["detect/sample_precision_minority"] == 0.0


class Lookup(nn.Module):
    """Logits by sample: the input is the sample's index (1x1x1 'image' value idx / 255)."""

    def __init__(self, table: torch.Tensor) -> None:
        super().__init__()
        self.table = table

    def forward(self, x):
        return self.table[torch.round(x.flatten() * 255).long()]


def probe_fed(n_per=20):
    """Two clients of n_per samples, labels 0/1; the last quarter of each client is noisy."""
    n = 2 * n_per
    x = torch.arange(n, dtype=torch.uint8).view(-1, 1, 1, 1)
    y = torch.tensor([i % 2 for i in range(n)])
    noisy = np.array([(i % n_per) >= 3 * n_per // 4 for i in range(n)])
    truth = GroundTruth(y_true=np.where(noisy, 1 - y.numpy(), y.numpy()), is_noisy_sample=noisy,
                        is_noisy_client=np.array([True, True]), noise_type=["symmetric"] * 2,
                        target_rate=np.full(2, 0.25), realized_rate=np.full(2, 0.25))
    meta = {"name": "tiny", "task": "single", "num_classes": 2, "mean": [0.0], "std": [1.0], "in_shape": [1, 1, 1]}
    parts = [np.arange(n_per), np.arange(n_per, n)]
    return FederatedDataset(x, y, x[:4].clone(), y[:4].clone(), parts, truth, meta), y, noisy


def test_loss_probe_flags_the_high_loss_samples_and_is_scored_like_a_detector():
    fed, y, noisy = probe_fed()
    gen = torch.Generator().manual_seed(0)
    # confident in the given label where clean, in the other label where noisy (with some spread)
    margin = 3.0 + torch.rand(len(y), generator=gen)
    sign = torch.where(torch.as_tensor(noisy), -1.0, 1.0)
    logits = torch.zeros(len(y), 2)
    logits[torch.arange(len(y)), y] = sign * margin
    probe = LossProbe(fed, torch.device("cpu"), seed=0)
    flags = probe.flags(lambda idx: logits[idx], rnd=1)
    np.testing.assert_array_equal(np.concatenate([flags[0], flags[1]]), noisy)

    store = TensorStore(fed.x_train, fed.meta["mean"], fed.meta["std"], torch.device("cpu"))
    ev = Evaluator(fed, torch.device("cpu"), store, memorization=False, loss_probe=True, seed=0)
    out = ev(Lookup(logits), 1)  # the test inputs are samples 0-3 again
    assert out["detect/loss_probe/sample_f1"] == 1.0 and out["detect/loss_probe/sample_f1_pooled"] == 1.0
    assert out["detect/loss_probe/sample_f1_majority"] == 0.0  # no (client, label) group is mostly noise
    assert out["detect/loss_probe/sample_f1_minority"] == 1.0
    off = Evaluator(fed, torch.device("cpu"), store, memorization=False)
    assert not any(k.startswith("detect/") for k in off(Lookup(logits), 1))
