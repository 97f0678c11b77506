"""Models: every one is a `FedModel` with `features(x)` and `head(z)`; built by name via `build_model`."""

from fedcore.models.base import FedModel, register_model
from fedcore.models.build import available_models, build_model
from fedcore.models.device import resolve_device
from fedcore.models.weights import load_weights

__all__ = ["FedModel", "available_models", "build_model", "load_weights", "register_model", "resolve_device"]
