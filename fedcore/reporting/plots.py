"""Report figures: noise scene, estimated-vs-true noise rates, confusion matrix, curves, comparison.

Each function takes plain data (dicts, lists, arrays) and returns a matplotlib Figure on
the Agg backend, so it works on headless nodes; `save` writes a PNG atomically.
"""

from __future__ import annotations

import io
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import matplotlib
from matplotlib.ticker import MaxNLocator

from fedcore.io import atomic_write

matplotlib.use("Agg")  # headless: pipeline pods and CI have no display

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

CURVES = (("test/acc", "test accuracy"), ("train/loss", "train loss"), ("test/loss", "test loss"))
MULTI_CURVES = (("test/mAP", "test mAP"), ("train/loss", "train loss"), ("test/loss", "test loss"))


def curves_for(task: str) -> tuple[tuple[str, str], ...]:
    """The per-round curves of a run: test mAP instead of accuracy when the task is multi-label."""
    return MULTI_CURVES if task == "multi" else CURVES


def save(fig: Figure, path: str | Path) -> Path:
    """Write `fig` as PNG via a temp file and rename, then release it."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110, bbox_inches="tight")
    plt.close(fig)
    with atomic_write(path) as f:
        f.write(buf.getvalue())
    return Path(path)


def scene_figure(report: dict[str, Any]) -> Figure:
    """Per-client realized noise rate (bars, red = noisy client) and client size (line)."""
    clients = report["clients"]
    ids = [c["client"] for c in clients]
    rates = [c["realized_rate"] or 0.0 for c in clients]
    colors = ["tab:red" if c["noisy"] else "tab:green" for c in clients]
    fig, ax = plt.subplots(figsize=(max(5.0, 0.35 * len(ids) + 2), 3.2))
    ax.bar(ids, rates, color=colors)
    ax.set(xlabel="client", ylabel="realized noise rate", ylim=(0, 1),
           title=f"{report['dataset']}: {report['noisy_clients']}/{report['num_clients']} noisy clients, "
                 f"overall {report['overall_noise_rate'] or 0:.2f}")
    twin = ax.twinx()
    twin.plot(ids, [c["size"] for c in clients], color="black", marker=".", linewidth=1)
    twin.set_ylabel("samples")
    return fig


def rate_scatter(true_rates: Sequence[float], est_rates: Sequence[float], title: str = "") -> Figure:
    """Estimated vs true per-client noise rate, with the identity line."""
    fig, ax = plt.subplots(figsize=(4, 4))
    ax.plot([0, 1], [0, 1], color="grey", linestyle="--", linewidth=1)
    ax.scatter(true_rates, est_rates, color="tab:blue")
    ax.set(xlabel="true (realized) noise rate", ylabel="estimated noise rate", xlim=(0, 1), ylim=(0, 1),
           title=title or "noise-rate estimates")
    return fig


def rate_trajectories(rounds: dict[int, list[tuple[float, float]]], true_rates: dict[int, float],
                      title: str = "") -> Figure:
    """Every client's estimated noise rate across rounds against its true rate, in one figure.

    rounds: client -> [(round, estimate), ...]; true_rates: client -> realized rate. Left:
    estimates over rounds (solid) with each client's true rate (dashed, same colour), the
    last estimate labelled with the client id. Right: last estimate vs truth, labelled.
    """
    cids = sorted(rounds)
    cmap = plt.get_cmap("tab20" if len(cids) > 10 else "tab10")
    fig, (ax, sc) = plt.subplots(1, 2, figsize=(11, 4.2), width_ratios=(2.2, 1), layout="constrained")
    for i, c in enumerate(cids):
        color = cmap(i % cmap.N)
        xs, ys = zip(*rounds[c], strict=True)
        ax.plot(xs, ys, color=color, marker=".", linewidth=1.2)
        if c in true_rates:
            ax.axhline(true_rates[c], color=color, linestyle="--", linewidth=0.8, alpha=0.7)
            sc.scatter(true_rates[c], ys[-1], color=color)
            sc.annotate(f"c{c}", (true_rates[c], ys[-1]), xytext=(3, 3), textcoords="offset points", fontsize=7)
        ax.annotate(f"c{c}", (xs[-1], ys[-1]), xytext=(4, 0), textcoords="offset points", fontsize=7,
                    color=color, va="center")
    ax.set(xlabel="round", ylabel="noise rate", ylim=(-0.02, 1.02),
           title="estimated (solid) vs true (dashed) noise rate per client")
    sc.plot([0, 1], [0, 1], color="grey", linestyle="--", linewidth=1)
    sc.set(xlabel="true (realized) noise rate", ylabel="last estimate", xlim=(-0.02, 1.02), ylim=(-0.02, 1.02),
           title="last estimate vs truth")
    if title:
        fig.suptitle(title)
    return fig


def confusion_figure(matrix: Sequence[Sequence[int]], class_names: Sequence[str] | None = None) -> Figure:
    """Row-normalised confusion matrix (rows: true class), counts annotated when small."""
    m = np.asarray(matrix, dtype=float)
    norm = m / np.maximum(m.sum(axis=1, keepdims=True), 1)
    names = list(class_names or range(len(m)))
    fig, ax = plt.subplots(figsize=(0.45 * len(m) + 2.5, 0.45 * len(m) + 2))
    ax.imshow(norm, cmap="Blues", vmin=0, vmax=1)
    ax.set(xlabel="predicted", ylabel="true", title="confusion matrix (row-normalised)")
    ticks = range(len(m))
    ax.set_xticks(ticks, [str(n) for n in names], rotation=90 if len(m) > 12 else 0)
    ax.set_yticks(ticks, [str(n) for n in names])
    if len(m) <= 20:
        for i in ticks:
            for j in ticks:
                ax.text(j, i, int(m[i, j]), ha="center", va="center", fontsize=7,
                        color="white" if norm[i, j] > 0.5 else "black")
    return fig


def client_class_figure(counts: Sequence[Sequence[int]], clients: Sequence[str], classes: Sequence[str]) -> Figure:
    """Samples per client (rows) and class (columns) of a federation, as `fedcore data inspect` draws it."""
    m = np.asarray(counts, dtype=float)
    k, c = m.shape
    fig, ax = plt.subplots(figsize=(min(0.35 * c + 3.0, 16.0), min(0.3 * k + 2.0, 16.0)))
    shown = ax.imshow(m, cmap="viridis", aspect="auto", interpolation="nearest")
    fig.colorbar(shown, ax=ax, label="samples")
    ax.set(xlabel="class", ylabel="client", title=f"{k} clients x {c} classes")
    # Names only where they stay legible; beyond that the axes count.
    if c <= 40:
        ax.set_xticks(range(c), [str(n) for n in classes], rotation=90 if c > 8 else 0)
    if k <= 60:
        ax.set_yticks(range(k), [str(n) for n in clients])
    return fig


def curves_figure(history: Sequence[dict[str, Any]], title: str = "", task: str = "single") -> Figure:
    """Accuracy (mAP for multi-label `task`) and losses per round; dotted lines mark stage changes."""
    present = [(k, label) for k, label in curves_for(task) if any(_finite(r.get(k)) for r in history)]
    # constrained layout keeps the figure title above the panel titles instead of on them
    fig, axes = plt.subplots(1, max(len(present), 1), figsize=(4 * max(len(present), 1), 3.3), squeeze=False,
                             layout="constrained")
    boundaries = [r["round"] for prev, r in zip(history, history[1:], strict=False) if prev["stage"] != r["stage"]]
    for ax, (key, label) in zip(axes[0], present, strict=False):
        pts = [(r["round"], r[key]) for r in history if _finite(r.get(key))]
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker=".")
        for b in boundaries:
            ax.axvline(b - 0.5, color="grey", linestyle=":")
        ax.set(xlabel="round", title=label)
        integer_rounds(ax)
    fig.suptitle(title)
    return fig


def compare_figure(labels: Sequence[str], means: Sequence[float], stds: Sequence[float], metric: str) -> Figure:
    """Horizontal bars of mean ± std of `metric`, one per group."""
    fig, ax = plt.subplots(figsize=(6, 0.4 * len(labels) + 1.2))
    y = np.arange(len(labels))
    ax.barh(y, means, xerr=stds, color="tab:blue", capsize=3)
    ax.set_yticks(y, list(labels))
    ax.invert_yaxis()
    ax.set(xlabel=metric, xlim=(0, 1) if all(0 <= m <= 1 for m in means if _finite(m)) else None)
    return fig


def _finite(x: Any) -> bool:
    return isinstance(x, int | float) and math.isfinite(x)


Band = tuple[Sequence[float], Sequence[float], Sequence[float], Sequence[float]]  # rounds, mean, min, max


# Groups beyond which a figure's legend sits beside its axes, not over the curves.
CROWDED = 6


def group_colors(labels: Sequence[str]) -> dict[str, Any]:
    """One colour per group, in the given order: pass the same map to every figure of a report so a
    group keeps its colour from figure to figure."""
    cmap = plt.get_cmap("tab10" if len(labels) <= 10 else "tab20")
    return {label: cmap(i % cmap.N) for i, label in enumerate(labels)}


def band_figure(bands: dict[str, Band], ylabel: str, title: str = "", ref: float | None = None,
                ref_label: str = "", marks: Sequence[tuple[float, str]] = (),
                colors: dict[str, Any] | None = None) -> Figure:
    """One curve per group: the mean over seeds with a min-max band; `ref` a horizontal line (e.g.
    FedAvg's best round), `marks` vertical lines (round, label), e.g. the warm-up's end and stage changes.
    colors: group -> colour (`group_colors`); by default, the bands' order."""
    crowded = len(bands) > CROWDED
    fig, ax = plt.subplots(figsize=(10 if crowded else 7, 4), layout="constrained")
    colors = colors or group_colors(list(bands))
    for label, (x, mean, lo, hi) in bands.items():
        color = colors[label]
        ax.plot(x, mean, color=color, linewidth=1.6, label=label)
        ax.fill_between(x, lo, hi, color=color, alpha=0.18, linewidth=0)
    if ref is not None and _finite(ref):
        ax.axhline(ref, color="black", linestyle="--", linewidth=1, label=ref_label or f"{ref:.3f}")
    labels = []
    for rnd, text in sorted(marks):
        ax.axvline(rnd, color="grey", linestyle=":", linewidth=1)
        labels.append(ax.annotate(text, (rnd, 1.0), xycoords=("data", "axes fraction"), xytext=(2, -10),
                                  textcoords="offset points", fontsize=7, color="grey"))
    ax.set(xlabel="round", ylabel=ylabel, title=title)
    integer_rounds(ax)
    if crowded:  # beside the axes: over the curves a long legend hides what it names
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
    else:
        ax.legend(fontsize=7, loc="best")
    _unstack(fig, labels)
    return fig


def integer_rounds(ax: Any) -> None:
    """Round ticks at whole rounds: a run of 3 rounds is not ticked at 1.5 and 2.5. Call it after
    plotting: a metric logged in one round gets a span of two rounds around it, which holds whole ones."""
    lo, hi = ax.get_xlim()
    if hi - lo < 2:
        mid = (lo + hi) / 2
        ax.set_xlim(mid - 1, mid + 1)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))


def _unstack(fig: Figure, labels: list[Any], gap: float = 2.0) -> None:
    """Move each stage label (in round order) down a line at a time until its box, as the renderer
    draws it, meets no earlier label's: labels of nearby stage changes, or long ones, never overlap.

    The layout is settled first (constrained layout moves the axes at the first draw), and the
    labels are kept out of it, so saving the figure does not move them again."""
    if not labels:
        return
    for label in labels:
        label.set_in_layout(False)
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    placed: list[Any] = []
    for label in labels:
        step = label.get_fontsize() + gap  # points: one line
        for _ in range(len(labels)):
            box = label.get_window_extent(renderer).padded(2)  # pixels: labels that touch read as one
            if not any(box.overlaps(other) for other in placed):
                break
            x, y = label.xyann
            label.xyann = (x, y - step)
        placed.append(label.get_window_extent(renderer).padded(2))


def panels_figure(panels: dict[str, dict[str, Band]], title: str = "", cols: int = 3,
                  colors: dict[str, Any] | None = None) -> Figure:
    """A grid of small band plots, one per metric (e.g. client and sample P/R/F1), groups in colour
    (`colors`, as in `band_figure`; by default the groups' sorted order)."""
    names = list(panels)
    rows = max(1, math.ceil(len(names) / cols))
    groups = {g for p in panels.values() for g in p}
    crowded = len(groups) > CROWDED
    fig, axes = plt.subplots(rows, cols, figsize=(3.6 * cols + (3 if crowded else 0), 2.8 * rows), squeeze=False,
                             layout="constrained")
    colors = colors or group_colors(sorted(groups))
    handles: dict[str, Any] = {}
    for ax, name in zip(axes.flat, names, strict=False):
        for label, (x, mean, lo, hi) in panels[name].items():
            color = colors[label]
            # A metric logged in one or two rounds (a one-off client identification) is a dot, not an
            # invisible line of one point.
            (line,) = ax.plot(x, mean, color=color, linewidth=1.3, label=label, marker="o" if len(x) <= 2 else None,
                              markersize=4)
            handles.setdefault(label, line)
            ax.fill_between(x, lo, hi, color=color, alpha=0.18, linewidth=0)
        ax.set(title=name, xlabel="round", ylim=(-0.02, 1.02))
        integer_rounds(ax)
        if not crowded:
            ax.legend(fontsize=6)  # every panel: a panel read alone still says whose line is whose
    for ax in list(axes.flat)[len(names):]:
        ax.set_visible(False)
    if crowded:  # one legend beside the grid: many per-panel legends would cover the panels
        order = [g for g in colors if g in handles]
        fig.legend([handles[g] for g in order], order, loc="outside right upper", fontsize=7)
    fig.suptitle(title)
    return fig


Pair = tuple[float, float]  # mean, std


def paired_bars_figure(panels: dict[str, dict[str, dict[str, Pair]]], refs: dict[str, dict[str, float]],
                       xlabel: str, cols: int = 3) -> Figure:
    """One panel per group (e.g. a scene): per row, a bar per setting (e.g. default and tuned, mean ±
    std) and dashed vertical lines at the panel's reference values (e.g. FedAvg's bars to beat)."""
    names = list(panels)
    cols = max(1, min(cols, len(names)))
    rows = max(1, math.ceil(len(names) / cols))
    height = max(len(p) for p in panels.values()) * 0.42 + 1.3 if panels else 2.0
    fig, axes = plt.subplots(rows, cols, figsize=(4.4 * cols, height * rows), squeeze=False, layout="constrained")
    settings = list(dict.fromkeys(s for p in panels.values() for row in p.values() for s in row))
    colors = group_colors(settings)
    ref_styles = ["--", ":", "-."]
    for ax, name in zip(axes.flat, names, strict=False):
        labels = list(panels[name])
        y = np.arange(len(labels))
        width = 0.8 / max(1, len(settings))
        for i, setting in enumerate(settings):
            vals = [panels[name][lab].get(setting, (np.nan, 0.0)) for lab in labels]
            ax.barh(y + (i - (len(settings) - 1) / 2) * width, [v[0] for v in vals], height=width,
                    xerr=[v[1] for v in vals], color=colors[setting], capsize=2, label=setting)
        for j, (ref, x) in enumerate(refs.get(name, {}).items()):
            ax.axvline(x, color="black", linestyle=ref_styles[j % len(ref_styles)], linewidth=1, label=ref)
        ax.set_yticks(y, labels)
        ax.invert_yaxis()
        ax.set(title=name, xlabel=xlabel)
    for ax in list(axes.flat)[len(names):]:
        ax.set_visible(False)
    # One legend for the figure, under the panels, where it covers no bar.
    handles, labels = axes.flat[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside lower center", ncol=max(1, len(labels)), fontsize=8)
    return fig
