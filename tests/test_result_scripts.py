"""The diagnostic scripts in docs/results still read what fedcore writes.

They read ground truth, so they live outside the library; these tests keep them from rotting
when a run's outputs or a method's hooks change.
"""

import importlib.util
from pathlib import Path

import numpy as np
import pytest

import fedcore.methods.fedgr as fedgr_mod
from fedcore.data.federated import build_federated_dataset
from fedcore.metrics import flag_dependence
from fedcore.run import run_experiment
from tests.methods.test_fedgr_method import digits_cfg

ROOT = Path(__file__).resolve().parents[1]


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
