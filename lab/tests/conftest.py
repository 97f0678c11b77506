"""The lab's tests run the library on tiny models, as the product's tests do (tests/conftest.py):
one intra-op thread, since more only add contention on small CI machines and subprocesses inherit it."""

import os

import pytest
import torch

os.environ.setdefault("OMP_NUM_THREADS", "1")
torch.set_num_threads(1)


@pytest.fixture(autouse=True)
def _one_torch_thread():
    """Every test starts on one intra-op thread, whatever an earlier test left behind."""
    torch.set_num_threads(1)
    yield
