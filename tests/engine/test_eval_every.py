"""train.eval_every: evaluation every k rounds and in each stage's last 10, so the final metrics keep
their meaning, and training is the same run whatever k is."""

from __future__ import annotations

import torch

from fedcore.data.build import build
from fedcore.engine.loop import LAST_WINDOW
from fedcore.registries import load_config
from fedcore.run import run_experiment

SETS = ["train.device=cpu", "train.rounds=25", "train.local_steps=1", "partition.num_clients=4"]


def test_eval_every_k_scores_every_kth_round_and_the_last_window_with_the_same_final_metrics(tmp_path):
    cfg = load_config("configs/quickstart.yaml", SETS)
    art = build(cfg).save(tmp_path / "art")
    every = run_experiment(cfg, tmp_path / "k1", data=art)
    sparse = run_experiment(load_config("configs/quickstart.yaml", [*SETS, "train.eval_every=7"]), tmp_path / "k7",
                            data=art)

    assert [h["round"] for h in every.history if "test/acc" in h] == list(range(1, 26))
    scored = [int(h["round"]) for h in sparse.history if "test/acc" in h]
    assert scored == [7, 14, *range(26 - LAST_WINDOW, 26)]
    assert all("train/memorization" in h for h in sparse.history if "test/acc" in h)
    for key in ("final/acc", "final/acc_last10"):
        assert sparse.summary[key] == every.summary[key], key  # evaluation never feeds back into training
    assert all(torch.equal(every.state.params[k], sparse.state.params[k]) for k in every.state.params)
