"""Every shipped config validates, and every shipped sweep plans on the quickstart (the tuned
sweeps, configs/sweeps/*_tuned.yaml, included)."""

from __future__ import annotations

from pathlib import Path

import pytest

from fedcore.registries import load_config

ROOT = Path(__file__).resolve().parents[1]
SWEEPS = ROOT / "configs" / "sweeps"
GRIDS = ROOT / "configs" / "grids"  # `fedcore bench` grids, not experiment configs: checked as grids below


@pytest.mark.parametrize("path", sorted(str(p.relative_to(ROOT)) for p in (ROOT / "configs").rglob("*.yaml")
                                        if SWEEPS not in p.parents and GRIDS not in p.parents))
def test_every_shipped_config_validates(path):
    load_config(ROOT / path, [])


@pytest.mark.parametrize("path", sorted(str(p.relative_to(ROOT)) for p in GRIDS.glob("*.yaml")))
def test_every_shipped_grid_checks(path, monkeypatch):
    from fedcore.bench.grid import load_grid

    monkeypatch.chdir(ROOT)  # a grid names its configs from the repo root, as the README runs it
    assert load_grid(ROOT / path).scenes  # load_grid checks names, keys, seeds and each scene's config


@pytest.mark.parametrize("path", sorted(str(p.relative_to(ROOT)) for p in SWEEPS.glob("*.yaml")))
def test_every_shipped_sweep_plans_on_the_quickstart(path):
    from fedcore.pipeline.plan import load_sweep_spec, plan_sweep, shared_data

    spec = load_sweep_spec(ROOT / path)
    base = load_config(ROOT / "configs/quickstart.yaml", ["data.validation.fraction=0.1"])
    methods = list(spec.method_overrides) or [base.method.name]
    plans = plan_sweep(shared_data(base), spec.model_copy(update={"methods": spec.methods or methods}))
    assert len(plans[0].runs) == len(methods)
