"""The report's figures read alone: a legend on every panel with lines, whole-round ticks, stage labels
that never print over each other (checked on the boxes the renderer draws)."""

from __future__ import annotations

import itertools

from fedcore.reporting.plots import band_figure, curves_figure, panels_figure


def band(rounds: list[int], value: float = 0.5):
    return rounds, [value] * len(rounds), [value - 0.1] * len(rounds), [value + 0.1] * len(rounds)


def test_every_detection_panel_with_lines_has_a_legend_naming_its_groups():
    short, long = band([1]), band(list(range(1, 31)))
    panels = {"detect/client_f1": {"fedsir": short, "fednoro": short},
              "detect/sample_f1": {"fedrg": long, "fedgr": long},
              "detect/sample_precision": {"fedrg": long}}
    fig = panels_figure(panels, cols=2)
    drawn = [ax for ax in fig.axes if ax.get_visible()]
    assert len(drawn) == 3
    for ax, groups in zip(drawn, panels.values(), strict=True):
        legend = ax.get_legend()
        assert legend is not None and [t.get_text() for t in legend.get_texts()] == list(groups)


def test_round_ticks_are_whole_rounds_even_for_short_runs():
    fig = band_figure({"fedavg": band([1, 2, 3])}, "acc")
    panels = panels_figure({"detect/client_f1": {"fedsir": band([1])}, "detect/sample_f1": {"fedrg": band([2, 3])}})
    curves = curves_figure([{"round": r, "stage": "train", "test/acc": 0.5} for r in (1, 2, 3)])
    axes = [fig.axes[0], *(ax for ax in panels.axes if ax.get_visible()), curves.axes[0]]
    for ax in axes:
        ticks = [t for t in ax.get_xticks() if ax.get_xlim()[0] <= t <= ax.get_xlim()[1]]
        assert len(ticks) >= 2 and all(float(t).is_integer() for t in ticks), ticks


def test_stage_labels_never_overlap_on_the_drawn_figure():
    # The quickstart's stage changes: several methods change stage within a round or two of each
    # other, with labels far longer than a round is wide.
    marks = [(1.5, "fedsir: relabel"), (1.5, "fedrg: train"), (2.5, "fedsir: train"), (2.5, "fednoro: identify"),
             (3.5, "fednoro: train"), (3.5, "fedcorr: finetune"), (4.5, "fedgr: train"), (9.5, "fedcorr: train"),
             (10.5, "dividemix: train"), (11.5, "fedgr: sieve"), (14.5, "fedrg: train")]
    fig = band_figure({"fedavg": band(list(range(1, 61)))}, "acc", marks=marks)
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    labels = [t for t in fig.axes[0].texts if t.get_text() in {text for _, text in marks}]
    assert len(labels) == len(marks)
    boxes = [t.get_window_extent(renderer) for t in labels]
    for (a, ta), (b, tb) in itertools.combinations(zip(boxes, labels, strict=True), 2):
        assert not a.overlaps(b), (ta.get_text(), tb.get_text())
    # Far apart, labels stay on the top line: only those that would meet are moved down.
    lone = band_figure({"fedavg": band(list(range(1, 31)))}, "acc", marks=[(2.5, "a: train"), (25.5, "b: train")])
    assert {t.xyann for t in lone.axes[0].texts} == {(2, -10)}
