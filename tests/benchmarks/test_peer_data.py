"""benchmarks/peer_data.py: the work handed to Flower is the artifact's, client by client, bit for bit
(no flwr needed)."""

from __future__ import annotations

import numpy as np
import torch

from fedcore.data.build import build_federated_dataset
from fedcore.data.federated import FederatedDataset
from fedcore.registries import load_config
from fedcore.run import make_context
from tests.benchmarks.loader import bench_module


def _peer_data():
    return bench_module("peer_data")


def test_export_reproduces_the_artifacts_partition_noisy_labels_and_inputs(tmp_path):
    peer_data = _peer_data()
    cfg = load_config("configs/quickstart.yaml", ["partition.num_clients=7"])  # Dirichlet sizes, 70% noisy
    fed = FederatedDataset.load(build_federated_dataset(cfg).save(tmp_path / "data"))  # the artifact as stored
    init = {"w": torch.arange(6.0).view(2, 3)}
    data = peer_data.load(peer_data.export(fed, tmp_path / "peer.npz", init))

    assert len(data["clients"]) == fed.num_clients
    assert len({len(i) for i in fed.client_indices}) > 1  # unequal sizes: the split points matter
    ctx = make_context(cfg, fed, torch.device("cpu"))
    for cid, idx in enumerate(fed.client_indices):
        np.testing.assert_array_equal(data["clients"][cid], np.asarray(idx))
        x, y = peer_data.client_tensors(data, cid)
        assert torch.equal(y, ctx.clients[cid].labels)  # the working (noisy) labels, not the clean ones
        assert torch.equal(x, ctx.store.get(torch.as_tensor(idx)))  # normalized as fedcore's store serves them
    assert not np.array_equal(data["y_train"], fed.truth.y_true)  # the noisy labels went out, not the true ones
    np.testing.assert_array_equal(data["y_test"], fed.y_test.numpy())
    assert str(data["data_hash"]) == fed.meta["data_hash"]
    np.testing.assert_array_equal(data["init"]["w"], init["w"].numpy())
    assert not any("clean" in k or "noisy" in k for k in data)  # no ground truth in the export
