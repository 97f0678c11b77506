#!/usr/bin/env bash
# Reproduce docs/results/fedrg.md: FedAvg / SCE / FedRG (+ ablations) on the four digits
# scenarios, 3 seeds. Every method of a (scenario, seed) runs on one prepared artifact.
#   bash docs/results/fedrg.sh [OUT] [VARIANTS...]     (default OUT=runs/fedrg, all variants)
# Runs two at a time, one thread each, niced; finished runs (metrics.json) are skipped.
set -euo pipefail
OUT=${1:-runs/fedrg}; shift || true
PY=${PY:-.venv/bin/python}
SEEDS=${SEEDS:-"0 1 2"}
SCENARIOS=${SCENARIOS:-"sym_localized sym_globalized pair_localized pair_globalized"}
VARIANTS=${*:-"fedavg sce fedrg t_off t_global no_ssl ce t_lr1 no_fallback code_score"}
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1

variant_args() {
  case $1 in
    fedavg) echo "-s method.name=fedavg -s method.params={}" ;;
    sce) echo "-s method.name=symmetric_ce -s method.params={}" ;;
    fedrg) echo "" ;;
    no_ssl) echo "-s method.params.ssl_pretrain=false" ;;
    t_off) echo "-s method.params.absorption=off" ;;
    t_global) echo "-s method.params.absorption=global" ;;
    ce) echo "-s method.params.loss=ce" ;;
    code_score) echo "-s method.params.score=code" ;;
    t_lr1) echo "-s method.params.t_lr_scale=1.0" ;;
    no_fallback) echo "-s method.params.b_fallback=false" ;;
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
      run=$OUT/$sc/$v/s$s
      [ -f "$run/metrics.json" ] && continue
      echo "nice -n 10 $PY -m fedcore run $cfg --data $data --out $run -s seed=$s $(variant_args "$v") --no-progress > /dev/null 2>&1 || echo FAILED $run" >> "$jobs_file"
    done
  done
done
xargs -P "${PARALLEL:-2}" -I{} bash -c {} < "$jobs_file"
rm -f "$jobs_file"
fi

# Table: acc = mean of the last 10 evaluations; detection F1 = last round and mean over train
# rounds, geometry detector vs small-loss detector on the same (received global) model.
$PY - "$OUT" <<'PYEOF'
import csv, json, sys
from pathlib import Path
import numpy as np
out = Path(sys.argv[1])
def row_stats(run):
    summ = json.loads((run / "metrics.json").read_text())["summary"]
    hist = [r for r in csv.DictReader(open(run / "history.csv")) if r["stage"] == "train"]
    for key in ("detect/sample_f1", "detect/small_loss/sample_f1"):
        vals = [float(r[key]) for r in hist if r.get(key)]
        summ["mean/" + key] = float(np.mean(vals)) if vals else None
    return summ
for sc in sorted(p.name for p in out.iterdir() if p.is_dir()):
    print(f"\n{sc}")
    for v in sorted(p.name for p in (out / sc).iterdir() if p.is_dir() and not p.name.startswith("data")):
        runs = [row_stats(m.parent) for m in sorted((out / sc / v).glob("s*/metrics.json"))]
        def ms(key, scale=100.0):
            vals = [r[key] * scale for r in runs if r.get(key) is not None]
            return f"{np.mean(vals):5.1f} ± {np.std(vals):4.1f}" if vals else "      -     "
        print(f"  {v:10s} n={len(runs)} acc10 {ms('final/acc_last10')} final {ms('final/acc')}"
              f" | F1 last geo {ms('last/detect/sample_f1')} sl {ms('last/detect/small_loss/sample_f1')}"
              f" | F1 mean geo {ms('mean/detect/sample_f1')} sl {ms('mean/detect/small_loss/sample_f1')}"
              f" | diagT {ms('last/absorption/diag_mean', 1.0)}")
PYEOF
