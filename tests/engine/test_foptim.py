"""Stacked SGD/Adam: each row follows torch.optim exactly, rows never interact, the stack may shrink."""

import pytest
import torch

from fedcore.engine.foptim import StackedAdam, StackedSGD, make_stacked_optimizer


def _grads(step, shapes, k):
    g = torch.Generator().manual_seed(100 + step)
    return [torch.randn(k, *s, generator=g) for s in shapes]


def _run_torch(kind, params, grad_rows, **hp):
    """torch.optim on one client's tensors, fed the given gradients step by step."""
    ps = [p.clone().requires_grad_() for p in params]
    opt = torch.optim.Adam(ps, **hp) if kind == "adam" else torch.optim.SGD(ps, **hp)
    for gs in grad_rows:
        for p, g in zip(ps, gs, strict=True):
            p.grad = None if g is None else g.clone()
        opt.step()
    return [p.detach() for p in ps]


@pytest.mark.parametrize("kind, hp", [
    ("sgd", {"lr": 0.05, "momentum": 0.9, "weight_decay": 5e-4}),
    ("sgd", {"lr": 0.1, "momentum": 0.0, "weight_decay": 0.0}),
    ("adam", {"lr": 3e-3, "weight_decay": 2e-2}),
    ("adam", {"lr": 1e-3, "weight_decay": 0.0}),
])
def test_every_row_matches_torch_optim_bitwise(kind, hp):
    k, shapes = 4, [(3, 5), (5,)]
    gen = torch.Generator().manual_seed(0)
    start = [torch.randn(k, *s, generator=gen) for s in shapes]
    stacked = [t.clone() for t in start]
    opt = make_stacked_optimizer(kind, hp["lr"], hp.get("momentum", 0.0), hp["weight_decay"])
    grads = [_grads(s, shapes, k) for s in range(6)]
    for gs in grads:
        opt.step(stacked, [g.clone() for g in gs])
    for r in range(k):
        want = _run_torch(kind, [t[r] for t in start], [[g[r] for g in gs] for gs in grads], **hp)
        for got, w in zip(stacked, want, strict=True):
            assert torch.equal(got[r], w)


@pytest.mark.parametrize("opt", [StackedSGD(0.05, 0.9, 5e-4), StackedAdam(3e-3, weight_decay=1e-2)])
def test_a_shrinking_stack_freezes_the_dropped_rows(opt):
    """Rows 0..k-1 train each step; a row past the end keeps its params and optimizer state, so a
    client with 2 steps ends where it would alone, and the others are not disturbed."""
    shapes, steps = [(2, 3)], [5, 5, 2]
    start = [torch.randn(3, *s, generator=torch.Generator().manual_seed(1)) for s in shapes]
    stacked = [t.clone() for t in start]
    grads = [_grads(s, shapes, 3) for s in range(5)]
    for s, gs in enumerate(grads):
        k = sum(1 for n in steps if n > s)
        opt.step([t[:k] for t in stacked], [g[:k].clone() for g in gs])
    kind = "adam" if isinstance(opt, StackedAdam) else "sgd"
    hp = ({"lr": 3e-3, "weight_decay": 1e-2} if kind == "adam" else {"lr": 0.05, "momentum": 0.9, "weight_decay": 5e-4})
    for r, n in enumerate(steps):
        want = _run_torch(kind, [t[r] for t in start], [[g[r] for g in gs] for gs in grads[:n]], **hp)
        assert torch.equal(stacked[0][r], want[0])


def test_a_tensor_without_gradient_is_skipped_like_torch_optim():
    shapes = [(2,), (3,)]
    start = [torch.ones(2, *s) for s in shapes]
    stacked = [t.clone() for t in start]
    opt = StackedSGD(0.1, momentum=0.9, weight_decay=0.1)
    g = [torch.full((2, 2), 0.5), torch.full((2, 3), 2.0)]
    opt.step(stacked, [g[0].clone(), None])  # the second tensor gets its first gradient later
    opt.step(stacked, [g[0].clone(), g[1].clone()])
    want = _run_torch("sgd", [t[0] for t in start], [[g[0][0], None], [g[0][0], g[1][0]]],
                      lr=0.1, momentum=0.9, weight_decay=0.1)
    assert torch.equal(stacked[0][0], want[0]) and torch.equal(stacked[1][0], want[1])
    # by hand for the second tensor: one plain step (its momentum buffer starts at its first gradient)
    assert torch.allclose(stacked[1][0], torch.full((3,), 1.0 - 0.1 * (2.0 + 0.1)))


def test_adam_rows_match_torch_bitwise_where_gradients_are_tiny():
    """The regime where batched and sequential Adam runs drift apart (docs/performance.md, Equality):
    gradients near eps, of flipping sign, or exactly zero, over many steps. Each row still ends
    bit for bit where torch.optim.Adam takes it, so that drift is not the optimizer's maths but
    float rounding of the gradients, which Adam's normalization amplifies there."""
    k, shape, steps = 3, (4, 6), 20
    gen = torch.Generator().manual_seed(7)
    start = [torch.randn(k, *shape, generator=gen)]
    scale = torch.logspace(-10, -3, shape[1])  # per column, from far below eps to ordinary
    grads = []
    for s in range(steps):
        g = torch.randn(k, *shape, generator=gen) * scale
        g[:, 0] = 0.0 if s % 3 else g[:, 0]  # a weight whose gradient is mostly exactly zero
        grads.append([g])
    stacked = [t.clone() for t in start]
    opt = StackedAdam(3e-3, weight_decay=1e-4)
    for gs in grads:
        opt.step(stacked, [g.clone() for g in gs])
    for r in range(k):
        want = _run_torch("adam", [start[0][r]], [[gs[0][r]] for gs in grads], lr=3e-3, weight_decay=1e-4)
        assert torch.equal(stacked[0][r], want[0])


def test_fused_adam_rows_follow_torch_fused_adam_within_its_rounding():
    """train.fused_adam: each row against torch.optim.Adam(fused=True) on that row alone, with the stack
    shrinking and a tensor without gradient on one step. The fused kernel is not bitwise across
    tensor shapes, so the bound is a few float32 ulps of the weights, far under one step's size (lr)."""
    k, shapes, steps = 3, [(7, 5), (5,), (130,)], [8, 8, 3]
    gen = torch.Generator().manual_seed(2)
    start = [torch.randn(k, *s, generator=gen) for s in shapes]
    stacked = [t.clone() for t in start]
    opt = make_stacked_optimizer("adam", 1e-3, 0.0, 1e-2, fused=True)
    grads = [_grads(s, shapes, k) for s in range(8)]
    grads[4][1] = None  # the bias gets no gradient on step 4, as an unused layer would
    for s, gs in enumerate(grads):
        n = sum(1 for m in steps if m > s)
        opt.step([t[:n] for t in stacked], [None if g is None else g[:n].clone() for g in gs])
    moved = 0.0
    for r, n in enumerate(steps):
        rows = [[None if g is None else g[r] for g in gs] for gs in grads[:n]]
        want = _run_torch("adam", [t[r] for t in start], rows, lr=1e-3, weight_decay=1e-2, fused=True)
        for got, w, t0 in zip(stacked, want, start, strict=True):
            assert torch.allclose(got[r], w, rtol=0, atol=1e-6)
            moved = max(moved, float((w - t0[r]).abs().max()))
    assert moved > 1e-3  # the rows did train, so the bound is not met by standing still
    plain = make_stacked_optimizer("adam", 1e-3, 0.0, 1e-2)
    assert isinstance(opt, StackedAdam) and opt.fused and not plain.fused


def test_train_fused_adam_reaches_the_sequential_optimizer():
    from fedcore.engine.types import OptimSpec
    from fedcore.registries import load_config
    from fedcore.train.local import make_optimizer

    w = [torch.zeros(3, requires_grad=True)]
    adam = ["train.optimizer=adam"]
    on = OptimSpec.from_train(load_config("configs/quickstart.yaml", [*adam, "train.fused_adam=true"]).train)
    off = OptimSpec.from_train(load_config("configs/quickstart.yaml", adam).train)
    assert make_optimizer(w, on).defaults["fused"] is True and not make_optimizer(w, off).defaults["fused"]
