"""benchmarks/roofline.py counts a round's FLOPs with torch's FlopCounterMode: for one local step of
the MLP that count must equal the hand count of its GEMMs, on both executors (no padding here)."""

from __future__ import annotations

import pytest
import torch

from fedcore.data.build import build
from fedcore.registries import load_config
from tests.benchmarks.loader import bench_module

roofline = bench_module("roofline")


def test_hand_count_of_one_mlp_step():
    # 64 -> 128 -> 128 -> 10 on 32 samples: forward 2*32*(8192 + 16384 + 1280), the weight gradients as
    # much again, the input gradients of the last two layers 2*32*(16384 + 1280).
    assert roofline.mlp_step_flops(64, 128, 10, 32) == 2 * 2 * 32 * 25856 + 2 * 32 * 17664


@pytest.mark.parametrize("executor", ["sequential", "batched"])
def test_counted_flops_of_one_mlp_step_per_client_equal_the_hand_count(executor):
    cfg = load_config("configs/quickstart.yaml", [
        "partition.num_clients=3", "partition.kind=iid", "noise.type=none", "train.rounds=1", "train.local_steps=1",
        "train.batch_size=32", "model.name=mlp", "model.width=128", "train.device=cpu",
        "train.cohort_chunk=4"])  # a set chunk: the auto one probes one sample's forward (counted FLOPs too)
    fed = build(cfg)
    assert all(len(idx) >= 32 for idx in fed.client_indices)
    in_dim = int(torch.tensor(fed.meta["in_shape"]).prod())
    counted = roofline.count_flops(lambda: roofline.engine_run(cfg, fed, torch.device("cpu"), executor))
    assert counted == 3 * roofline.mlp_step_flops(in_dim, 128, 10, 32)
