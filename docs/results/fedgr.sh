#!/usr/bin/env bash
# Reproduces docs/results/fedgr.md: FedAvg / FedProx / Co-teaching / FedGR and FedGR's four
# ablations on both digits presets, seeds 0-2, on the CPU (one data artifact per preset and seed,
# shared by every method).
# Usage: docs/results/fedgr.sh [OUT_DIR] [JOBS]   (defaults: runs/fedgr, 1)
# Then:  .venv/bin/python docs/results/fedgr_table.py runs/fedgr
# Extra rows: EXTRA='name=--set a=b --set c=d' adds one more variant (see fedgr.md).
set -euo pipefail
OUT=${1:-runs/fedgr}
JOBS=${2:-1}
PY=${PY:-.venv/bin/python}
export OMP_NUM_THREADS=1  # tiny models: more threads only add contention on a shared CPU

declare -A VARIANTS=(
  [fedavg]="-s method.name=fedavg -s method.params={}"
  [fedprox]="-s method.name=fedprox -s method.params={}"
  [coteaching]="-s method.name=coteaching -s method.params={}"
  [fedgr]=""
  [fedgr-no_fs]="-s method.params.sieving=false"
  [fedgr-no_lr]="-s method.params.refine=false"
  [fedgr-no_b]="-s method.params.ema_distill=false"
  [fedgr-no_r]="-s method.params.rep_reg=false"
)
if [ -n "${EXTRA:-}" ]; then VARIANTS[${EXTRA%%=*}]="${EXTRA#*=}"; fi

jobs_file=$(mktemp)
for preset in fedgr_digits_noniid_sym fedgr_digits_noniid_mixed; do
  cfg=configs/$preset.yaml
  for seed in 0 1 2; do
    data=$OUT/$preset/data-s$seed
    [ -f "$data/manifest.json" ] || $PY -m fedcore data prepare "$cfg" --out "$data" -s seed=$seed > /dev/null
    for name in "${!VARIANTS[@]}"; do
      run=$OUT/$preset/$name/s$seed
      [ -f "$run/metrics.json" ] && continue
      echo "$PY -m fedcore run $cfg --data $data --out $run -s seed=$seed ${VARIANTS[$name]} --no-progress > /dev/null" >> "$jobs_file"
    done
  done
done
xargs -P "$JOBS" -I{} nice -n 10 bash -c {} < "$jobs_file"
rm -f "$jobs_file"
