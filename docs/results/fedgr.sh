#!/usr/bin/env bash
# Reproduces docs/results/fedgr.md on the CPU (one data artifact per preset and seed, shared by
# every method and variant).
#   main: FedAvg / FedProx / Co-teaching / FedGR and FedGR's four ablations, both digits presets,
#         seeds 0-2 (the main tables).
#   sens: the sensitivity grid of the section "Sensitivity" (tau_conf, soft pseudo-labels,
#         warm-up length alpha, strong views, model, local epochs).
#   fmnist: Fashion-MNIST (configs/fmnist/fedgr_sym, fedgr_mixed): every baseline and FedAvg on clean
#         labels, seeds 0-2, then the tables (OUT defaults to runs/fmnist, shared with the other docs).
#         The digits presets (main, sens) are smoke-scale.
# Usage: docs/results/fedgr.sh [OUT_DIR] [JOBS] [main|sens|fmnist]   (defaults: runs/fedgr, 1, main)
#   e.g. docs/results/fedgr.sh runs/fedgr 2 && DATA_ROOT=runs/fedgr docs/results/fedgr.sh runs/fedgr-sens 2 sens
# Then:  .venv/bin/python docs/results/fedgr_table.py runs/fedgr
#        .venv/bin/python docs/results/fedgr_table.py --sens runs/fedgr-sens runs/fedgr
# Extra rows (main mode): EXTRA='name=-s a=b -s c=d' adds one more variant (see fedgr.md).
set -euo pipefail
# An interrupted run (checkpoints, no metrics.json) is continued; `fedcore run` refuses to overwrite it.
resume_flag() { if compgen -G "$1/checkpoints/*.pt" > /dev/null; then echo "--resume $1"; fi; }
OUT=${1:-runs/fedgr}
JOBS=${2:-1}
MODE=${3:-main}
if [ "$MODE" = fmnist ]; then
  FMNIST_OUT=${1:-runs/fmnist}
  # shellcheck source=docs/results/fmnist_lib.sh
  . "$(dirname "$0")/fmnist_lib.sh"
  for preset in fedgr_sym fedgr_mixed; do
    fm_baselines $preset
    # FedGR rows and ablations: added by the FedGR helper, e.g.
    #   fm_queue $preset fedgr
    #   fm_queue $preset fedgr-no_fs -s method.params.sieving=false
  done
  fm_go fedgr_sym fedgr_mixed
  exit 0
fi
DATA_ROOT=${DATA_ROOT:-$OUT}
PY=${PY:-.venv/bin/python}
export OMP_NUM_THREADS=1  # tiny models: more threads only add contention on a shared CPU
SYM=fedgr_digits_noniid_sym
MIX=fedgr_digits_noniid_mixed
NS="-s method.params.strong_magnitude=0.0 -s method.params.strong_cutout=0.0"
CNN="-s model.name=cnn -s model.width=32"
AVG="-s method.name=fedavg -s method.params={}"

# name|presets|seeds|overrides
if [ "$MODE" = main ]; then
  ROWS=(
    "fedavg|$SYM $MIX|0 1 2|$AVG"
    "fedprox|$SYM $MIX|0 1 2|-s method.name=fedprox -s method.params={}"
    "coteaching|$SYM $MIX|0 1 2|-s method.name=coteaching -s method.params={}"
    "fedcorr|$SYM $MIX|0 1 2|-s method.name=fedcorr -s method.params={}"
    "dividemix|$SYM $MIX|0 1 2|-s method.name=dividemix -s method.params={}"
    "fedgr|$SYM $MIX|0 1 2|"
    "fedgr-no_fs|$SYM $MIX|0 1 2|-s method.params.sieving=false"
    "fedgr-no_lr|$SYM $MIX|0 1 2|-s method.params.refine=false"
    "fedgr-no_b|$SYM $MIX|0 1 2|-s method.params.ema_distill=false"
    "fedgr-no_r|$SYM $MIX|0 1 2|-s method.params.rep_reg=false"
  )
  if [ -n "${EXTRA:-}" ]; then ROWS+=("${EXTRA%%=*}|$SYM $MIX|0 1 2|${EXTRA#*=}"); fi
else
  ROWS=(
    "tau0.8|$SYM $MIX|0|-s method.params.tau_conf=0.8"
    "tau0.6|$SYM $MIX|0|-s method.params.tau_conf=0.6"
    "tau0.0|$SYM $MIX|0 1 2|-s method.params.tau_conf=0.0"
    "soft-tau0.0|$SYM $MIX|0|-s method.params.tau_conf=0.0 -s method.params.soft_pseudo=true"
    "a20-tau0.6|$SYM|0|-s method.params.warmup_rounds=20 -s method.params.tau_conf=0.6"
    "a20-tau0.0|$SYM $MIX|0|-s method.params.warmup_rounds=20 -s method.params.tau_conf=0.0"
    "nostrong|$SYM $MIX|0 1 2|$NS"
    "a20-nostrong|$SYM $MIX|0 1 2|-s method.params.warmup_rounds=20 $NS"
    "a20-nostrong|$SYM $MIX|3 4 5|-s method.params.warmup_rounds=20 $NS"
    "fedavg|$SYM $MIX|3 4 5|$AVG"
    "fedgr|$SYM $MIX|3 4 5|"
    "a20-tau0.0-nostrong|$SYM $MIX|0|-s method.params.warmup_rounds=20 -s method.params.tau_conf=0.0 $NS"
    "a20-nostrong-tau0.4|$SYM|0|-s method.params.warmup_rounds=20 $NS -s method.params.tau_conf=0.4"
    "a20-nostrong-keep|$SYM $MIX|0|-s method.params.warmup_rounds=20 $NS -s method.params.clean_keep_label=true"
    "cnn32-a20|$SYM|0|$CNN -s method.params.warmup_rounds=20"
    "cnn32-fedavg|$SYM|0|$CNN $AVG"
    "cnn32-fedgr|$SYM|0|$CNN"
    "cnn32-fedgr-tau0.6|$SYM|0|$CNN -s method.params.tau_conf=0.6"
    "cnn32-fedgr-tau0.0|$SYM|0|$CNN -s method.params.tau_conf=0.0"
    "e5-fedavg|$SYM $MIX|0|-s train.local_epochs=5 $AVG"
    "e5-fedgr|$SYM $MIX|0|-s train.local_epochs=5"
    "e5-fedgr-tau0.0|$SYM $MIX|0|-s train.local_epochs=5 -s method.params.tau_conf=0.0"
  )
  if [ -n "${SENS_EXTRA:-}" ]; then ROWS+=("$SENS_EXTRA"); fi
fi

jobs_file=$(mktemp)
for row in "${ROWS[@]}"; do
  IFS='|' read -r name presets seeds args <<< "$row"
  for preset in $presets; do
    cfg=configs/$preset.yaml
    for seed in $seeds; do
      data=$DATA_ROOT/$preset/data-s$seed
      [ -f "$data/manifest.json" ] || $PY -m fedcore data prepare "$cfg" --out "$data" -s seed=$seed > /dev/null
      run=$OUT/$preset/$name/s$seed
      [ -f "$run/metrics.json" ] && continue
      echo "$PY -m fedcore run $cfg --data $data --out $run $(resume_flag "$run") -s seed=$seed $args --no-progress > /dev/null" >> "$jobs_file"
    done
  done
done
xargs -P "$JOBS" -I{} nice -n 10 bash -c {} < "$jobs_file"
rm -f "$jobs_file"
