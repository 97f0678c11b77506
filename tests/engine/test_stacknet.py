"""StackedNet: row k of the stacked call is model k on input k, grouped layers or vmap alike."""

import pytest
import torch
from torch import nn

from fedcore.config import ModelConfig
from fedcore.engine.stacknet import StackedNet
from fedcore.models import build_model

CASES = [("mlp", {}, (1, 8, 8)), ("cnn", {}, (1, 8, 8)), ("cnn", {"norm": "none"}, (3, 16, 16)),
         ("cnn", {"norm": "group"}, (3, 32, 32))]


def _clients(name, params, shape, k=3):
    models = [build_model(ModelConfig(name=name, width=16, params=params), shape, 10, seed=s) for s in range(k)]
    stacked = {n: torch.stack([m.state_dict()[n] for m in models]) for n in models[0].state_dict()}
    return models, stacked


@pytest.mark.parametrize("name, params, shape", CASES)
@pytest.mark.parametrize("grouped", [True, False])
def test_stacked_call_equals_each_client_model(name, params, shape, grouped):
    models, stacked = _clients(name, params, shape)
    x = torch.randn(len(models), 5, *shape, generator=torch.Generator().manual_seed(0))
    net = StackedNet(models[0], grouped=grouped)
    assert net.grouped is grouped  # MLP and SmallCNN name their parts, so both paths are exercised
    with torch.no_grad():
        out, z = net(stacked, x), net.features(stacked, x)
        head = net.head(stacked, z)
    for k, m in enumerate(models):
        with torch.no_grad():
            zk = m.features(x[k])
            torch.testing.assert_close(z[k], zk, rtol=0, atol=1e-6)
            torch.testing.assert_close(out[k], m(x[k]), rtol=0, atol=1e-6)
            torch.testing.assert_close(head[k], m.head(zk), rtol=0, atol=1e-6)


def test_gradients_reach_each_row_like_each_client_model():
    models, stacked = _clients("cnn", {}, (1, 8, 8))
    leaves = {n: t.clone().requires_grad_() for n, t in stacked.items()}
    x = torch.randn(3, 4, 1, 8, 8, generator=torch.Generator().manual_seed(1))
    y = torch.tensor([1, 2, 3, 4])
    out = StackedNet(models[0])(leaves, x)
    loss = sum(nn.functional.cross_entropy(out[k], y) for k in range(3))
    grads = dict(zip(leaves, torch.autograd.grad(loss, list(leaves.values())), strict=True))
    for k, m in enumerate(models):
        m.zero_grad()
        nn.functional.cross_entropy(m(x[k]), y).backward()
        for n, p in m.named_parameters():
            torch.testing.assert_close(grads[n][k], p.grad, rtol=1e-5, atol=1e-6)


def test_a_model_without_named_parts_or_with_unknown_layers_uses_vmap():
    class Odd(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(4, 2)

        def forward(self, x):
            return self.lin(x).sin()

    assert not StackedNet(Odd()).grouped
    mlp = build_model(ModelConfig(name="mlp", width=4), (1, 2, 2), 3)
    mlp.backbone.append(nn.Softplus())  # a layer the grouped path does not know
    assert not StackedNet(mlp).grouped
