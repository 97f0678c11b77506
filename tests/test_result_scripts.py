"""The diagnostic scripts in docs/results still read what fedcore writes.

They read ground truth, so they live outside the library; these tests keep them from rotting
when a run's outputs or a method's hooks change.
"""

import contextlib
import importlib.util
import io
import re
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import fedcore.methods.fedgr as fedgr_mod
from fedcore.config import ExperimentConfig
from fedcore.data.build import build_federated_dataset
from fedcore.data.federated import FederatedDataset
from fedcore.metrics import flag_dependence
from fedcore.models import build_model
from fedcore.run import make_context, run_experiment
from fedcore.stats.sieving import local_sieve, pooled_sieve
from tests.methods.test_fedgr_method import digits_cfg

ROOT = Path(__file__).resolve().parents[1]
HALF2, HALF3 = 0.0051, 0.00051  # a printed .2f / .3f value: half a last digit, plus float slack at the tie


def load_script(name: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / "docs" / "results" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def fedgr_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("fedgr")
    cfg = digits_cfg(rounds=4, warmup=2)
    data = build_federated_dataset(cfg).save(tmp / "data")
    res = run_experiment(cfg, tmp / "run", data=data)
    return cfg, data, tmp / "run", res


def test_sieve_split_reports_the_final_sieve(fedgr_run, capsys):
    _, data, run, res = fedgr_run
    load_script("fedgr_sieve_split").main(["split", str(run), str(data)])
    cells = [c.strip() for c in capsys.readouterr().out.strip().splitlines()[-1].strip("|").split("|")]
    sieve = res.state.extra["sieve"]
    fed = build_federated_dataset(digits_cfg())
    idx = np.concatenate([fed.client_indices[c] for c in sorted(sieve)])
    flags = np.concatenate([np.asarray(sieve[c]["q"]) < 0.5 for c in sorted(sieve)])
    accs = [h["test/acc"] for h in res.history]
    assert float(cells[1]) == pytest.approx(100 * np.mean(accs[-10:]), abs=0.05)
    assert float(cells[2]) == pytest.approx(100 * accs[1], abs=0.05)  # hand-over: after round alpha = 2
    assert float(cells[3]) == pytest.approx(flag_dependence(flags, fed.y_train.numpy()[idx]), abs=0.005)
    assert float(cells[4]) == pytest.approx(flag_dependence(flags, fed.truth.is_noisy_sample[idx]), abs=0.005)
    assert len(cells[5].split()) == fed.num_classes


def test_class_norm_sieve_sees_per_class_z_scores_and_restores_fedgr(fedgr_run, tmp_path, monkeypatch):
    cfg, data, _, _ = fedgr_run
    mod = load_script("fedgr_sieve_split")
    z = mod._z_within(np.array([1.0, 3.0, 10.0, 30.0, 5.0]), np.array([0, 0, 1, 1, 2]))
    np.testing.assert_allclose(z, [-1, 1, -1, 1, 0])
    seen = []
    orig = fedgr_mod.pooled_sieve
    monkeypatch.setattr(fedgr_mod, "pooled_sieve", lambda lbar, **kw: seen.append(lbar) or orig(lbar, **kw))
    before = (fedgr_mod.FedGR.client_probe, fedgr_mod.FedGR.after_probe)
    (tmp_path / "cfg.yaml").write_text(cfg.to_yaml())
    mod.class_norm(str(tmp_path / "cfg.yaml"), str(data), str(tmp_path / "run"), [])
    assert (fedgr_mod.FedGR.client_probe, fedgr_mod.FedGR.after_probe) == before
    fed = build_federated_dataset(cfg)
    assert seen  # one pooled fit per post-warm-up round
    for lbar in seen:
        pooled = np.concatenate([lbar[c] for c in sorted(lbar)])
        y = np.concatenate([fed.y_train.numpy()[fed.client_indices[c]] for c in sorted(lbar)])
        for k in np.unique(y):
            if (y == k).sum() > 1 and pooled[y == k].std() > 0:
                assert pooled[y == k].mean() == pytest.approx(0.0, abs=1e-9)
                assert pooled[y == k].std() == pytest.approx(1.0, abs=1e-9)


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
    load_script("fedgr_diagnose").main(run, data)
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


@pytest.fixture(scope="module")
def trace_run(fedgr_run, tmp_path_factory):
    """fedgr_trace on the fixture's config run for 6 rounds, so round 5 gets its kept-set line."""
    cfg, data, _, _ = fedgr_run
    tmp = tmp_path_factory.mktemp("trace")
    (tmp / "cfg.yaml").write_text(cfg.to_yaml())
    mod, results = load_script("fedgr_trace"), []
    orig = mod.run_experiment
    hooks = (fedgr_mod.FedGR.after_probe, fedgr_mod.FedGR._targets)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(mod, "run_experiment", lambda *a, **k: results.append(orig(*a, **k)) or results[-1])
        # A faster learner than the fixture's, whose flat test accuracy would hide a round mix-up.
        sets = ["train.rounds=6", "train.lr=0.2", "train.local_epochs=2"]
        out = _run_quiet(mod.main, str(tmp / "cfg.yaml"), str(data), str(tmp / "run"), sets)
    # The script patches FedGR while it runs; later tests need the real method back.
    assert (fedgr_mod.FedGR.after_probe, fedgr_mod.FedGR._targets) == hooks
    return data, out.splitlines(), results[0]


def test_trace_reports_each_sieve_round_and_the_kept_set(trace_run):
    data, lines, res = trace_run
    sieve_lines = [ln for ln in lines if "median lbar" in ln]
    assert [int(_floats(ln)[0]) for ln in sieve_lines] == [2, 3, 4, 5]  # every round after warm-up
    fed = FederatedDataset.load(data)
    truth = fed.truth
    sieve = res.state.extra["sieve"]
    cids = sorted(sieve)
    noisy = np.concatenate([truth.is_noisy_sample[fed.client_indices[c]] for c in cids])
    q = np.concatenate([sieve[c]["q"] for c in cids])
    rate = np.array([sieve[c]["rate"] for c in cids])
    _, _, _, precision, recall, pearson, binary = _floats(sieve_lines[-1].replace("q<.5", "q"))
    assert precision == pytest.approx(noisy[q < 0.5].mean(), abs=HALF2)
    assert recall == pytest.approx((q < 0.5)[noisy].mean(), abs=HALF2)
    assert pearson == pytest.approx(np.corrcoef(rate, truth.realized_rate[cids])[0, 1], abs=HALF2)
    assert binary == pytest.approx(np.mean((q < 0.01) | (q > 0.99)), abs=HALF2)
    kept_line = next(ln for ln in lines if "kept" in ln)
    row = next(h for h in res.history if h["round"] == 6.0)  # 0-based round 5 is the 6th row
    assert row["test/acc"] != res.history[4]["test/acc"]  # else the next line cannot tell the rounds apart
    assert _floats(kept_line)[:2] == [5, pytest.approx(1 - row["refine/mask_rate"], abs=HALF2)]
    assert _floats(kept_line)[-1] == pytest.approx(row["test/acc"], abs=HALF3)
    assert _floats(lines[-1])[-1] == pytest.approx(np.mean([h["test/acc"] for h in res.history]))


def _expect(vals, scale=100.0, digits=1):
    vals = [v for v in vals if v is not None and np.isfinite(v)]
    return f"{np.mean(vals) * scale:.{digits}f} ± {np.std(vals) * scale:.{digits}f}" if vals else "-"


@pytest.fixture(scope="module")
def fedgr_tables(fedgr_run, trace_run, tmp_path_factory):
    """docs/results/fedgr.sh's layout: FedGR on two seeds (the fixture run and the 6-round trace run),
    FedAvg and a named extra variant on one."""
    cfg, data, run, res = fedgr_run
    root = tmp_path_factory.mktemp("fedgr-root")
    avg = run_experiment(ExperimentConfig.model_validate({**cfg.model_dump(), "method": {"name": "fedavg"}}),
                         root / "fedavg-run", data=data)
    sym, mixed = (root / p for p in load_script("fedgr_table").PRESETS)
    links = {sym / "fedgr/s0": run, sym / "fedgr/s1": trace_run[2].out_dir, sym / "fedavg/s2": avg.out_dir,
             sym / "fedgr-extra/s0": run, mixed / "fedgr/s0": run}
    for link, target in links.items():
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(target)
    return root, [res, trace_run[2]], avg


def _sections(text: str) -> dict[str, list[list[str]]]:
    out = {}
    for block in text.split("### ")[1:]:
        title, *rows = block.strip().splitlines()
        out[title] = [[c.strip() for c in r.strip("|").split("|")] for r in rows if r.startswith("| ")]
    return out


def test_table_rows_are_recomputed_from_the_histories(fedgr_tables, capsys):
    root, fedgr_runs, avg = fedgr_tables
    load_script("fedgr_table").main([str(root), "fedgr-extra"])
    tabs = _sections(capsys.readouterr().out)
    sym = {r[0]: r for r in tabs["fedgr_digits_noniid_sym"][1:]}
    assert list(sym) == ["fedavg", "fedgr", "fedgr-extra"]  # ORDER, then the extra variants
    assert [r[0] for r in tabs["fedgr_digits_noniid_mixed"][1:]] == ["fedgr"]

    def last(h, key):
        vals = [r[key] for r in h if key in r]
        return vals[-1] if vals else None

    hs = [r.history for r in fedgr_runs]
    pearson = [[r["noise/rate_pearson"] for r in h if "noise/rate_pearson" in r] for h in hs]
    assert sym["fedgr"][1:] == [
        _expect([r.summary["final/acc_last10"] for r in fedgr_runs]), _expect([p[-1] for p in pearson], 1, 2),
        _expect([np.mean(p) for p in pearson], 1, 2), _expect([last(h, "noise/rate_mae") for h in hs], 1, 3),
        _expect([last(h, "detect/sample_f1") for h in hs], 1, 2),
        _expect([last(h, "refine/mask_rate") for h in hs], 1, 2),
        _expect([last(h, "train/memorization") for h in hs]), "2"]
    # FedAvg estimates nothing: accuracy only, every estimate column empty.
    assert sym["fedavg"][1] == _expect([avg.summary["final/acc_last10"]]) and sym["fedavg"][2:7] == ["-"] * 5
    cmds = {r[0]: r[1] for r in tabs["Commands"][1:]}
    assert "method.name=fedavg" in cmds["fedavg"] and cmds["fedgr-extra"].endswith("(see text)`")


def test_sens_table_splits_held_out_seeds_and_finds_references(fedgr_tables, tmp_path, capsys):
    root, fedgr_runs, _ = fedgr_tables
    sym, mixed = (tmp_path / p for p in load_script("fedgr_table").PRESETS)
    for seed, run in ((0, fedgr_runs[0]), (1, fedgr_runs[1]), (3, fedgr_runs[1])):
        (sym / "lr").mkdir(parents=True, exist_ok=True)
        (sym / "lr" / f"s{seed}").symlink_to(run.out_dir)
    assert not mixed.exists()  # a grid run on one preset only must still print its rows
    load_script("fedgr_table").main(["--sens", str(tmp_path), str(root)])
    rows = [[c.strip() for c in r.strip("|").split("|")] for r in capsys.readouterr().out.splitlines()[2:]]
    acc = [r.summary["final/acc_last10"] for r in fedgr_runs]
    assert [r[:3] for r in rows] == [["sym", "lr", "0,1"], ["sym", "lr", "3"]]
    assert rows[0][3] == f"{acc[0] * 100:.1f} / {acc[1] * 100:.1f}" and rows[0][4] == _expect(acc)
    # References come from the main root: FedGR holds seeds 0 and 1, FedAvg only seed 2.
    assert rows[0][5:7] == ["-", _expect(acc)] and rows[1][5:7] == ["-", "-"]
