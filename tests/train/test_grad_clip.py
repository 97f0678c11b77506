"""train.grad_clip: each local step's gradient is clipped to a global L2 norm, per client."""

import pytest
import torch

from fedcore.engine.batched import BatchedExecutor
from fedcore.engine.executor import SequentialExecutor
from fedcore.engine.foptim import clip_rows_
from tests.engine.test_batched import SIZES, assert_same_updates, cfg_for, make_fed, round_updates


def test_rows_are_clipped_to_their_own_global_norm():
    g1 = torch.tensor([[3.0, 0.0], [0.3, 0.0]])  # row norms over both tensors: 5 and 0.5
    g2 = torch.tensor([[[4.0]], [[0.4]]])
    norms = clip_rows_([g1, None, g2], max_norm=1.0)
    assert norms.tolist() == pytest.approx([5.0, 0.5])
    scale = 1.0 / (5.0 + 1e-6)
    assert g1.flatten().tolist() == pytest.approx([3.0 * scale, 0.0, 0.3, 0.0])  # row 1 is under the bound: untouched
    assert g2.flatten().tolist() == pytest.approx([4.0 * scale, 0.4])
    assert clip_rows_([None], 1.0) is None


def test_clipping_matches_torch_and_bounds_the_update():
    """One SGD step without momentum moves the weights by lr * clipped gradient: at most lr * max_norm."""
    cfg, fed = cfg_for(lr=1.0, momentum=0.0, weight_decay=0.0, local_steps=1, grad_clip=0.01), make_fed(SIZES)
    free = cfg_for(lr=1.0, momentum=0.0, weight_decay=0.0, local_steps=1)
    start = round_updates(cfg_for(lr=1e-12, momentum=0.0, weight_decay=0.0, local_steps=1), fed, SequentialExecutor())
    clipped = round_updates(cfg, fed, SequentialExecutor())
    unclipped = round_updates(free, fed, SequentialExecutor())
    for s, c, u in zip(start, clipped, unclipped, strict=True):
        step = torch.sqrt(sum(((c.params[k] - s.params[k]) ** 2).sum() for k in s.params))
        free_step = torch.sqrt(sum(((u.params[k] - s.params[k]) ** 2).sum() for k in s.params))
        assert float(step) <= 0.01 * (1 + 1e-4)
        assert float(free_step) > 0.01  # the bound was binding
    assert_same_updates(round_updates(cfg, fed, BatchedExecutor(chunk=64)), clipped)


@pytest.mark.parametrize("train", [{"grad_clip": 0.5}, {"grad_clip": 0.5, "optimizer": "adam", "lr": 3e-3}])
def test_the_batched_executor_clips_like_the_sequential_one(train):
    cfg, fed = cfg_for(**train), make_fed(SIZES)
    assert_same_updates(round_updates(cfg, fed, BatchedExecutor(chunk=64)), round_updates(cfg, fed,
                                                                                          SequentialExecutor()))
