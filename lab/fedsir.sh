#!/usr/bin/env bash
# Reproduces lab/results/notes/fedsir.md on the CPU.
#   lab/fedsir.sh runs  [OUT] [JOBS]  FedAvg / FedNoRo / FedCorr / DivideMix / FedSIR + ablations, both digits
#                                              presets, seeds 0-2 (FedSIR also seeds 3-4)
#   lab/fedsir.sh sweep [OUT] [JOBS]  identification only, under other identify settings
#   lab/fedsir.sh holdout [OUT] [JOBS] identification only, preset settings, fresh seeds 5-9
#   lab/fedsir.sh table [OUT]         print the tables
#   lab/fedsir.sh fmnist [OUT] [JOBS] Fashion-MNIST (configs/fmnist/fedsir_09, fedsir_06): every baseline,
#                                              FedAvg on clean labels, FedSIR and its ablations, seeds 0-2, then
#                                              the tables (OUT defaults to runs/fmnist, shared with the other docs)
# OUT defaults to runs/fedsir, JOBS (parallel runs) to 1. The digits presets are smoke-scale.
set -euo pipefail
# An interrupted run (checkpoints, no metrics.json) is continued; `fedcore run` refuses to overwrite it.
resume_flag() { if compgen -G "$1/checkpoints/*.pt" > /dev/null; then echo "--resume $1"; fi; }
MODE=${1:-runs}
OUT=${2:-runs/fedsir}
JOBS=${3:-1}
PY=${PY:-.venv/bin/python}
export OMP_NUM_THREADS=1  # tiny models: threads only add contention

declare -A VARIANTS=(
  [fedavg]="-s method.name=fedavg -s method.params={}"
  [fednoro]="-s method.name=fednoro -s method.params={}"
  [fedcorr]="-s method.name=fedcorr -s method.params={}"
  [dividemix]="-s method.name=dividemix -s method.params={}"
  [fedsir]=""
  [fedsir-no_relabel]="-s method.params.relabel=false"
  [fedsir-no_la]="-s method.params.la=false"
  [fedsir-no_kd]="-s method.params.kd=false"
  [fedsir-no_daagg]="-s method.params.daagg=false"
  [fedsir-principal_only]="-s method.params.gate=principal_only"
  [fedsir-residual_only]="-s method.params.gate=residual_only"
)
if [ "$MODE" = fmnist ]; then
  FMNIST_OUT=${2:-runs/fmnist} JOBS=${3:-1}
  # shellcheck source=lab/fmnist_lib.sh
  . "$(dirname "$0")/fmnist_lib.sh"
  for preset in fedsir_09 fedsir_06; do
    fm_baselines $preset
    for name in fedsir fedsir-no_relabel fedsir-no_la fedsir-no_kd fedsir-no_daagg fedsir-principal_only \
        fedsir-residual_only; do
      # shellcheck disable=SC2086
      fm_queue $preset $name ${VARIANTS[$name]}
    done
  done
  fm_go fedsir_09 fedsir_06
  exit 0
fi

# Identify-stage settings (epochs, lr, min_class_n); the presets use 20 / 1e-3 / 5.
SWEEP=("5 5e-5 20" "5 1e-3 5" "5 1e-3 20" "5 3e-3 5" "5 1e-2 5" "10 3e-3 5" "20 1e-3 5" "20 1e-3 20")

prepare() {  # preset seed -> data dir (prepared once, shared by every method)
  local data=$OUT/$1/data-s$2
  [ -f "$data/manifest.json" ] || $PY -m fedcore data prepare "configs/$1.yaml" --out "$data" -s seed="$2" > /dev/null
  echo "$data"
}

jobs_file=$(mktemp)
trap 'rm -f "$jobs_file"' EXIT
SEEDS="0 1 2 3 4"
if [ "$MODE" = holdout ]; then SEEDS="5 6 7 8 9"; SWEEP=("20 1e-3 5"); fi
for preset in fedsir_digits fedsir_digits_06; do
  for seed in $SEEDS; do
    [ "$MODE" = table ] && break
    data=$(prepare $preset $seed)
    run_args="configs/$preset.yaml --data $data -s seed=$seed --no-progress"
    if [ "$MODE" = runs ]; then
      for name in "${!VARIANTS[@]}"; do
        if [ "$seed" -gt 2 ] && [ "$name" != fedsir ]; then continue; fi
        run=$OUT/$preset/$name/s$seed
        [ -f "$run/metrics.json" ] || echo "$PY -m fedcore run $run_args --out $run $(resume_flag "$run") ${VARIANTS[$name]} > /dev/null" >> "$jobs_file"
      done
      # Ceiling: FedAvg on the same partition with every label clean (its own data, built in-process).
      run=$OUT/$preset/fedavg-noisefree/s$seed
      [ "$seed" -gt 2 ] || [ -f "$run/metrics.json" ] || echo "$PY -m fedcore run configs/$preset.yaml -s seed=$seed \
--no-progress --out $run $(resume_flag "$run") -s noise.rate.value=0 ${VARIANTS[fedavg]} > /dev/null" >> "$jobs_file"
    else
      for s in "${SWEEP[@]}"; do
        read -r ep lr mn <<< "$s"
        run=$OUT/$MODE/$preset/e$ep-lr$lr-n$mn/s$seed
        [ -f "$run/metrics.json" ] || echo "$PY -m fedcore run $run_args --out $run $(resume_flag "$run") -s train.stage_rounds.train=0 \
-s method.params.identify_epochs=$ep -s method.params.identify_lr=$lr -s method.params.min_class_n=$mn > /dev/null" >> "$jobs_file"
      done
    fi
  done
done
xargs -P "$JOBS" -I{} nice -n 10 bash -c {} < "$jobs_file"
[ "$MODE" != table ] || $PY lab/fedsir_table.py "$OUT"
[ "$MODE" = table ] || echo "done; tables: $0 table $OUT"
