"""benchmarks/vs_flower.py gives fedcore the evaluation Flower's side does, unless told otherwise."""

from __future__ import annotations

import argparse
import sys

import pytest

from tests.benchmarks.loader import bench_module


def _vs_flower():
    return bench_module("vs_flower")


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
