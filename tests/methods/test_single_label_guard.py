"""Single-label methods refuse multi-label data with one line that names them."""

import pytest
import torch

from fedcore.config import ExperimentConfig
from fedcore.data.build import build_federated_dataset
from fedcore.errors import ConfigError
from fedcore.methods.registry import available_methods, build_method
from fedcore.run import make_context

MULTI_LABEL_OK = {"fedavg", "fedprox", "fedharmony"}


def mosaic_cfg(method: str) -> ExperimentConfig:
    return ExperimentConfig.model_validate({
        "data": {"name": "digits_mosaic", "params": {"n_train": 200, "n_test": 50, "groups": 4}},
        "partition": {"kind": "natural", "num_clients": 4},
        "noise": {"type": "none"},
        "model": {"name": "mlp", "width": 16},
        "train": {"rounds": 1, "device": "cpu"},
        "method": {"name": method},
    })


@pytest.fixture(scope="module")
def fed():
    return build_federated_dataset(mosaic_cfg("fedavg"))


@pytest.mark.parametrize("name", sorted(set(available_methods()) - MULTI_LABEL_OK))
def test_single_label_method_names_itself_when_given_multi_label_data(fed, name):
    cfg = mosaic_cfg(name)
    with pytest.raises(ConfigError, match=f"method '{name}' is single-label"):
        build_method(cfg).init(make_context(cfg, fed, torch.device("cpu")))
