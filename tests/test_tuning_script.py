"""experiments/tuning.sh against a stand-in `fedcore`: what it tunes, runs, shares and skips.

The stand-in writes what `fedcore tune` / `data prepare` / `run` would (tune.json and best.yaml;
a manifest; metrics.json), so the test checks the script's plumbing on a fresh output folder
(where its first real use failed: the tune's log went to a folder that did not exist yet).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

FAKE_PY = r"""#!/usr/bin/env bash
echo "$*" >> "$FAKE_LOG"
if [[ "$1" != -m ]]; then exec "$REAL_PY" "$@"; fi   # the inline json reader and the table script
out=""; prev=""
for a in "$@"; do [[ "$prev" == --out ]] && out=$a; prev=$a; done
mkdir -p "$out"
case "$3" in
  tune) echo '{"n_trials": 2, "n_pruned": 1, "n_diverged": 0}' > "$out/tune.json"
        echo 'seed: 100' > "$out/best.yaml" ;;
  data) echo '{}' > "$out/manifest.json" ;;
  run) echo '{"summary": {"final/acc_last10": 0.4, "final/acc_best": 0.5, "final/acc_at_val_best": 0.45}}' \
         > "$out/metrics.json" ;;
esac
"""


def run_script(tmp_path: Path, out: Path, **grid: str) -> tuple[subprocess.CompletedProcess, list[str]]:
    """Run the script against the stand-in; `grid` replaces the default SCENES, METHODS, TRIALS, SEEDS."""
    py, log = tmp_path / "py", tmp_path / "log"
    py.write_text(FAKE_PY)
    py.chmod(0o755)
    env = {"PY": str(py), "FAKE_LOG": str(log), "REAL_PY": sys.executable, "PATH": "/usr/bin:/bin",
           **(grid or {"SCENES": "fedrg_sym_localized", "METHODS": "fedavg fedrg", "TRIALS": "2", "SEEDS": "0 1"})}
    done = subprocess.run(["bash", "experiments/tuning.sh", str(out)], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    lines = log.read_text().splitlines()
    log.unlink()
    return done, [c for c in lines if c.startswith("-m fedcore")]


def test_a_fresh_grid_tunes_runs_both_rows_on_shared_data_then_skips_everything(tmp_path):
    out = tmp_path / "grid"
    first, calls = run_script(tmp_path, out)
    assert "FAILED" not in first.stderr
    tunes = [c for c in calls if c.startswith("-m fedcore tune")]
    assert len(tunes) == 2 and all("-s seed=100" in c and "data.validation.fraction=0.1" in c for c in tunes)
    assert "train.rounds=40" in next(c for c in tunes if "--out " + str(out / "fedrg_sym_localized/fedrg/tune") in c)
    runs = [c for c in calls if c.startswith("-m fedcore run")]
    assert len(runs) == 2 * 2 * 2  # methods x {default, tuned} x seeds
    assert sum("tune/best.yaml" in c for c in runs) == 4
    # every run of seed s trains on the one artifact of seed s
    for s in (0, 1):
        assert all(f"--data {out}/fedrg_sym_localized/data-s{s} " in c for c in runs if f"seed={s} " in c)
    assert (out / "fedrg_sym_localized/fedavg/tune.log").is_file()
    assert "| fedavg | 2 (1 pruned, 0 diverged) | 40.0 ± 0.0 |" in first.stdout
    _, again = run_script(tmp_path, out)
    assert [c for c in again if c.startswith(("-m fedcore tune", "-m fedcore run", "-m fedcore data"))] == []
    assert json.loads((out / "fedrg_sym_localized/fedrg/tune/tune.json").read_text())["n_trials"] == 2


def test_a_named_variant_is_its_method_with_fixed_params(tmp_path):
    _, calls = run_script(tmp_path, tmp_path / "g", SCENES="fedgr_sym", METHODS="fedgr-robust", TRIALS="2", SEEDS="0")
    tune = next(c for c in calls if c.startswith("-m fedcore tune"))
    default = next(c for c in calls if c.startswith("-m fedcore run") and "/default/" in c)
    for c in (tune, default):
        assert "-s method.params.profile=robust" in c and "method.name=" not in c
    assert "fedgr-robust/tune" in tune


def test_a_multi_label_scene_tunes_only_the_methods_that_train_multi_label(tmp_path):
    _, calls = run_script(tmp_path, tmp_path / "h", SCENES="fedharmony_scenes", TRIALS="2", SEEDS="0 1")
    tunes = [c for c in calls if c.startswith("-m fedcore tune")]
    # Each seed draws its own benchmark, the tuning seed too: the tune never sees a reporting seed's data.
    assert all("-s data.params.seed=100 " in c for c in tunes)
    for c in (c for c in calls if c.startswith(("-m fedcore run", "-m fedcore data"))):
        assert f"-s data.params.seed={c.split('-s seed=')[1].split()[0]} " in c
    rows = sorted(c.split("--out ")[1].split()[0].split("/")[-2] for c in tunes)
    assert rows == ["fedavg", "fedharmony", "fedharmony-v3", "fedprox"]
    v3 = next(c for c in tunes if "fedharmony-v3/tune" in c)
    assert "-s method.params.lam=0.1" in v3 and "-s method.params.timing=start" in v3 and "method.name=" not in v3
    own = next(c for c in tunes if "/fedharmony/tune" in c)
    assert "method.params" not in own  # the preset's FedHarmony as it stands


def test_the_quickstart_is_a_scene_with_every_make_run_row(tmp_path):
    _, calls = run_script(tmp_path, tmp_path / "q", SCENES="quickstart", TRIALS="2", SEEDS="0")
    tunes = [c for c in calls if c.startswith("-m fedcore tune")]
    assert all(c.startswith("-m fedcore tune configs/quickstart.yaml ") and "data.params.seed" not in c for c in tunes)
    from fedcore.cli.quickstart import QUICKSTART_METHODS

    assert sorted(c.split("--out ")[1].split()[0].split("/")[-2] for c in tunes) == sorted(QUICKSTART_METHODS)


def test_logs_are_appended_so_a_refused_or_resumed_run_keeps_the_earlier_log(tmp_path):
    out = tmp_path / "a"
    log = out / "fedrg_sym_localized/fedavg/default/s0.log"
    log.parent.mkdir(parents=True)
    log.write_text("the running attempt's lines\n")
    run_script(tmp_path, out, SCENES="fedrg_sym_localized", METHODS="fedavg", TRIALS="2", SEEDS="0")
    assert log.read_text().startswith("the running attempt's lines\n")
