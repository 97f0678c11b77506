"""Shared pytest setup. Fixture modules live in tests/fixtures/ and are loaded as plugins."""

import os

import pytest
import torch

# Tests run tiny models: intra-op threads only add contention on small CI machines.
# Subprocesses (kfp.local tasks, servers) inherit the env var.
os.environ.setdefault("OMP_NUM_THREADS", "1")
torch.set_num_threads(1)

pytest_plugins = [
    "tests.fixtures.common",
    "tests.fixtures.s3",
    "tests.fixtures.mlflow_server",
    "tests.fixtures.auth_server",
]


@pytest.fixture(autouse=True)
def _one_torch_thread():
    """Every test starts on one intra-op thread, whatever an earlier test (e.g. a run with
    train.threads) left behind."""
    torch.set_num_threads(1)
    yield
