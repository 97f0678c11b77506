#!/usr/bin/env bash
# Sanity check of the sieving methods (lab/results/baselines.md, notes/fedgr.md): FedAvg, FedCorr,
# FL-DivideMix and FedGR on a nearly centralized setting (the quickstart's digits and MLP, 2 IID clients,
# every label 60% symmetric noise, 40 rounds), where DivideMix's own paper setting applies.
# Usage: lab/baselines.sh [OUT] [JOBS]   (defaults: runs/baselines, 1); prints the table.
#        lab/baselines.sh fmnist [OUT] [JOBS]   every baseline and FedAvg on clean labels on every
#        configs/fmnist preset, seeds 0-2, then the tables (OUT defaults to runs/fmnist, shared with the other
#        docs' fmnist modes). The digits check above is smoke-scale.
set -euo pipefail
if [ "${1:-}" = fmnist ]; then
  FMNIST_OUT=${2:-runs/fmnist} JOBS=${3:-1}
  # shellcheck source=lab/fmnist_lib.sh
  . "$(dirname "$0")/fmnist_lib.sh"
  PRESETS="fedgr_sym fedgr_mixed fedsir_09 fedsir_06 fedrg_sym_localized fedrg_sym_globalized fedrg_pair_localized \
fedrg_pair_globalized"
  for preset in $PRESETS; do fm_baselines "$preset"; done
  # shellcheck disable=SC2086
  fm_go $PRESETS
  exit 0
fi
# An interrupted run (checkpoints, no metrics.json) is continued; `fedcore run` refuses to overwrite it.
resume_flag() { if compgen -G "$1/checkpoints/*.pt" > /dev/null; then echo "--resume $1"; fi; }
OUT=${1:-runs/baselines}
JOBS=${2:-1}
PY=${PY:-.venv/bin/python}
export OMP_NUM_THREADS=1
SETTING="-s partition.kind=iid -s partition.num_clients=2 -s noise.noisy_client_fraction=1.0 \
-s noise.rate.kind=fixed -s noise.rate.value=0.6 -s train.rounds=40"
jobs_file=$(mktemp)
trap 'rm -f "$jobs_file"' EXIT
for seed in 0 1 2; do
  data=$OUT/data-s$seed
  # shellcheck disable=SC2086
  [ -f "$data/manifest.json" ] || $PY -m fedcore data prepare configs/quickstart.yaml --out "$data" -s seed=$seed $SETTING > /dev/null
  for m in fedavg fedcorr dividemix fedgr; do
    run=$OUT/$m/s$seed
    [ -f "$run/metrics.json" ] || echo "$PY -m fedcore run configs/quickstart.yaml --data $data --out $run $(resume_flag "$run") --no-progress \
-s seed=$seed -s method.name=$m $SETTING > /dev/null" >> "$jobs_file"
  done
done
xargs -P "$JOBS" -I{} nice -n 10 bash -c {} < "$jobs_file"
$PY -m fedcore compare "$OUT"/fedavg/s* "$OUT"/fedcorr/s* "$OUT"/dividemix/s* "$OUT"/fedgr/s*
