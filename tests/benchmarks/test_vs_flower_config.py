"""benchmarks/vs_flower.py gives fedcore the evaluation Flower's side does, unless told otherwise."""

from __future__ import annotations

import argparse
import importlib.util
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"


def _vs_flower():
    spec = importlib.util.spec_from_file_location("bench_vs_flower", BENCH / "vs_flower.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.parametrize("evaluation, memorization", [("test", False), ("full", True)])
def test_fedcore_scores_memorization_only_when_asked(evaluation, memorization):
    vs = _vs_flower()
    args = argparse.Namespace(config="configs/quickstart.yaml", model="mlp", seed=0, rounds=None, set=[],
                              fedcore_eval=evaluation)
    cfg = vs.config(args)
    assert cfg.train.memorization is memorization
    assert cfg.method.name == "fedavg" and cfg.train.threads == 1


def test_the_default_is_the_same_work_as_flower(monkeypatch):
    vs = _vs_flower()
    seen = {}

    def stop(args):
        seen["args"] = args
        raise SystemExit(0)

    monkeypatch.setattr(vs, "run_all", stop)
    monkeypatch.setattr(sys, "argv", ["vs_flower.py"])
    with pytest.raises(SystemExit):
        vs.main()
    assert seen["args"].fedcore_eval == "test"
