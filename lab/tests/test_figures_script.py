"""lab/figures.sh against a stand-in `fedcore report`: a set is drawn only from finished
runs, every one of them, and its old PNGs are replaced."""

from __future__ import annotations

import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

FAKE_PY = r"""#!/usr/bin/env bash
echo "$*" >> "$FAKE_LOG"
out=""; prev=""
for a in "$@"; do [[ "$prev" == --out ]] && out=$a; prev=$a; done
[ -n "$out" ] || exit 0  # the tuning summary (fedcore bench-table --figure): only logged
printf 'png' > "$out/accuracy.png"; printf '# report' > "$out/report.md"
"""
RUNS = [f"{m}/{row}/s{s}" for m, row in (("fedavg", "default"), ("fedavg", "tuned"), ("symmetric_ce", "tuned"),
                                         ("fedprox", "tuned"), ("fedrg", "default")) for s in range(3)]


def _run(tmp_path: Path, runs: Path, out: Path, bench: str = "") -> subprocess.CompletedProcess:
    py = tmp_path / "py"
    py.write_text(FAKE_PY)
    py.chmod(0o755)
    # The other sets read their own run folders: point them at empty ones, whatever this checkout holds.
    env = {"PY": str(py), "FAKE_LOG": str(tmp_path / "log"), "OUT": str(out), "PATH": "/usr/bin:/bin",
           **{k: str(tmp_path / "none") for k in ("FEDGR_RUNS", "FEDSIR_RUNS", "FEDHARMONY_RUNS")},
           "TUNING_BENCH": bench or str(tmp_path / "none")}
    done = subprocess.run(["bash", "lab/figures.sh", str(runs)], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done


def test_a_set_with_an_unfinished_run_is_skipped_then_drawn_from_all_its_runs(tmp_path):
    runs, out = tmp_path / "runs", tmp_path / "img"
    for r in RUNS[:-1]:  # FedRG's seed 2 has not finished
        (runs / "fedrg_sym_localized" / r).mkdir(parents=True)
        (runs / "fedrg_sym_localized" / r / "metrics.json").write_text("{}")
    # The summary reads the bench results that exist, in the order given.
    benches = [tmp_path / "b1", tmp_path / "absent", tmp_path / "b2"]
    for b in (benches[0], benches[2]):
        b.mkdir()
        (b / "bench.json").write_text("{}")
    bench = " ".join(map(str, benches))
    first = _run(tmp_path, runs, out, bench)
    assert "fedrg_sym_localized skipped (1 of 15 runs missing" in first.stderr
    # Only the tuning summary was asked for (it draws whatever has finished); no report ran.
    assert (tmp_path / "log").read_text().splitlines() == [
        f"-m fedcore bench-table --summary --figure {out}/tuning/summary.png {benches[0]} {benches[2]}"]
    assert not (out / "fedrg_sym_localized").exists()
    (tmp_path / "log").unlink()

    (runs / "fedrg_sym_localized" / RUNS[-1]).mkdir(parents=True)
    (runs / "fedrg_sym_localized" / RUNS[-1] / "metrics.json").write_text("{}")
    (out / "fedrg_sym_localized").mkdir(parents=True)
    (out / "fedrg_sym_localized" / "stale.png").write_text("old")
    _run(tmp_path, runs, out, bench)
    call, summary = (tmp_path / "log").read_text().splitlines()
    assert summary.startswith("-m fedcore bench-table --summary --figure ")
    assert call.startswith("-m fedcore report ") and all(str(runs / "fedrg_sym_localized" / r) in call for r in RUNS)
    assert sorted(p.name for p in (out / "fedrg_sym_localized").iterdir()) == ["accuracy.png"]  # PNGs only, fresh


def test_every_set_reads_its_own_runs_folder(tmp_path):
    # FedSIR's set is drawn from FEDSIR_RUNS/fedsir_09 (the fmnist runs), not from the tuning runs.
    fedsir = tmp_path / "fm"
    rows = [f"{m}/s{s}" for m in ("fedavg", "fednoro", "fedsir") for s in range(3)]
    for r in rows:
        (fedsir / "fedsir_09" / r).mkdir(parents=True)
        (fedsir / "fedsir_09" / r / "metrics.json").write_text("{}")
    py = tmp_path / "py"
    py.write_text(FAKE_PY)
    py.chmod(0o755)
    out = tmp_path / "img"
    env = {"PY": str(py), "FAKE_LOG": str(tmp_path / "log"), "OUT": str(out), "PATH": "/usr/bin:/bin",
           "FEDSIR_RUNS": str(fedsir), "FEDGR_RUNS": str(tmp_path / "none"), "FEDHARMONY_RUNS": str(tmp_path / "none"),
           "TUNING_BENCH": str(tmp_path / "none")}
    done = subprocess.run(["bash", "lab/figures.sh", str(tmp_path / "tuning")], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    (call,) = (tmp_path / "log").read_text().splitlines()
    assert all(str(fedsir / "fedsir_09" / r) in call for r in rows)
    assert "fedharmony_v3 skipped (9 of 9 runs missing" in done.stderr
    assert "tuning summary skipped (no bench.json in TUNING_BENCH" in done.stderr
    assert (out / "fedsir_09" / "accuracy.png").is_file()
