#!/usr/bin/env bash
# Reproduces docs/results/fedgr.md on the CPU: one data artifact per preset and seed, shared by
# every method and variant; finished runs (metrics.json) are skipped, interrupted ones resumed.
#   fmnist: the Fashion-MNIST grid: FedAvg, FedProx, Co-teaching, FedCorr, DivideMix, FedGR and
#           its four ablations on the sym and mixed presets, seeds 0-2; plus FedGR spec v1 and
#           the authors'-code vs spec-text variants on seed 0 of the sym preset.
#   digits: the same grid on the digits presets (smoke scale).
# Usage: docs/results/fedgr.sh [OUT_DIR] [JOBS] [fmnist|digits]   (defaults: runs/fedgr, 1, fmnist)
# Preset paths (the integrator may move them): SYM_CFG, MIX_CFG (fmnist mode), DSYM_CFG, DMIX_CFG.
# SEEDS (default "0 1 2") and ROWS_ONLY (a space-separated list of row names) narrow the grid.
# Every command runs through /work/bin/slot when it exists (the shared machine's CPU slots).
# Then: .venv/bin/python docs/results/fedgr_table.py OUT_DIR
set -euo pipefail
# An interrupted run (checkpoints, no metrics.json) is continued; `fedcore run` refuses to overwrite it.
resume_flag() { if compgen -G "$1/checkpoints/*.pt" > /dev/null; then echo "--resume $1"; fi; }
OUT=${1:-runs/fedgr}
JOBS=${2:-1}
MODE=${3:-fmnist}
PY=${PY:-.venv/bin/python}
SEEDS=${SEEDS:-0 1 2}
SLOT=$([ -x /work/bin/slot ] && echo /work/bin/slot || echo)
export OMP_NUM_THREADS=1  # small models: more threads only add contention on a shared CPU
SYM_CFG=${SYM_CFG:-configs/fmnist/fedgr_sym.yaml}
MIX_CFG=${MIX_CFG:-configs/fmnist/fedgr_mixed.yaml}
DSYM_CFG=${DSYM_CFG:-configs/fedgr_digits_noniid_sym.yaml}
DMIX_CFG=${DMIX_CFG:-configs/fedgr_digits_noniid_mixed.yaml}
P="method.params"
AVG="-s method.name=fedavg -s method.params={}"
# Spec v1 as params (its split warm-up sampler is gone from the engine: one pass stands in for it).
V1="-s $P.warmup_passes=1 -s $P.warmup_view=weak -s $P.warmup_rep_reg=false -s $P.surrogate_view=weak"
V1="$V1 -s $P.t_obs=5 -s $P.observe_warmup=false -s $P.sieve_timing=probe -s $P.rate_estimator=mean"
V1="$V1 -s $P.beta=0.4 -s $P.tau_conf=0.95 -s $P.clean_keep_label=false -s $P.cache=none -s $P.gamma_g=0.5"
V1="$V1 -s $P.ema_ramp=off -s $P.reset_coverage=0.0 -s $P.tau=1.0 -s $P.rep_loss=cosine -s $P.views=strong"

if [ "$MODE" = fmnist ]; then SYM=fmnist_sym MIX=fmnist_mixed; CFG_SYM=$SYM_CFG CFG_MIX=$MIX_CFG
else SYM=digits_sym MIX=digits_mixed; CFG_SYM=$DSYM_CFG CFG_MIX=$DMIX_CFG; fi
# name|presets|seeds|overrides
ROWS=(
  "fedavg|$SYM $MIX|$SEEDS|$AVG"
  "fedprox|$SYM $MIX|$SEEDS|-s method.name=fedprox -s method.params={}"
  "coteaching|$SYM $MIX|$SEEDS|-s method.name=coteaching -s method.params={}"
  "fedcorr|$SYM $MIX|$SEEDS|-s method.name=fedcorr -s method.params={}"
  "dividemix|$SYM $MIX|$SEEDS|-s method.name=dividemix -s method.params={}"
  "fedgr|$SYM $MIX|$SEEDS|"
  "fedgr-no_fs|$SYM $MIX|$SEEDS|-s $P.sieving=false"
  "fedgr-no_lr|$SYM $MIX|$SEEDS|-s $P.refine=false"
  "fedgr-no_b|$SYM $MIX|$SEEDS|-s $P.ema_distill=false"
  "fedgr-no_r|$SYM $MIX|$SEEDS|-s $P.rep_reg=false"
  "fedgr-v1|$SYM|0|$V1"
  "fedgr-text|$SYM|0|-s $P.cache=pseudo -s $P.unrefined=weighted -s $P.warmup_rep_reg=false"
  "fedgr-probe|$SYM|0|-s $P.sieve_timing=probe"
)

cfg_for() { case $1 in "$SYM") echo "$CFG_SYM" ;; *) echo "$CFG_MIX" ;; esac; }
jobs_file=$(mktemp)
for row in "${ROWS[@]}"; do
  IFS='|' read -r name presets seeds args <<< "$row"
  if [ -n "${ROWS_ONLY:-}" ] && [[ " $ROWS_ONLY " != *" $name "* ]]; then continue; fi
  for preset in $presets; do
    cfg=$(cfg_for "$preset")
    [ -f "$cfg" ] || { echo "skip $preset: $cfg not found (set SYM_CFG / MIX_CFG)" >&2; continue; }
    for seed in $seeds; do
      data=$OUT/$preset/data-s$seed
      [ -f "$data/manifest.json" ] || $SLOT $PY -m fedcore data prepare "$cfg" --out "$data" -s seed=$seed > /dev/null
      run=$OUT/$preset/$name/s$seed
      [ -f "$run/metrics.json" ] && continue
      echo "$SLOT $PY -m fedcore run $cfg --data $data --out $run $(resume_flag "$run") -s seed=$seed $args --no-progress > /dev/null" >> "$jobs_file"
    done
  done
done
xargs -P "$JOBS" -I{} nice -n 10 bash -c {} < "$jobs_file"
rm -f "$jobs_file"
