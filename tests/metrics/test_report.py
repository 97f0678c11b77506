"""`fedcore report`: seed bands, verdicts, and the page with its figures from real runs."""

from __future__ import annotations

import json
import math

import matplotlib.image
import pytest

from fedcore import cli
from fedcore.reporting.report import beats_fedavg_every_seed, seed_band

CONFIG = "configs/quickstart.yaml"


def test_seed_band_is_over_the_seeds_that_logged_each_round():
    h = [[{"round": 1.0, "test/acc": 0.2}, {"round": 2.0, "test/acc": 0.5}, {"round": 3.0, "test/acc": 0.6}],
         [{"round": 1.0, "test/acc": 0.4}, {"round": 2.0, "test/acc": 0.7}, {"round": 3.0}],
         [{"round": 1.0, "test/acc": 0.3}, {"round": 2.0, "test/acc": math.nan}, {"round": 3.0, "test/acc": 0.9}]]
    rounds, mean, lo, hi = seed_band(h, "test/acc")
    assert rounds == [1.0, 2.0, 3.0]
    assert mean == pytest.approx([0.3, 0.6, 0.75]) and lo == [0.2, 0.5, 0.6] and hi == [0.4, 0.7, 0.9]
    assert seed_band(h, "detect/client_f1") is None


def _rec(method, seed, last10, best, rate="0.4"):
    return {"method": method, "seed": seed, "config": {"noise.rate.value": rate, "train.lr": "0.05"},
            "summary": {"final/acc_last10": last10, "final/acc_best": best}}


def test_beats_fedavg_on_every_seed_of_the_same_setting():
    records = [_rec("fedavg", 0, 0.3, 0.50), _rec("fedavg", 1, 0.3, 0.60), _rec("fedavg", 0, 0.3, 0.9, rate="0.2")]
    good = [_rec("sce", 0, 0.55, 0.6), _rec("sce", 1, 0.62, 0.7)]
    mixed = [_rec("x", 0, 0.55, 0.6), _rec("x", 1, 0.58, 0.7)]
    assert beats_fedavg_every_seed(good, records + good, "acc") == "✓ (+2.0)"
    assert beats_fedavg_every_seed(mixed, records + mixed, "acc") == "✗ (-2.0)"
    assert beats_fedavg_every_seed(records[:2], records, "acc") == "-"
    assert beats_fedavg_every_seed([_rec("y", 5, 0.9, 0.9)], records, "acc") == "-"  # no FedAvg of seed 5


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    base = tmp_path_factory.mktemp("runs")
    out = []
    for method in ("fedavg", "fedsir"):
        for seed in (0, 1):
            run = base / f"{method}-s{seed}"
            cli.main(["run", CONFIG, "--out", str(run), "--no-progress", "--set", f"method.name={method}",
                      "--set", "train.rounds=3", "--set", f"seed={seed}", "--set", "train.threads=1",
                      "--set", "data.validation.fraction=0.1", "--set", "train.local_memorization=true"])
            out.append(run)
    return out


def test_report_writes_the_page_and_every_figure_it_names(runs, tmp_path):
    cli.main(["report", *map(str, runs), "--out", str(tmp_path / "rep")])
    page = (tmp_path / "rep" / "report.md").read_text()
    names = [line.split("](")[1].rstrip(")") for line in page.splitlines() if line.startswith("![")]
    assert "accuracy.png" in names and "memorization.png" in names and "detection.png" in names
    for name in names:
        img = matplotlib.image.imread(tmp_path / "rep" / name)
        assert img.shape[0] > 100 and img.shape[1] > 100 and img.std() > 0  # decodable and not blank
    row = next(line for line in page.splitlines() if line.startswith("| fedsir "))
    acc = [json.loads((r / "metrics.json").read_text())["summary"]["final/acc_last10"] for r in runs[2:]]
    # Two seeds: the sample std is |a - b| / sqrt(2), the definition every table states.
    assert f"{100 * sum(acc) / 2:.1f} ± {100 * abs(acc[0] - acc[1]) / math.sqrt(2):.1f} " in row and "| 0, 1 |" in row
    assert "mean ± sample std (n − 1) over seeds" in page


def test_report_groups_by_the_labels_a_bench_gives(runs, tmp_path):
    from fedcore.reporting.report import write_report

    # two groups of one method would otherwise be told apart by their config keys
    labels = {str(runs[0]): "fedavg (default)", str(runs[1]): "fedavg (default)",
              str(runs[2]): "fedsir (default)", str(runs[3]): "fedsir (tuned)"}
    page = write_report(list(labels), tmp_path / "rep", labels).read_text()
    rows = [line.split(" | ")[0] for line in page.splitlines() if line.startswith("| fed")]
    assert rows[:3] == ["| fedavg (default)", "| fedsir (default)", "| fedsir (tuned)"]
    assert "| 0, 1 |" in next(line for line in page.splitlines() if line.startswith("| fedavg (default) "))


def test_the_page_shows_the_validation_score_a_bench_chose_on(runs, tmp_path):
    """Issue 71.4: a bench's report.md had no validation column and no mark on the chosen row."""
    from fedcore.reporting.report import write_report

    labels = {str(runs[0]): "fedavg (default)", str(runs[2]): "fedsir (tuned, chosen)"}
    page = write_report(list(labels), tmp_path / "rep", labels).read_text()
    assert "| group | seeds | budget | val acc last-10 | acc last-10 |" in page
    val = json.loads((runs[2] / "metrics.json").read_text())["summary"]["final/val_acc_last10"]
    assert next(line for line in page.splitlines() if line.startswith("| fedsir (tuned, chosen) | 0 | ")).split(
        " | ")[3] == f"{100 * val:.1f}"


def test_report_refuses_mixed_datasets_and_missing_runs(runs, tmp_path, capsys):
    other = tmp_path / "mnist-run"
    other.mkdir()
    (other / "metrics.json").write_text((runs[0] / "metrics.json").read_text())
    (other / "history.csv").write_text((runs[0] / "history.csv").read_text())
    (other / "config.yaml").write_text((runs[0] / "config.yaml").read_text().replace("name: digits", "name: mnist", 1))
    for argv, message in (([str(runs[0]), str(other)], "different datasets (digits, mnist)"),
                          ([str(tmp_path / "nothing")], "has no metrics.json")):
        with pytest.raises(SystemExit) as exit_info:
            cli.main(["report", *argv, "--out", str(tmp_path / "r")])
        err = capsys.readouterr().err.strip()
        assert exit_info.value.code == 2 and message in err and "\n" not in err


def test_report_from_an_mlflow_experiment(tmp_path):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    for method in ("fedavg", "fedprox"):
        cli.main(["run", CONFIG, "--out", str(tmp_path / method), "--no-progress", "--set", f"method.name={method}",
                  "--set", "train.rounds=2", "--set", "train.threads=1", "--set", "tracking.backend=mlflow",
                  "--set", f"tracking.uri={uri}", "--set", "tracking.experiment=rep",
                  "--set", "tracking.log_model=false"])
    cli.main(["report", "--experiment", "rep", "--tracking-uri", uri, "--out", str(tmp_path / "rep")])
    page = (tmp_path / "rep" / "report.md").read_text()
    local = json.loads((tmp_path / "fedprox" / "metrics.json").read_text())["summary"]["final/acc_last10"]
    row = next(line for line in page.splitlines() if line.startswith("| fedprox "))
    assert f"| {100 * local:.1f} |" in row and "2 runs in 2 groups" in page
    assert matplotlib.image.imread(tmp_path / "rep" / "accuracy.png").std() > 0


def test_the_fedavg_bar_is_the_better_fedavg_config_on_each_seed():
    from fedcore.reporting.report import fedavg_reference, setting_of

    preset = [_rec("fedavg", 0, 0.3, 0.30), _rec("fedavg", 1, 0.3, 0.55)]
    tuned = [{**r, "config": {**r["config"], "train.lr": "0.11"}} for r in
             (_rec("fedavg", 0, 0.4, 0.50), _rec("fedavg", 1, 0.4, 0.45))]
    ref = fedavg_reference(preset + tuned, "acc")
    setting = setting_of(preset[0])
    assert ref == {(setting, 0): 0.50, (setting, 1): 0.55}
    # 0.52 clears the tuned FedAvg on seed 0 and the preset's on seed 1 only if judged per seed.
    method = [_rec("sce", 0, 0.52, 0.6), _rec("sce", 1, 0.56, 0.6)]
    assert beats_fedavg_every_seed(method, preset + tuned + method, "acc") == "✓ (+1.0)"
    assert beats_fedavg_every_seed([_rec("sce", 0, 0.45, 0.6)], preset + tuned, "acc") == "✗ (-5.0)"


def test_labels_of_configs_that_share_a_method_round_their_floats():
    from fedcore.reporting.compare import group_records

    a = _rec("fedavg", 0, 0.3, 0.3)
    b = {**a, "config": {**a["config"], "train.lr": "0.11281115548016656"}}
    assert sorted(group_records([a, b])) == ["fedavg [train.lr=0.05]", "fedavg [train.lr=0.113]"]


def test_the_plots_fedavg_line_is_on_the_setting_the_other_runs_share():
    from fedcore.reporting.report import reference_line

    noisy = [_rec("fedavg", 0, 0.3, 0.50), _rec("sce", 0, 0.6, 0.6), _rec("fedsir", 0, 0.7, 0.7)]
    clean = [_rec("fedavg", 0, 0.9, 0.95, rate="0.0")]
    assert reference_line(noisy + clean, "acc") == [0.50]
    assert sorted(reference_line(noisy[:1] + clean, "acc")) == [0.50, 0.95]  # FedAvg alone: every setting


def test_stage_marks_name_their_method_when_several_methods_have_stages():
    from fedcore.reporting.report import marks_of

    def rec(stages, warm=0):
        return {"config": {"train.warmup_rounds": warm},
                "history": [{"round": i + 1, "stage": s} for i, s in enumerate(stages)]}

    one = {"fedsir": [rec(["identify", "relabel", "train", "train"])]}
    assert marks_of(one) == [(1.5, "relabel"), (2.5, "train")]
    two = {**one, "fednoro": [rec(["warmup", "warmup", "train"], warm=0)], "fedavg": [rec(["train"] * 4)]}
    assert sorted(marks_of(two)) == [(1.5, "fedsir: relabel"), (2.5, "fednoro: train"), (2.5, "fedsir: train")]


def test_the_groups_of_one_method_share_its_stage_marks():
    from fedcore.reporting.report import marks_of

    def rec(method, stages):
        return {"method": method, "config": {}, "history": [{"round": i + 1, "stage": s} for i, s in enumerate(stages)]}

    # a bench's default and tuned rows of one method: one mark each, named by the method once another has marks
    one = {"fedcorr (default)": [rec("fedcorr", ["pre", "pre", "train"])],
           "fedcorr (tuned)": [rec("fedcorr", ["pre", "pre", "train"])]}
    assert marks_of(one) == [(2.5, "train")]
    two = {**one, "fedgr-robust (tuned)": [rec("fedgr", ["warmup", "train", "train"])]}
    assert sorted(marks_of(two)) == [(1.5, "fedgr: train"), (2.5, "fedcorr: train")]


def test_a_crowded_figure_keeps_its_legend_off_the_curves():
    import warnings

    from fedcore.reporting.plots import CROWDED, band_figure, panels_figure

    band = ([1, 2, 3], [0.1, 0.5, 0.9], [0.0, 0.4, 0.8], [0.2, 0.6, 1.0])
    groups = {f"method{i} (tuned)": band for i in range(CROWDED + 2)}
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # constrained layout warns when a legend squeezes the axes away
        acc = band_figure(groups, "acc", ref=0.5, ref_label="FedAvg's best round")
        acc.canvas.draw()
        det = panels_figure({"detect/sample_f1": groups, "detect/sample_recall": groups})
        det.canvas.draw()
    ax, = acc.axes
    legend = ax.get_legend().get_window_extent()
    assert legend.x0 >= ax.get_window_extent().x1  # beside the axes, not over them
    assert all(a.get_legend() is None for a in det.axes) and len(det.legends) == 1
    assert [t.get_text() for t in det.legends[0].get_texts()] == list(groups)
    few = panels_figure({"detect/sample_f1": dict(list(groups.items())[:2])})
    assert few.axes[0].get_legend() is not None and not few.legends  # a short legend stays on its panel


def test_a_metric_logged_once_is_drawn_as_a_dot():
    from fedcore.reporting.plots import panels_figure

    fig = panels_figure({"detect/client_f1": {"fedsir": ([1], [1.0], [1.0], [1.0])},
                         "detect/sample_f1": {"fedsir": (list(range(1, 11)), [0.5] * 10, [0.4] * 10, [0.6] * 10)}})
    once, many = (ax.get_lines()[0] for ax in fig.axes[:2])
    assert once.get_marker() == "o" and many.get_marker() in (None, "None", "")


def test_a_group_keeps_its_colour_from_figure_to_figure():
    from matplotlib.colors import to_rgba

    from fedcore.reporting.plots import band_figure, group_colors, panels_figure

    band = ([1, 2], [0.1, 0.2], [0.1, 0.2], [0.1, 0.2])
    groups = ["fedavg", "fedgr [profile=robust]", "fedgr [profile=authors]"]
    colors = group_colors(groups)
    acc = band_figure({g: band for g in groups}, "acc", colors=colors)
    # the panel lists the groups in another order and lacks one: the colours still follow the group
    mem = panels_figure({"train/memorization": {groups[2]: band, groups[0]: band}}, colors=colors)
    by_acc = {line.get_label(): to_rgba(line.get_color()) for line in acc.axes[0].get_lines()}
    by_mem = {line.get_label(): to_rgba(line.get_color()) for line in mem.axes[0].get_lines()}
    assert by_mem == {g: by_acc[g] for g in (groups[2], groups[0])}
    assert len(set(by_acc.values())) == 3
