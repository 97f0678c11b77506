"""The diagnostic scripts in lab/ (and lab/notes/) still read what fedcore writes.

They read ground truth, so they live outside the library; these tests keep them from rotting
when a run's outputs or a method's hooks change.
"""

import contextlib
import importlib.util
import io
import re
import statistics
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from fedcore.config import ExperimentConfig
from fedcore.data.build import build_federated_dataset
from fedcore.data.federated import FederatedDataset
from fedcore.models import build_model
from fedcore.run import make_context, run_experiment
from fedcore.stats.sieving import local_sieve, pooled_sieve
from tests.methods.test_fedgr_method import digits_cfg

ROOT = Path(__file__).resolve().parents[2]
HALF2, HALF3 = 0.0051, 0.00051  # a printed .2f / .3f value: half a last digit, plus float slack at the tie


def load_script(name: str):
    """lab/NAME.py as a module; NAME may hold a folder (notes/fedgr_diagnose)."""
    spec = importlib.util.spec_from_file_location(Path(name).name, ROOT / "lab" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def fedgr_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("fedgr")
    cfg = digits_cfg(rounds=4, warmup=2)
    cfg = cfg.model_copy(update={"train": cfg.train.model_copy(update={"local_memorization": True})})
    data = build_federated_dataset(cfg).save(tmp / "data")
    res = run_experiment(cfg, tmp / "run", data=data)
    return cfg, data, tmp / "run", res


def _run_quiet(fn, *args) -> str:
    """Call a script's main and return what it printed (capsys is function-scoped, fixtures are not)."""
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        fn(*args)
    return buf.getvalue()


def _floats(line: str) -> list[float]:
    return [float(v) for v in re.findall(r"-?\d+\.\d+|-?\d+", line)]


def test_diagnose_probes_the_saved_model_on_the_client_data(fedgr_run, capsys):
    cfg, data, run, _ = fedgr_run
    load_script("notes/fedgr_diagnose").main(run, data)
    lines = capsys.readouterr().out.splitlines()
    fed = FederatedDataset.load(data)
    store = make_context(cfg, fed, torch.device("cpu")).store
    model = build_model(cfg.model, store.in_shape, fed.num_classes, seed=cfg.seed)
    model.load_state_dict(torch.load(run / "model.pt"))
    model.eval()
    # Global indices through the shared store, not the script's per-client views: a client
    # order or index mix-up in the script would misalign its predictions with the truth.
    idx = np.concatenate(fed.client_indices)
    with torch.no_grad():
        logits = model(store.get(torch.as_tensor(idx)))
    prob = torch.softmax(logits, 1)
    conf, pred = (t.numpy() for t in prob.max(1))
    plain = lines[:lines.index(next(ln for ln in lines if ln.startswith("[weak]")))]
    assert _floats(plain[0])[0] == pytest.approx(np.mean(pred == fed.truth.y_true[idx]), abs=HALF3)
    assert _floats(plain[0])[-1] == pytest.approx(conf.max(), abs=HALF3)
    assert _floats(plain[1])[1] == pytest.approx(np.mean(conf >= 0.25), abs=HALF3)
    assert plain[4].split("histogram")[1].strip() == str(np.bincount(pred, minlength=fed.num_classes).tolist())
    y = fed.y_train.numpy()
    sizes = np.cumsum([len(p) for p in fed.client_indices])[:-1]
    loss = F.cross_entropy(logits, torch.as_tensor(y[idx]), reduction="none").numpy()
    for line, fit in zip(plain[5:7], (pooled_sieve, local_sieve), strict=True):
        res = fit(dict(enumerate(np.split(loss, sizes))), seed=0)
        est = np.array([res.rate[c] for c in range(fed.num_clients)])
        kept = np.concatenate([res.q[c] >= 0.5 for c in range(fed.num_clients)])
        pearson, mae, n_kept, clean = _floats(line.split("Pearson")[1])[:4]
        assert pearson == pytest.approx(np.corrcoef(est, fed.truth.realized_rate)[0, 1], abs=HALF3)
        assert mae == pytest.approx(np.abs(est - fed.truth.realized_rate).mean(), abs=HALF3)
        assert n_kept == kept.sum()
        assert clean == pytest.approx(np.mean(~fed.truth.is_noisy_sample[idx][kept]), abs=HALF3)
    weak_hist = next(ln for ln in lines[len(plain):] if "histogram" in ln)
    assert sum(_floats(weak_hist.split("histogram")[1])) == len(idx)


def test_views_grid_writes_one_png_per_available_dataset(tmp_path, capsys):
    load_script("fedgr_views").main([str(tmp_path), "--fmnist-root", str(tmp_path / "none")])
    out = capsys.readouterr().out
    assert (tmp_path / "fedgr_views_digits.png").stat().st_size > 0
    assert "fashion_mnist: skipped" in out and "cifar10: skipped" in out


def _expect(vals, scale=100.0, digits=1):
    """mean ± sample std (n - 1; one value: 0), computed apart from fedcore.stats.summary."""
    vals = [v for v in vals if v is not None and np.isfinite(v)]
    s = statistics.stdev(vals) if len(vals) > 1 else 0.0
    return f"{statistics.fmean(vals) * scale:.{digits}f} ± {s * scale:.{digits}f}" if vals else "-"


# Three seeds at 50, 60, 70 %: the sample std is 10.0, the population std 8.2.
@pytest.mark.parametrize("script, call", [
    ("fedgr_table", lambda m: m.fmt([0.5, 0.6, 0.7])),
    ("fedsir_table", lambda m: m.fmt([0.5, 0.6, 0.7])),
    ("fmnist_table", lambda m: m.fmt([0.5, 0.6, 0.7])),
    ("fedrg_bench", lambda m: m.cell([{"k": 0.5}, {"k": 0.6}, {"k": 0.7}], "k")),
])
def test_every_table_script_prints_the_sample_std_over_seeds(script, call):
    assert call(load_script(script)) == "60.0 ± 10.0"


def test_table_rows_are_recomputed_from_the_histories(fedgr_run, tmp_path, capsys):
    """lab/fedgr.sh's layout: FedGR on two seeds (links to one run), FedAvg on one."""
    cfg, data, run, res = fedgr_run
    avg = run_experiment(ExperimentConfig.model_validate({**cfg.model_dump(), "method": {"name": "fedavg"}}),
                         tmp_path / "fedavg-run", data=data)
    links = {"digits_sym/fedgr/s0": run, "digits_sym/fedgr/s1": run, "digits_sym/fedavg/s2": avg.out_dir,
             "digits_sym/fedgr-extra/s0": run}
    for link, target in links.items():
        (tmp_path / "root" / link).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "root" / link).symlink_to(target)
    (tmp_path / "root/digits_sym/fedgr/s2.log").write_text("error: training diverged in round 7: client(s) 1 ...\n")
    load_script("fedgr_table").main([str(tmp_path / "root"), "fedgr-extra"])
    rows = [[c.strip() for c in ln.strip("|").split("|")] for ln in capsys.readouterr().out.splitlines()
            if ln.startswith("| ") and not ln.startswith("| method")]
    table = {r[0]: r for r in rows}
    assert list(table) == ["fedavg", "fedgr", "fedgr-extra"]  # ORDER, then the extra variants
    h = res.history
    after = [r["noise/rate_pearson"] for r in h if "refine/tier_high_share" in r]
    decay = res.summary["final/acc_best"] - res.summary["final/acc_last10"]
    assert table["fedgr"][1:5] == [_expect([res.summary["final/acc_last10"]] * 2),
                                   _expect([res.summary["final/acc_best"]] * 2), _expect([decay] * 2),
                                   _expect([np.mean(after)] * 2, 1, 2)]
    assert table["fedgr"][6] == _expect([h[-1]["noise/rate_mae"]] * 2, 1, 3)
    assert table["fedgr"][11] == _expect([h[-1]["train/memorization"]] * 2)
    assert table["fedgr"][-1] == "0,1; s2 diverged in round 7"  # a lost seed is named, not dropped
    local = np.mean([r["train/local_memorization"] for r in h])
    assert table["fedavg"][1] == _expect([avg.summary["final/acc_last10"]]) and table["fedavg"][4:11] == ["-"] * 7
    assert table["fedgr"][13] == _expect([local] * 2)
