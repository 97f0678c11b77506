"""A chunk's batches drawn up front: the same positions, padding and inputs as step by step."""

import numpy as np
import pytest
import torch

from fedcore.engine.drawn import Drawn, schedule
from fedcore.engine.store import ClientData, TensorStore


def test_schedule_lays_out_each_clients_batches_by_hand():
    # Prepare: client 0 (rows 0..4 of the fields) takes 3 steps, client 1 (rows 5..7) takes 1
    its = [iter([torch.tensor([2, 0, 1]), torch.tensor([4, 3]), torch.tensor([1, 2, 0])]), iter([torch.tensor([1, 2])])]

    # Execute
    pos, mask, widths = schedule(its, [3, 1], [0, 5], batch_size=3, device=torch.device("cpu"))

    # Assert: positions offset into the fields; short batches padded with the client's first row, masked
    assert pos.tolist() == [[[2, 0, 1], [6, 7, 5]], [[4, 3, 0], [5, 5, 5]], [[1, 2, 0], [5, 5, 5]]]
    assert mask.tolist() == [[[True] * 3, [True, True, False]], [[True, True, False], [False] * 3],
                             [[True] * 3, [False] * 3]]
    assert widths == [3, 2, 3]  # each step is padded to its longest batch only


def test_schedule_refuses_a_client_whose_batch_count_is_not_the_predicted_one():
    for its, steps in (([iter([torch.tensor([0, 1])])], [2]), ([iter([torch.tensor([0]), torch.tensor([1])])], [1])):
        with pytest.raises(RuntimeError, match="predicted"):
            schedule(its, steps, [0], batch_size=2, device=torch.device("cpu"))


@pytest.mark.parametrize("block", [1 << 30, 1])  # the whole round at once, or one step at a time
def test_drawn_batches_equal_the_data_gathered_step_by_step(monkeypatch, block):
    """Each step's inputs and labels for its training rows, in blocks of any size."""
    g = torch.Generator().manual_seed(0)
    store = TensorStore(torch.randint(0, 256, (30, 1, 2, 2), generator=g, dtype=torch.uint8), [0.5], [0.25],
                        torch.device("cpu"))
    clients = [ClientData(0, store, np.arange(3, 20), torch.arange(17) % 3),
               ClientData(1, store, np.arange(20, 26), torch.arange(6) % 3)]
    batches = [list(c.batches(4, torch.Generator().manual_seed(c.cid), epochs=1)) for c in clients]
    fields = {"y": torch.cat([c.labels for c in clients]), "__idx": torch.cat([c.indices for c in clients])}
    monkeypatch.setattr("fedcore.engine.drawn.BLOCK_BYTES", block)
    d = Drawn(fields, store, [iter(b) for b in batches], [5, 2], [0, 17], 4, torch.float32, store.device)
    for s in range(5):
        k = 2 if s < 2 else 1
        got, w = d.batch(s, k)
        for r in range(k):
            pos = batches[r][s]
            n = len(pos)
            assert torch.equal(got["x"][r, :n], clients[r].x(pos))
            assert torch.equal(got["y"][r, :n], clients[r].labels[pos])
            assert w[r].tolist() == [1.0] * n + [0.0] * (w.shape[1] - n)
        assert w.shape[1] == max(len(batches[r][s]) for r in range(k))
