#!/usr/bin/env bash
# Reproduce lab/results/notes/fedrg.md: FedAvg / SCE / FedRG (+ ablations) on the four digits
# scenarios, 3 seeds. Every method of a (scenario, seed) runs on one prepared artifact.
#   bash lab/fedrg.sh [OUT] [VARIANTS...]     (default OUT=runs/fedrg, all variants)
#   bash lab/fedrg.sh fmnist [OUT] [JOBS]     Fashion-MNIST ($FMNIST_PRESETS/fedrg_*, default
#        configs/fmnist): every baseline, FedAvg on clean labels, FedRG and its v2 variants, seeds 0-2 (the two
#        exploratory rows on the first seed only), then the tables (OUT defaults to runs/fmnist, shared with the
#        other docs)
# Runs two at a time, one thread each, niced; finished runs (metrics.json) are skipped.
# The digits scenarios are smoke-scale.
set -euo pipefail
if [ "${1:-}" = fmnist ]; then
  FMNIST_OUT=${2:-runs/fmnist} JOBS=${3:-1}
  # shellcheck source=lab/fmnist_lib.sh
  . "$(dirname "$0")/fmnist_lib.sh"
  # FedRG as the paper specifies, each v2 variant alone, their combination, and two exploratory
  # settings (lab/results/notes/fedrg.md). Equal budgets: FedRG's SimCLR rounds count inside the
  # baselines' total (`fedrg_bench.py pad` sets train.rounds from the stages each run declares).
  # The exploratory rows (the last two) run on the first of $SEEDS only: ~5.5 CPU-minutes a run.
  fedrg_rows=(
    "fedrg"
    "fedrg-posterior -s method.params.score=posterior"
    "fedrg-sce_clean -s method.params.sce_on=clean"
    "fedrg-t_est -s method.params.t_init=estimate"
    "fedrg-combo -s method.params.score=posterior -s method.params.sce_on=clean -s method.params.t_init=estimate"
    "fedrg-post_t -s method.params.score=posterior -s method.params.t_init=estimate"
    "fedrg-post_t_slow -s method.params.score=posterior -s method.params.t_init=estimate -s method.params.t_lr_scale=0.01"
  )
  probes=2
  presets=(fedrg_sym_localized fedrg_sym_globalized fedrg_pair_localized fedrg_pair_globalized)
  for preset in "${presets[@]}"; do
    fm_baselines "$preset"
    names=() overrides=()
    for row in "${fedrg_rows[@]}"; do
      read -r name rest <<< "$row"
      names+=("$name") overrides+=("$rest")
    done
    mapfile -t budget < <($PY lab/fedrg_bench.py pads "$FMNIST_PRESETS/$preset.yaml" "${overrides[@]}")
    for i in "${!fedrg_rows[@]}"; do
      seeds=$SEEDS
      if [ "$i" -ge $(( ${#fedrg_rows[@]} - probes )) ]; then seeds=${SEEDS%% *}; fi
      # shellcheck disable=SC2086  # a row's overrides and its budget are word lists
      SEEDS=$seeds fm_queue "$preset" "${names[i]}" ${overrides[i]} ${budget[i]}
    done
  done
  fm_go "${presets[@]}"
  # FedRG's own views: the variants side by side, the three detector views, the majority split.
  $PY lab/fedrg_bench.py table "$FMNIST_OUT"
  exit 0
fi
# An interrupted run (checkpoints, no metrics.json) is continued; `fedcore run` refuses to overwrite it.
resume_flag() { if compgen -G "$1/checkpoints/*.pt" > /dev/null; then echo "--resume $1"; fi; }
OUT=${1:-runs/fedrg}; shift || true
PY=${PY:-.venv/bin/python}
SEEDS=${SEEDS:-"0 1 2"}
SCENARIOS=${SCENARIOS:-"sym_localized sym_globalized pair_localized pair_globalized"}
VARIANTS=${*:-"fedavg sce fedrg t_off t_global no_ssl ce code_score slow_t t_lr_code fallback"}
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1

variant_args() {
  case $1 in
    fedavg) echo "-s method.name=fedavg -s method.params={} -s train.stage_rounds={}" ;;
    sce) echo "-s method.name=symmetric_ce -s method.params={} -s train.stage_rounds={}" ;;
    fedrg) echo "" ;;
    no_ssl) echo "-s method.params.ssl_pretrain=false" ;;
    t_off) echo "-s method.params.absorption=off" ;;
    t_global) echo "-s method.params.absorption=global" ;;
    ce) echo "-s method.params.loss=ce" ;;
    code_score) echo "-s method.params.score=code" ;;
    slow_t) echo "-s method.params.t_lr_scale=0.01" ;;
    t_lr_code) echo "-s method.params.t_lr_scale=0.2" ;;  # T at lr 0.01, the public code's fine-tune rate
    fallback) echo "-s method.params.b_fallback=true" ;;
    *) echo "unknown variant $1" >&2; exit 2 ;;
  esac
}

if [ "${TABLE_ONLY:-0}" != 1 ]; then
jobs_file=$(mktemp)
for sc in $SCENARIOS; do
  cfg=configs/fedrg_digits_${sc}.yaml
  for s in $SEEDS; do
    data=$OUT/$sc/data-s$s
    [ -f "$data/manifest.json" ] || $PY -m fedcore data prepare "$cfg" --out "$data" -s seed=$s > /dev/null
    for v in $VARIANTS; do
      args=$(variant_args "$v") || exit 2
      run=$OUT/$sc/$v/s$s
      [ -f "$run/metrics.json" ] && continue
      echo "nice -n 10 $PY -m fedcore run $cfg --data $data --out $run $(resume_flag "$run") -s seed=$s $args --no-progress > /dev/null 2>&1 || echo FAILED $run" >> "$jobs_file"
    done
  done
done
xargs -P "${PARALLEL:-2}" -I{} bash -c {} < "$jobs_file"
rm -f "$jobs_file"
fi

# Tables (markdown): accuracy = mean of the last 10 evaluations (mean ± std over seeds);
# detection F1 at the last round and averaged over train rounds, geometry detector vs the
# small-loss detector on the same (received global) model; mean diag(T) at the last round.
$PY - "$OUT" <<'PYEOF'
import csv, json, sys
from pathlib import Path
import numpy as np
from fedcore.stats.summary import mean_std
out = Path(sys.argv[1])
SC = ["sym_localized", "sym_globalized", "pair_localized", "pair_globalized"]
SC = [s for s in SC if (out / s).is_dir()]
ORDER = ["fedavg", "sce", "fedrg", "no_ssl", "t_off", "t_global", "ce", "code_score", "slow_t", "t_lr_code",
         "fallback"]

def stats(run):
    summ = json.loads((run / "metrics.json").read_text())["summary"]
    hist = [r for r in csv.DictReader(open(run / "history.csv")) if r["stage"] == "train"]
    for key in ("detect/sample_f1", "detect/small_loss/sample_f1"):
        vals = [float(r[key]) for r in hist if r.get(key)]
        summ["mean/" + key] = float(np.mean(vals)) if vals else None
    return summ

runs = {(sc, v): [stats(m.parent) for m in sorted((out / sc / v).glob("s*/metrics.json"))]
        for sc in SC for v in ORDER if (out / sc / v).is_dir()}
variants = [v for v in ORDER if any((sc, v) in runs for sc in SC)]

def cell(sc, v, key, scale=100.0, fmt="{:.1f} ± {:.1f}"):
    vals = [r[key] * scale for r in runs.get((sc, v), []) if r.get(key) is not None]
    # mean_std: the library's one "± over seeds" (sample std), so these tables match fedcore's
    return fmt.format(*mean_std(vals)) + ("" if len(vals) == 3 else f" (n={len(vals)})") if vals else "-"

def table(title, rows):
    print(f"\n{title}\n\n| | " + " | ".join(SC) + " |\n|---|" + "---|" * len(SC))
    for name, fn in rows:
        print(f"| {name} | " + " | ".join(fn(sc) for sc in SC) + " |")

table("Test accuracy, mean of the last 10 rounds (%)",
      [(v, lambda sc, v=v: cell(sc, v, "final/acc_last10")) for v in variants])
table("Test accuracy, final round (%)", [(v, lambda sc, v=v: cell(sc, v, "final/acc")) for v in variants])
det = [v for v in variants if v not in ("fedavg", "sce")]
rows = []
for v in det:
    rows += [(f"{v}: geometry, last", lambda sc, v=v: cell(sc, v, "last/detect/sample_f1")),
             (f"{v}: small-loss, last", lambda sc, v=v: cell(sc, v, "last/detect/small_loss/sample_f1")),
             (f"{v}: geometry, mean over rounds", lambda sc, v=v: cell(sc, v, "mean/detect/sample_f1")),
             (f"{v}: small-loss, mean over rounds", lambda sc, v=v: cell(sc, v, "mean/detect/small_loss/sample_f1"))]
table("Sample detection F1 (%), mean over clients", rows)
table("Geometry detector precision / recall at the last round (%)",
      [(v, lambda sc, v=v: cell(sc, v, "last/detect/sample_precision", fmt="{:.0f}") + " / "
        + cell(sc, v, "last/detect/sample_recall", fmt="{:.0f}")) for v in det])
table("Memorization: share of noisy training samples the global model predicts with their noisy label, "
      "last round (%)", [(v, lambda sc, v=v: cell(sc, v, "last/train/memorization")) for v in variants])
table("Mean diag(T) at the last round", [(v, lambda sc, v=v: cell(sc, v, "last/absorption/diag_mean", 1.0,
                                                                 "{:.2f} ± {:.2f}")) for v in det])
PYEOF

# Analysis (reads the noise scene's ground truth, like the scorer): how many noisy samples sit in
# a (client, label) group where noisy samples outnumber clean ones, and the geometry detector's
# last-round recall / false-positive rate split by that group type (from the train checkpoints).
$PY - "$OUT" <<'PYEOF'
import sys
from pathlib import Path
import numpy as np
from fedcore.data.federated import FederatedDataset
from fedcore.engine.checkpoint import load_checkpoint
out = Path(sys.argv[1])
print("\n| scenario | noisy samples in noise-majority groups | recall (minority / majority groups) "
      "| false-positive rate (minority / majority groups) |\n|---|---|---|---|")
for sc in ["sym_localized", "sym_globalized", "pair_localized", "pair_globalized"]:
    n = {k: np.zeros(2) for k in ("min", "maj", "fp_min", "fp_maj")}
    for data in sorted((out / sc).glob("data-s*")):
        ck_path = out / sc / "fedrg" / data.name.replace("data-", "") / "checkpoints" / "stage-train.pt"
        if not ck_path.exists():
            continue
        fed, ck = FederatedDataset.load(data), load_checkpoint(ck_path)
        y, noisy = fed.y_train.numpy(), fed.truth.is_noisy_sample
        for cid, idx in enumerate(fed.client_indices):
            flag, yl, nl = ~ck["clients"][cid]["clean"], y[idx], noisy[idx]
            for c in np.unique(yl):
                g = yl == c
                kind = "maj" if nl[g].sum() > (~nl[g]).sum() else "min"
                n[kind] += [(flag & g & nl).sum(), (g & nl).sum()]
                n["fp_" + kind] += [(flag & g & ~nl).sum(), (g & ~nl).sum()]
    if n["min"][1] + n["maj"][1] == 0:
        continue
    r = {k: v[0] / max(v[1], 1) for k, v in n.items()}
    share = n["maj"][1] / (n["min"][1] + n["maj"][1])
    print(f"| {sc} | {share:.0%} | {r['min']:.0%} / {r['maj']:.0%} | {r['fp_min']:.0%} / {r['fp_maj']:.0%} |")
PYEOF
