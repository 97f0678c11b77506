"""Co-teaching's forget rate: a constant by default, the configured noise rate on request."""

import pytest

from fedcore.config import ExperimentConfig
from fedcore.errors import ConfigError
from fedcore.methods.registry import build_method


def cfg(**params) -> ExperimentConfig:
    return ExperimentConfig.model_validate({
        "noise": {"type": "symmetric", "noisy_client_fraction": 1.0, "rate": {"kind": "fixed", "value": 0.4}},
        "method": {"name": "coteaching", "params": params},
    })


def test_default_forget_rate_does_not_read_the_noise_rate():
    assert build_method(cfg()).forget_rate() == pytest.approx(0.2)


def test_noise_rate_keeps_the_older_behaviour_and_a_number_is_taken_as_given():
    assert build_method(cfg(forget_rate="noise_rate")).forget_rate() == pytest.approx(0.4)
    assert build_method(cfg(forget_rate=0.35)).forget_rate() == pytest.approx(0.35)


@pytest.mark.parametrize("bad", [1.0, -0.1, "half"])
def test_bad_forget_rate_is_a_config_error(bad):
    with pytest.raises(ConfigError, match="forget_rate"):
        build_method(cfg(forget_rate=bad))
