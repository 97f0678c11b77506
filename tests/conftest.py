"""Shared pytest setup. Fixture modules live in tests/fixtures/ and are loaded as plugins."""

import os

import pytest
import torch

# Tests run tiny models: intra-op threads only add contention on small CI machines.
# Subprocesses (kfp.local tasks, servers) inherit the env var.
os.environ.setdefault("OMP_NUM_THREADS", "1")
# pytest-xdist's workers start with COLUMNS=80, which the CLI's consoles (made at import) would take over the
# piped width the tests read, as a run without xdist does (fedcore/cli/console.py).
if os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ.pop("COLUMNS", None)
torch.set_num_threads(1)

pytest_plugins = [
    "tests.fixtures.common",
    "tests.fixtures.s3",
    "tests.fixtures.mlflow_server",
    "tests.fixtures.auth_server",
]


@pytest.hookimpl(optionalhook=True)  # a hook of pytest-xdist, which `make test` runs on
def pytest_xdist_make_scheduler(config, log):
    """--dist loadfile, with the container tests as one file: they share the image build and the stack's
    fixed ports. A test module stays on one worker, so its module fixtures (a bench pipeline, a folded
    sweep) are built once. (xdist's own loadgroup marks cannot do this under pytest 9.2, which no longer
    lets xdist rename a test's node id.)"""
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling  # only where xdist runs the session

    class ContainerTestsTogether(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            module = super()._split_scope(nodeid)
            return "tests/container" if module.startswith("tests/container/") else module

    return ContainerTestsTogether(config, log)


@pytest.fixture(autouse=True)
def _one_torch_thread():
    """Every test starts on one intra-op thread, whatever an earlier test (e.g. a run with
    train.threads) left behind."""
    torch.set_num_threads(1)
    yield
