"""The FedRG / FedSIR result scripts and the strong-view check in lab/ still read what
fedcore writes (see lab/tests/test_result_scripts.py for the FedGR ones)."""

import csv
import functools
import statistics
from pathlib import Path

import numpy as np
import pytest
from sklearn.metrics import f1_score

import fedcore.methods.fedrg as fedrg_mod
from fedcore.data.build import build_federated_dataset
from fedcore.data.federated import FederatedDataset
from fedcore.engine.checkpoint import load_checkpoint
from fedcore.run import run_experiment
from lab.tests.test_result_scripts import HALF2, HALF3, _floats, _run_quiet, load_script
from tests.methods.test_fednoro import digits_cfg as fednoro_cfg
from tests.methods.test_fedrg import digits_cfg as fedrg_cfg

FAST = {"identify_epochs": 5, "relabel_every": 2, "min_class_n": 5}  # as in tests/methods/test_fedsir.py


def load_csv(path: Path) -> list[dict]:
    return list(csv.DictReader(path.open()))


def _rows(lines: list[str]) -> list[list[str]]:
    return [[c.strip() for c in ln.strip("|").split("|")] for ln in lines if ln.startswith("| ")][1:]


@pytest.fixture(scope="module")
def fedrg_diag(tmp_path_factory):
    """fedrg_diagnose on a 1 + 2 round FedRG run, as `fedcore run` with a config file would."""
    tmp = tmp_path_factory.mktemp("fedrg")
    cfg = fedrg_cfg()
    data = build_federated_dataset(cfg).save(tmp / "data")
    (tmp / "cfg.yaml").write_text(cfg.to_yaml())
    detect = fedrg_mod.FedRG.detect
    out = _run_quiet(load_script("notes/fedrg_diagnose").main, str(tmp / "cfg.yaml"), str(data), str(tmp / "run"), [])
    # The script wraps FedRG.detect while it runs; later tests need the real one back.
    assert fedrg_mod.FedRG.detect is detect
    tables = out.split("\n\n")
    return FederatedDataset.load(data), tmp / "run", _rows(tables[0].splitlines()), _rows(tables[1].splitlines())


def test_fedrg_diagnose_split_f1_matches_the_run_and_its_checkpoint(fedrg_diag):
    fed, run, table, _ = fedrg_diag
    history = [r for r in load_csv(run / "history.csv") if r["stage"] == "train"]
    # The script keys rounds by the 0-based task round; history.csv by the 1-based round count.
    assert [(int(r[0]), r[1]) for r in table] == [
        (int(float(h["round"])) - 1, kind) for h in history for kind in ("geometry", "small_loss")]
    for h, (geo, small) in zip(history, zip(table[::2], table[1::2], strict=True), strict=True):
        assert float(geo[4]) == pytest.approx(float(h["detect/sample_f1"]), abs=HALF3)
        assert float(small[4]) == pytest.approx(float(h["detect/small_loss/sample_f1"]), abs=HALF3)
        assert all(0 <= float(c) <= 1 for c in geo[2:] + small[2:])
    flags = [~c["clean"] for c in load_checkpoint(run / "checkpoints" / "stage-train.pt")["clients"]]
    noisy = [fed.truth.is_noisy_sample[idx] for idx in fed.client_indices]
    assert float(table[-2][3]) == pytest.approx(np.mean([f.mean() for f in flags]), abs=HALF2)
    assert float(table[-2][4]) == pytest.approx(np.mean([f1_score(t, f) for t, f in zip(noisy, flags, strict=True)]),
                                                abs=HALF3)


def test_fedrg_diagnose_rare_class_false_positives(fedrg_diag):
    fed, run, table, rare = fedrg_diag
    assert [(r[0], r[1]) for r in rare] == [(table[i][0], k) for i in (0, -1) for k in ("geometry", "small_loss")]
    flags = [~c["clean"] for c in load_checkpoint(run / "checkpoints" / "stage-train.pt")["clients"]]
    counts = {True: [0, 0], False: [0, 0]}
    for idx, flag in zip(fed.client_indices, flags, strict=True):
        y, clean = fed.truth.y_true[idx], ~fed.truth.is_noisy_sample[idx]
        rare_cls = np.isin(y, np.flatnonzero(np.bincount(y) < 0.1 * len(y)))
        for is_rare in (True, False):
            m = clean & (rare_cls == is_rare)
            counts[is_rare][0] += int((flag & m).sum())
            counts[is_rare][1] += int(m.sum())
    assert all(int(r[4]) == counts[True][1] for r in rare)  # the rare clean samples do not depend on the round
    assert counts[True][1] > 0  # else the rare column below checks nothing
    last_geometry = rare[-2]
    assert float(last_geometry[2]) == pytest.approx(counts[True][0] / counts[True][1], abs=HALF3)
    assert float(last_geometry[3]) == pytest.approx(counts[False][0] / counts[False][1], abs=HALF3)


@pytest.fixture(scope="module")
def fedsir_root(tmp_path_factory):
    """lab/fedsir.sh's layout for both presets, from three short runs on one scene:
    FedSIR (seeds 0 and 2), FedSIR with a shorter identify stage (seed 1), FedAvg (seed 0)."""
    root = tmp_path_factory.mktemp("fedsir")
    fed = build_federated_dataset(fednoro_cfg("fedsir"))
    a = run_experiment(fednoro_cfg("fedsir", rounds=3, **FAST), root / "a", data=fed)
    b = run_experiment(fednoro_cfg("fedsir", rounds=3, **{**FAST, "identify_epochs": 2}), root / "b", data=fed)
    avg = run_experiment(fednoro_cfg("fedavg", rounds=3), root / "avg", data=fed)
    links = {f"{p}/fedsir/s{s}": r for p in ("fedsir_digits", "fedsir_digits_06") for s, r in enumerate((a, b, a))}
    links |= {"fedsir_digits/fedavg/s0": avg, "sweep/fedsir_digits/e5-lr1e-3-n5/s0": a,
              "sweep/fedsir_digits/e5-lr1e-3-n5/s1": b}
    for rel, res in links.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).symlink_to(res.out_dir)
    return root, (a, b, a), avg


def test_fedsir_table_recomputes_means_over_seeds(fedsir_root, capsys):
    root, runs, avg = fedsir_root
    load_script("fedsir_table").main(root)
    out = capsys.readouterr().out
    section = out.split("### fedsir_digits\n")[1].split("###")[0].splitlines()
    table = {r[0]: r for r in _rows([ln for ln in section if ln.count("|") == 8])}
    assert list(table) == ["fedavg (1)", "fedsir (3)"]

    def first_last(h, key):
        vals = [r[key] for r in h if key in r]
        return vals[0], vals[-1]

    f1 = [first_last(r.history, "detect/client_f1")[0] for r in runs]
    prec = np.array([first_last(r.history, "relabel/precision") for r in runs])
    rec = np.array([first_last(r.history, "relabel/recall") for r in runs])
    acc = [r.summary["final/acc_last10"] for r in runs]
    assert len(set(f1)) > 1  # else a broken mean over seeds would go unnoticed
    assert table["fedsir (3)"][1:5] == [f"{np.mean(acc) * 100:.1f} ± {statistics.stdev(acc) * 100:.1f}",
                                        f"{np.mean(f1):.3f}",
                                        "{:.3f} / {:.3f}".format(*prec.mean(0)), "{:.3f} / {:.3f}".format(*rec.mean(0))]
    acc_avg = avg.summary["final/acc_last10"] * 100
    assert table["fedavg (1)"][1:] == [f"{acc_avg:.1f} ± 0.0", "-", "- / -", "- / -", "-", "-"]
    assert f"F1 = 1.0 on {sum(v == 1.0 for v in f1)} of 3 seeds (s0: {f1[0]:.3f}, s1: {f1[1]:.3f}" in out
    events = _rows([ln for ln in section if ln.count("|") == 7])
    rounds = [r["round"] for r in runs[0].history if "relabel/precision" in r]
    assert [float(r[0]) for r in events] == rounds
    assert [float(r[1]) for r in events] == pytest.approx(prec.mean(0), abs=HALF3)
    sweep = _rows(out.split("### identification, sweep")[1].splitlines())
    assert sweep == [["fedsir_digits", "5", "1e-3", "5", f"{sum(v == 1.0 for v in f1[:2])} / 2",
                      f"{f1[0]:.2f} {f1[1]:.2f}"]]


def test_strongview_plain_view_is_the_test_set_itself(monkeypatch, capsys):
    mod = load_script("notes/fedgr_strongview")
    # One epoch instead of 40: the check is that views and labels still line up, not how well it learns.
    monkeypatch.setattr(mod, "train_eval", functools.partial(mod.train_eval, epochs=1))
    mod.main()
    rows = {ln[:28].strip(): _floats(ln[28:]) for ln in capsys.readouterr().out.splitlines()}
    assert list(rows) == ["plain", "weak", "strong m=1.0 cutout=0.5", "strong m=0.5 cutout=0.25"]
    clean, viewed = rows["plain"]
    assert clean == viewed  # the plain "view" of the test set is the test set
    assert clean > 0.5  # images and labels still paired: shuffled labels would sit near 0.1
    assert all(0 <= v <= 1 for r in rows.values() for v in r)


def test_fedsir_table_reports_a_partial_grid(fedsir_root, tmp_path, capsys):
    """Mid-grid (one preset, seed 2 not run yet) the script prints what exists instead of crashing."""
    root, runs, _ = fedsir_root
    for s in (0, 1):
        (tmp_path / "fedsir_digits" / "fedsir").mkdir(parents=True, exist_ok=True)
        (tmp_path / "fedsir_digits" / "fedsir" / f"s{s}").symlink_to(runs[s].out_dir)
    load_script("fedsir_table").main(tmp_path)
    out = capsys.readouterr().out
    assert f"### fedsir_digits_06: no runs under {tmp_path / 'fedsir_digits_06'}" in out
    acc = [r.summary["final/acc_last10"] for r in runs[:2]]
    assert f"| fedsir (2) | {np.mean(acc) * 100:.1f} ± {statistics.stdev(acc) * 100:.1f} |" in out
    events = min(sum("relabel/precision" in h for h in r.history) for r in runs[:2])
    assert events > 0 and len(_rows(out.split("relabel events")[1].splitlines())) == events
