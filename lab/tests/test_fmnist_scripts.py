"""The `fmnist` modes of lab/*.sh (through fmnist_lib.sh) and fmnist_table.py.

`PY` is a stand-in that logs each call and writes what `fedcore data prepare` / `fedcore run`
would (a manifest; metrics.json and history.csv with chosen numbers), so the test checks what
the scripts queue, share, skip and resume, and what the table computes, without training.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

FAKE_PY = r"""#!/usr/bin/env bash
echo "$*" >> "$FAKE_LOG"
if [[ "$1" != -m ]]; then exec "$REAL_PY" "$@"; fi   # the table script
out=""; prev=""
for a in "$@"; do [[ "$prev" == --out ]] && out=$a; prev=$a; done
mkdir -p "$out"
if [[ "$3" == data ]]; then echo '{}' > "$out/manifest.json"; exit 0; fi
if [[ -n "${FAKE_DIVERGE:-}" && "$*" == *"$FAKE_DIVERGE"* ]]; then  # what the engine says, exit 2, no metrics
  echo "error: training diverged in round 35: client(s) 5 returned NaN/inf parameters" >&2; exit 2
fi
# fedavg: last-10 0.30, best 0.50 at round 4; every other method: last-10 0.55, best 0.60 at round 9
if [[ "$*" == *method.name=fedavg* ]]; then l=0.30 b=0.50 r=4; else l=0.55 b=0.60 r=9; fi
echo "{\"summary\": {\"final/acc_last10\": $l, \"final/acc_best\": $b, \"final/acc_best_round\": $r}}" \
  > "$out/metrics.json"
printf 'round,train/memorization,detect/client_f1\n1,0.1,1.0\n2,0.4,\n' > "$out/history.csv"
"""


@pytest.fixture
def fake(tmp_path: Path) -> dict:
    py = tmp_path / "py"
    py.write_text(FAKE_PY)
    py.chmod(0o755)
    return {"PY": str(py), "FAKE_LOG": str(tmp_path / "log"), "REAL_PY": sys.executable, "PATH": "/usr/bin:/bin"}


def script(env: dict, *args: str) -> subprocess.CompletedProcess:
    out = subprocess.run(["bash", *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    return out


def calls(env: dict, kind: str) -> list[str]:
    log = Path(env["FAKE_LOG"])
    lines = log.read_text().splitlines() if log.exists() else []
    return [c for c in lines if c.startswith(f"-m fedcore {kind}")]


def test_fedsir_fmnist_mode_shares_data_skips_and_resumes(tmp_path: Path, fake: dict):
    out = tmp_path / "fm"
    first = script(fake, "lab/fedsir.sh", "fmnist", str(out))
    runs = calls(fake, "run")
    # 2 presets x (7 baselines + clean ceiling + FedSIR + 6 ablations) x 3 seeds
    assert len(runs) == 2 * 15 * 3
    assert len(calls(fake, "data")) == 2 * 2 * 3  # one noisy and one clean artifact per preset and seed
    for r in runs:
        seed = r.split("-s seed=")[1].split()[0]
        preset = r.split("configs/fmnist/")[1].split(".yaml")[0]
        data = f"{out}/{preset}/data-{'clean-' if '/fedavg-clean/' in r else ''}s{seed}"
        assert f"--data {data} " in r
    assert "method.params.relabel=false" in " ".join(runs) and "method.name=dividemix" in " ".join(runs)
    # The table: FedSIR rows above FedAvg's best round (0.55 > 0.50) beat it; memorization first -> last.
    assert "| fedsir (3) | 55.0 ± 0.0 | 60.0 ± 0.0 | 9 ± 0 | 10.0 ± 0.0 → 40.0 ± 0.0 | 1.00 ± 0.00 | - " \
           "| yes (+5.0) |" in first.stdout
    assert "| fedavg (3) | 30.0 ± 0.0 | 50.0 ± 0.0 | 4 ± 0 |" in first.stdout
    assert "- fedsir-no_kd: `fedcore run configs/fmnist/fedsir_09.yaml --data" in first.stdout

    Path(fake["FAKE_LOG"]).unlink()
    (out / "fedsir_09/fedsir/s1/metrics.json").unlink()  # interrupted: checkpoints, no metrics.json
    (out / "fedsir_09/fedsir/s1/checkpoints").mkdir()
    (out / "fedsir_09/fedsir/s1/checkpoints/stage-identify.pt").write_bytes(b"x")
    script(fake, "lab/fedsir.sh", "fmnist", str(out))
    again = calls(fake, "run")
    assert len(again) == 1 and f"--resume {out}/fedsir_09/fedsir/s1" in again[0]
    assert calls(fake, "data") == []


@pytest.mark.parametrize(("args", "presets", "own_rows", "probes"), [
    # + FedRG, its 3 v2 variants and their combination; 2 exploratory rows on seed 0 only
    (["lab/fedrg.sh", "fmnist", "{out}"], 4, 5, 2),
    (["lab/baselines.sh", "fmnist", "{out}"], 8, 0, 0),
])
def test_other_docs_queue_every_baseline_on_their_presets(tmp_path: Path, fake: dict, args: list, presets: int,
                                                          own_rows: int, probes: int):
    out = tmp_path / "fm"
    res = script(fake, *[a.format(out=out) for a in args])
    runs = calls(fake, "run")
    assert len(runs) == presets * ((8 + own_rows) * 3 + probes)  # 7 baselines + FedAvg on clean labels
    assert sorted({r.split("--out ")[1].split()[0].rsplit("/", 1)[1] for r in runs if "/fedrg-post_t" in r}) == \
        (["s0"] if probes else [])
    assert all("train.stage_rounds={}" in r for r in runs if "method.name=" in r)  # baselines drop FedRG's
    for m in ("fedavg", "fedprox", "symmetric_ce", "coteaching", "fednoro", "fedcorr", "dividemix"):
        assert sum(f"method.name={m} " in r for r in runs) == presets * 3 * (2 if m == "fedavg" else 1)
    assert res.stdout.count("### ") == presets


def test_fedgr_fmnist_mode_adds_its_rows_and_the_clean_label_check(tmp_path: Path, fake: dict):
    out = tmp_path / "fm"
    res = script(fake, "lab/fedgr.sh", str(out), "1", "fmnist")
    runs = calls(fake, "run")
    # 2 presets x (7 baselines + FedAvg clean + FedGR + FedGR clean + 4 ablations + the class-wise
    # sieve + plain views w/o B + the robust profile, noisy and clean) x 3 seeds; FedGR v1, spec text
    # and probe timing on seed 0 of the sym preset; the B audit on seed 0: six rows on mixed and
    # plain views on sym; robust with strong views on seed 0 of sym; the CNN preset: FedAvg, both
    # profiles, SCE and FedCorr x 3 seeds.
    assert len(runs) == 2 * 18 * 3 + 3 + 7 + 1 + 5 * 3 + 2 * 3  # + SCE and FedCorr on sym's clean labels
    assert sum("method.params.profile=robust" in r for r in runs) == 2 * 2 * 3 + 1 + 3
    cnn = [r for r in runs if "/fedgr_sym_cnn/" in r]
    assert len(cnn) == 15
    assert sum("method.name=symmetric_ce " in r for r in cnn) == sum("method.name=fedcorr " in r for r in cnn) == 3
    audit = ["fedgr-teacher_global", "fedavg-sgd_authors", "fedgr-sgd_authors", "fedgr-plain", "fedgr-b_weighted",
             "fedgr-plain-b01"]
    assert sorted(r.split("--out ")[1].split()[0] for r in runs if any(f"/{a}/" in r for a in audit)) == \
        sorted([f"{out}/fedgr_mixed/{a}/s0" for a in audit] + [f"{out}/fedgr_sym/fedgr-plain/s0"])
    assert sum("method.params.distill_on=weighted" in r for r in runs) == 1
    assert sum("method.params.ema_distill=false" in r and "views=plain" in r for r in runs) == 6
    for row in ("fedgr-clean", "fedavg-clean", "symmetric_ce-clean", "fedcorr-clean"):
        mine = [r for r in runs if f"/{row}/" in r]
        both_presets = row in ("fedgr-clean", "fedavg-clean")
        assert len(mine) == (6 if both_presets else 3) and all("/data-clean-s" in r for r in mine)
        # the run must name the clean scene too, or the artifact's config hash refuses it
        assert all("-s noise.type=none" in r for r in mine)
    assert all("/data-s" in r and "noise.type=none" not in r for r in runs if "-clean/" not in r)
    v1 = [r for r in runs if "/fedgr-v1/" in r]
    assert len(v1) == 1 and "fedgr_sym/fedgr-v1/s0" in v1[0] and "method.params.beta=0.4" in v1[0]
    assert sum("method.params.sieving=false" in r for r in runs) == 6
    assert sum("method.params.sieve_by=class" in r for r in runs) == 6
    assert "| fedgr (3) | 55.0 ± 0.0 |" in res.stdout and "| fedgr-v1 (1) |" in res.stdout
    assert "- fedgr-clean: `fedcore run configs/fmnist/fedgr_mixed.yaml --data" in res.stdout
    assert "| fedgr | 55.0 ± 0.0 | 60.0 ± 0.0 |" in res.stdout  # fedgr_table.py's columns follow

    Path(fake["FAKE_LOG"]).unlink()
    fake["FM_ROWS"], fake["SEEDS"] = "fedgr", "3"
    script(fake, "lab/fedgr.sh", str(out), "1", "fmnist")
    assert sorted(r.split("--out ")[1].split()[0] for r in calls(fake, "run")) == \
        [f"{out}/fedgr_mixed/fedgr/s3", f"{out}/fedgr_sym/fedgr/s3", f"{out}/fedgr_sym_cnn/fedgr/s3"]


def test_a_diverged_seed_is_named_in_the_table_and_not_retried_unless_asked(tmp_path: Path, fake: dict):
    out = tmp_path / "fm"
    fake.update(FM_ROWS="fedavg coteaching", FAKE_DIVERGE="seed=2 -s method.name=coteaching")
    first = script(fake, "lab/baselines.sh", "fmnist", str(out))
    assert first.stdout.count("| coteaching (2; s2 diverged in round 35) | 55.0 ± 0.0 |") == 8  # every preset
    assert "| fedavg (3) |" in first.stdout
    assert "FAILED" in first.stdout and not (out / "fedsir_09/coteaching/s2/metrics.json").exists()

    Path(fake["FAKE_LOG"]).unlink()
    again = script(fake, "lab/baselines.sh", "fmnist", str(out))
    assert calls(fake, "run") == []
    assert f"skipping {out}/fedsir_09/coteaching/s2 (diverged before" in again.stderr

    fake["FM_RETRY"] = "1"
    script(fake, "lab/baselines.sh", "fmnist", str(out))
    retried = [r.split("--out ")[1].split()[0] for r in calls(fake, "run")]
    assert len(retried) == 8 and all(r.endswith("/coteaching/s2") for r in retried)
