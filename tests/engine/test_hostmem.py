"""Allocation-side speed-ups change where memory comes from, never a value."""

import ctypes
import platform
import subprocess
import sys

import pytest
import torch

from fedcore.engine.foptim import StackedAdam
from fedcore.engine.hostmem import OPT_OUT, keep_freed_memory
from fedcore.engine.store import TensorStore


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="mallopt is glibc's")
def test_keep_freed_memory_sets_glibc_thresholds_and_honours_the_opt_out():
    code = "from fedcore.engine.hostmem import keep_freed_memory as k; print(k())"
    on = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    off = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={**__import__("os").environ, OPT_OUT: "0"})
    assert (on.stdout.strip(), off.stdout.strip()) == ("True", "False")


def test_keep_freed_memory_is_false_without_mallopt(monkeypatch):
    class NoMallopt:
        def __init__(self, name):
            pass

    monkeypatch.setattr(ctypes, "CDLL", NoMallopt)
    keep_freed_memory.cache_clear()  # an earlier run in this process has its answer cached
    try:
        assert keep_freed_memory() is False
    finally:
        keep_freed_memory.cache_clear()


def test_store_get_normalizes_in_place_with_the_same_values():
    g = torch.Generator().manual_seed(0)
    x = torch.randint(0, 256, (50, 3, 8, 8), dtype=torch.uint8, generator=g)
    store = TensorStore(x, [0.4914, 0.4822, 0.4465], [0.247, 0.243, 0.261], torch.device("cpu"))
    idx = torch.randperm(50, generator=g)[:17]
    assert torch.equal(store.get(idx), store.normalize(store.raw(idx)))


def test_stacked_adam_reuses_its_denominator_buffer():
    p = torch.randn(3, 5, 4)
    opt = StackedAdam(1e-3)
    opt.step([p], [torch.randn(3, 5, 4)])
    buf = opt.state[0]["denom"]
    ptr = buf.data_ptr()
    opt.step([p[:2]], [torch.randn(2, 5, 4)])  # a shrunk stack writes into the first rows
    assert opt.state[0]["denom"].data_ptr() == ptr
    v = opt.state[0]["exp_avg_sq"][:2]
    assert torch.equal(buf[:2], v.sqrt() / (1 - 0.999**2) ** 0.5 + 1e-8)
