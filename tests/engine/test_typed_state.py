"""A method's typed client state through the store and a checkpoint: plain dicts on the way in,
the same dataclass on the way out."""

from __future__ import annotations

import io
from dataclasses import dataclass, field

import numpy as np
import pytest
import torch

from fedcore.engine.checkpoint import safe_torch_load
from fedcore.engine.store import plain_state, typed_state
from fedcore.errors import ArtifactError


@dataclass
class Inner:
    mu: np.ndarray
    pi0: float


@dataclass
class State:
    steps: int = 0
    inner: Inner | None = None
    ema: dict[str, torch.Tensor] = field(default_factory=dict)
    labels: torch.Tensor | None = None


def test_typed_state_round_trips_through_a_weights_only_checkpoint():
    st = State(steps=3, inner=Inner(np.arange(4.0), 0.25), ema={"w": torch.ones(2)}, labels=torch.tensor([1, 0]))
    plain = plain_state(st)
    assert plain == {"steps": 3, "inner": {"mu": plain["inner"]["mu"], "pi0": 0.25}, "ema": plain["ema"],
                     "labels": plain["labels"]}
    assert plain["ema"]["w"] is st.ema["w"]  # nothing copied
    buf = io.BytesIO()
    torch.save([plain], buf)
    back = typed_state(State, safe_torch_load(buf.getvalue(), "test")[0])
    assert isinstance(back.inner, Inner) and back.inner.pi0 == 0.25 and back.steps == 3
    np.testing.assert_array_equal(back.inner.mu, st.inner.mu)
    assert torch.equal(back.ema["w"], st.ema["w"]) and torch.equal(back.labels, st.labels)


def test_an_empty_state_is_the_defaults_and_an_unknown_field_is_refused():
    assert typed_state(State, {}) == State()
    with pytest.raises(ArtifactError, match=r"\['stpes'\] that State does not know"):
        typed_state(State, {"stpes": 1})
