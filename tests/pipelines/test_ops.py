"""Small pieces of the component logic: history parsing, rate series, figures."""

from __future__ import annotations

from fedcore.reporting.plots import (
    compare_figure,
    curves_figure,
    rate_scatter,
    rate_trajectories,
    save,
    scene_figure,
)
from fedcore.reporting.report import rate_series, read_history

PNG = b"\x89PNG"


def test_history_round_trips_into_per_client_rate_series(tmp_path):
    f = tmp_path / "history.csv"
    f.write_text("stage,round,test/acc,noise/rate_est/client_00,noise/rate_est/client_01\n"
                 "identify,1,,0.1,0.5\nidentify,2,,0.2,0.6\ntrain,3,0.7,,\n")

    history = read_history(f)

    assert history[2] == {"stage": "train", "round": 3.0, "test/acc": 0.7}
    assert rate_series(history) == {0: [(1.0, 0.1), (2.0, 0.2)], 1: [(1.0, 0.5), (2.0, 0.6)]}


def test_figures_render_to_png(tmp_path):
    history = [{"stage": "warmup", "round": 1.0, "train/loss": 2.0},
               {"stage": "train", "round": 2.0, "train/loss": 1.5, "test/acc": 0.4}]
    report = {"dataset": "digits", "num_clients": 2, "noisy_clients": 1, "overall_noise_rate": 0.2,
              "clients": [{"client": 0, "size": 10, "noisy": True, "realized_rate": 0.4},
                          {"client": 1, "size": 12, "noisy": False, "realized_rate": None}]}
    figs = {"curves": curves_figure(history), "scatter": rate_scatter([0.1, 0.5], [0.2, 0.4]),
            "scene": scene_figure(report), "compare": compare_figure(["a", "b"], [0.5, 0.7], [0.0, 0.1], "acc"),
            "rates": rate_trajectories({0: [(1.0, 0.1), (2.0, 0.2)], 3: [(2.0, 0.5)]}, {0: 0.25, 3: 0.6}, "run")}
    for name, fig in figs.items():
        assert save(fig, tmp_path / f"{name}.png").read_bytes()[:4] == PNG


def test_rate_figure_labels_every_client_and_draws_its_truth():
    fig = rate_trajectories({0: [(1.0, 0.1), (2.0, 0.2)], 3: [(1.0, 0.4), (2.0, 0.5)]}, {0: 0.25, 3: 0.6})
    over_rounds, last = fig.axes

    labels = sorted(t.get_text() for t in over_rounds.texts)
    assert labels == ["c0", "c3"] and sorted(t.get_text() for t in last.texts) == ["c0", "c3"]
    dashed = sorted(round(line.get_ydata()[0], 2) for line in over_rounds.lines if line.get_linestyle() == "--")
    assert dashed == [0.25, 0.6]  # one true-rate line per client
    assert sorted(tuple(o.get_offsets()[0]) for o in last.collections) == [(0.25, 0.2), (0.6, 0.5)]
