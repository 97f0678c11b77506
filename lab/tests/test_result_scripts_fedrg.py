"""lab/fedrg_bench.py (the Fashion-MNIST mode of fedrg.sh): equal round budgets (FedRG's
SimCLR rounds inside the baselines' total) and tables that join the FedAvg run's small-loss probe
into the FedRG rows."""

import numpy as np
import pytest

from fedcore.data.build import build_federated_dataset
from fedcore.metrics import noise_majority
from fedcore.registries import config_from_dict
from fedcore.run import run_experiment
from lab.tests.test_result_scripts import load_script
from tests.methods.test_fedrg import digits_cfg

BASE = ["-s", "method.name=fedavg", "-s", "method.params={}", "-s", "train.stage_rounds={}"]


@pytest.fixture(scope="module")
def bench():
    return load_script("fedrg_bench")


@pytest.fixture(scope="module")
def preset(tmp_path_factory):
    path = tmp_path_factory.mktemp("preset") / "fedrg_sym_localized.yaml"
    path.write_text(digits_cfg(pretrain=1, rounds=2).to_yaml())  # FedRG: 1 SimCLR + 2 train rounds
    return str(path)


def test_fedrgs_simclr_rounds_count_inside_the_baselines_budget(bench, preset):
    sets = bench._sets
    assert bench.total_rounds(preset, [])[0] == 3 and bench.total_rounds(preset, sets(BASE))[0] == 2
    assert bench.pad(preset, 2, []) == "-s train.rounds=1"  # FedRG: 1 SimCLR + 1 train round
    assert bench.pad(preset, 2, sets(["-s", "method.params.score=posterior"])) == "-s train.rounds=1"
    assert bench.pad(preset, 2, sets(BASE)) == ""  # the shared baselines keep the preset's rounds
    assert bench.pad(preset, 2, sets(["-s", "method.params.ssl_pretrain=false"])) == ""
    assert bench.pad(preset, 4, sets(BASE)) == "-s train.rounds=4"  # a larger budget pads upwards
    with pytest.raises(SystemExit):
        bench.pad(preset, 1, [])  # the SimCLR stage alone uses the whole budget
    # fedrg.sh asks for every FedRG row at once, against the preset's rounds as a FedAvg run
    assert bench.pads(preset, ["", "-s method.params.score=posterior", "-s method.params.ssl_pretrain=false"]) == [
        "-s train.rounds=1", "-s train.rounds=1", ""]


@pytest.fixture(scope="module")
def bench_root(tmp_path_factory):
    root = tmp_path_factory.mktemp("bench")
    cfg = digits_cfg(pretrain=1, rounds=2, train={"loss_probe": True})
    fed = build_federated_dataset(cfg)
    fed.save(root / "fedrg_sym_localized" / "data-s0")
    avg_cfg = config_from_dict(cfg.to_dict(), ["method.name=fedavg", "method.params={}", "train.stage_rounds={}",
                                               "train.rounds=3"])
    avg = run_experiment(avg_cfg, root / "fedrg_sym_localized" / "fedavg" / "s0", data=fed)
    rg = run_experiment(cfg, root / "fedrg_sym_localized" / "fedrg" / "s0", data=fed)
    return root, fed, avg, rg


def _table(out: str, title: str) -> dict[str, list[str]]:
    block = out.split(title)[1].strip().split("\n\n")[0].splitlines()[2:]
    return {cells[0]: cells[1:] for cells in ([c.strip() for c in ln.strip("|").split("|")] for ln in block)}


def test_table_joins_the_fedavg_probe_and_splits_by_majority_groups(bench, bench_root, capsys):
    root, fed, avg, rg = bench_root
    bench.table(root)
    out = capsys.readouterr().out

    def pct(summary, key, digits=1):
        return f"{100 * summary[key]:.{digits}f} (n=1)"

    acc = _table(out, "Test accuracy, best round (%)")
    assert acc["fedavg"] == [pct(avg.summary, "final/acc_best")]
    det = _table(out, "Sample detection F1 at the last round (%), mean over clients")
    assert det["fedavg+CE: small loss"] == [pct(avg.summary, "last/detect/loss_probe/sample_f1")]
    assert det["fedrg: geometry"] == [pct(rg.summary, "last/detect/sample_f1")]
    assert det["fedrg: small loss, same model"] == [pct(rg.summary, "last/detect/small_loss/sample_f1")]
    split = _table(out, "Detection F1 at the last round within noise-majority / other (client, label) groups "
                        "(%), pooled")
    key = "last/detect/loss_probe/sample_f1"
    assert split["fedavg+CE: small loss"] == [f"{pct(avg.summary, key + '_majority', 0)} / "
                                              f"{pct(avg.summary, key + '_minority', 0)}"]
    y, noisy = fed.y_train.numpy(), fed.truth.is_noisy_sample
    maj = sum((noise_majority(y[p], noisy[p]) & noisy[p]).sum() for p in fed.client_indices)
    share = _table(out, "Noisy samples in noise-majority (client, label) groups")["share"]
    assert share == [f"{100 * maj / noisy.sum():.0f}%"]
    assert 0 < maj < noisy.sum()  # the split is not trivially all or nothing on this scene
    assert np.isfinite(rg.summary["last/detect/sample_f1_majority"])


def test_auc_rescores_the_final_model_on_each_clients_samples(bench, bench_root, capsys):
    import torch
    import torch.nn.functional as F
    from sklearn.metrics import roc_auc_score

    from fedcore.engine.store import TensorStore
    from fedcore.models import build_model

    root, fed, _, _ = bench_root
    run = root / "fedrg_sym_localized" / "fedrg" / "s0"
    bench.auc(run, root / "fedrg_sym_localized" / "data-s0")
    rows = {r[0]: r[1:] for r in ([c.strip() for c in ln.strip("|").split("|")]
                                  for ln in capsys.readouterr().out.splitlines()[2:])}
    assert list(rows) == ["paper", "posterior", "small loss"]
    # The small-loss AUC from the saved backbone, computed here without the script's machinery.
    net = build_model(digits_cfg().model, tuple(fed.x_train.shape[1:]), 10, seed=0)
    net.load_state_dict({k[4:]: v for k, v in torch.load(run / "model.pt").items() if k.startswith("net.")})
    store = TensorStore(fed.x_train, fed.meta["mean"], fed.meta["std"], torch.device("cpu"))
    with torch.no_grad():
        ce = F.cross_entropy(net.eval()(store.get(torch.arange(len(fed.y_train)))), fed.y_train,
                             reduction="none").numpy()
    noisy = fed.truth.is_noisy_sample
    want = np.mean([roc_auc_score(noisy[p], ce[p]) for p in fed.client_indices if 0 < noisy[p].mean() < 1])
    assert float(rows["small loss"][0]) == pytest.approx(want, abs=0.0005)
    assert all(0.0 <= float(v) <= 1.0 for r in rows.values() for v in r if v != "-")


def test_cells_are_mean_and_sample_std_over_seeds(bench):
    runs = [{"k": 0.5}, {"k": 0.6}, {"k": 0.7}, {"k": None}]
    assert bench.cell(runs, "k") == "60.0 ± 10.0"  # the population std would print 8.2
    assert bench.cell(runs[:2], "k") == "55.0 ± 7.1 (n=2)"
    assert bench.cell(runs[:1], "k", digits=0) == "50 (n=1)"
    assert bench.cell(runs[3:], "k") == "-"


def test_digits_mode_tables_print_the_sample_std_over_seeds(tmp_path):
    """fedrg.sh's digits tables (TABLE_ONLY: no runs, only the heredoc that reads them)."""
    import json
    import os
    import subprocess
    import sys

    from lab.tests.test_result_scripts import ROOT

    for seed, acc in enumerate((0.5, 0.6, 0.7)):
        run = tmp_path / "sym_localized" / "fedavg" / f"s{seed}"
        run.mkdir(parents=True)
        (run / "metrics.json").write_text(json.dumps({"summary": {"final/acc_last10": acc, "final/acc": acc}}))
        (run / "history.csv").write_text("round,stage\n1,train\n")
    done = subprocess.run(["bash", "lab/fedrg.sh", str(tmp_path)], cwd=ROOT, capture_output=True, text=True,
                          env={**os.environ, "TABLE_ONLY": "1", "PY": sys.executable}, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.count("| fedavg | 60.0 ± 10.0 |") == 2  # the population std would print 8.2
