#!/usr/bin/env bash
# Reproduces lab/results/notes/fedgr.md on the CPU: one data artifact per preset and seed, shared by
# every method and variant; finished runs (metrics.json) are skipped, interrupted ones resumed.
#   fmnist: Fashion-MNIST (configs/fmnist/fedgr_sym.yaml, fedgr_mixed.yaml) through fmnist_lib.sh:
#           every baseline and FedAvg on clean labels, FedGR (spec v2 defaults), its four
#           ablations and FedGR on clean labels, seeds 0-2; FedGR spec v1 and the spec-text
#           variants on seed 0 of the sym preset. Then fmnist_table.py and fedgr_table.py.
#           OUT defaults to runs/fmnist (shared with the other docs); FM_ROWS narrows the rows.
#   digits: the FedGR grid on the digits presets (smoke scale), under OUT/digits_{sym,mixed}.
# Usage: lab/fedgr.sh [OUT_DIR] [JOBS] [fmnist|digits]   (defaults: runs/fmnist, 1, fmnist)
#   e.g. FM_ROWS="fedavg fedgr" SEEDS=0 lab/fedgr.sh runs/fmnist 2
# Then (digits): .venv/bin/python lab/fedgr_table.py OUT_DIR
set -euo pipefail
MODE=${3:-fmnist}
JOBS=${2:-1}
P="method.params"
# Spec v1 as params (its split warm-up sampler is gone from the engine: one pass stands in for it).
V1="-s $P.warmup_passes=1 -s $P.warmup_view=weak -s $P.warmup_rep_reg=false -s $P.surrogate_view=weak"
V1="$V1 -s $P.t_obs=5 -s $P.observe_warmup=false -s $P.sieve_timing=probe -s $P.rate_estimator=mean"
V1="$V1 -s $P.beta=0.4 -s $P.tau_conf=0.95 -s $P.clean_keep_label=false -s $P.cache=none -s $P.gamma_g=0.5"
V1="$V1 -s $P.ema_ramp=off -s $P.reset_coverage=0.0 -s $P.tau=1.0 -s $P.rep_loss=cosine -s $P.views=strong"
TEXT="-s $P.cache=pseudo -s $P.unrefined=weighted -s $P.warmup_rep_reg=false"

if [ "$MODE" = fmnist ]; then
  FMNIST_OUT=${1:-runs/fmnist}
  # shellcheck source=lab/fmnist_lib.sh
  . "$(dirname "$0")/fmnist_lib.sh"
  for preset in fedgr_sym fedgr_mixed; do
    fm_baselines $preset
    fm_queue $preset fedgr
    fm_queue $preset fedgr-clean
    fm_queue $preset fedgr-no_fs -s $P.sieving=false
    fm_queue $preset fedgr-no_lr -s $P.refine=false
    fm_queue $preset fedgr-no_b -s $P.ema_distill=false
    fm_queue $preset fedgr-no_r -s $P.rep_reg=false
    fm_queue $preset fedgr-classwise -s $P.sieve_by=class  # ours: the diagnosis below
    fm_queue $preset fedgr-plain-no_b -s $P.views=plain -s $P.ema_distill=false  # the best FedGR here
    fm_queue $preset fedgr-robust -s $P.profile=robust  # fedcore's extension (issue 37)
    fm_queue $preset fedgr-robust-clean -s $P.profile=robust
  done
  # What the plain baselines that beat FedAvg cost on clean labels (the sym preset's partitions).
  for m in symmetric_ce fedcorr; do
    fm_queue fedgr_sym $m-clean -s method.name=$m "-s method.params={}" "-s train.stage_rounds={}"
  done
  # The robust profile with the authors' strong views (sym, seed 0): which of its choices costs sym.
  SEEDS=0 fm_queue fedgr_sym fedgr-robust-strong -s $P.profile=robust -s $P.views=strong
  # The authors' 10 local epochs on a small CNN: FedAvg and both profiles.
  fm_queue fedgr_sym_cnn fedavg -s method.name=fedavg "-s method.params={}" "-s train.stage_rounds={}"
  fm_queue fedgr_sym_cnn fedgr
  fm_queue fedgr_sym_cnn fedgr-robust -s $P.profile=robust
  # The two baselines that beat FedAvg's best round on the MLP sym preset, in the same regime.
  for m in symmetric_ce fedcorr; do
    fm_queue fedgr_sym_cnn $m -s method.name=$m "-s method.params={}" "-s train.stage_rounds={}"
  done
  # shellcheck disable=SC2086
  SEEDS=0 fm_queue fedgr_sym fedgr-v1 $V1
  # shellcheck disable=SC2086
  SEEDS=0 fm_queue fedgr_sym fedgr-text $TEXT
  SEEDS=0 fm_queue fedgr_sym fedgr-probe -s $P.sieve_timing=probe
  # The B audit (ours, seed 0 of mixed): the teacher as the current global model (gamma_g 0: the
  # round-start revision keeps none of the client's own EMA), and the authors' local optimizer
  # (SGD lr 0.01, momentum 0.5) for FedAvg and FedGR, since B distils a client's lagged local model.
  SEEDS=0 fm_queue fedgr_mixed fedgr-teacher_global -s $P.gamma_g=0
  SEEDS=0 fm_queue fedgr_mixed fedavg-sgd_authors -s method.name=fedavg "-s method.params={}" "-s train.stage_rounds={}" \
    -s train.lr=0.01 -s train.momentum=0.5
  SEEDS=0 fm_queue fedgr_mixed fedgr-sgd_authors -s train.lr=0.01 -s train.momentum=0.5
  # B with student and teacher on the plain image (no view mismatch), with and without B.
  SEEDS=0 fm_queue fedgr_mixed fedgr-plain -s $P.views=plain
  SEEDS=0 fm_queue fedgr_sym fedgr-plain -s $P.views=plain
  # Each sample's B weighted as its refined CE (ours, a diagnostic: distill_on=weighted).
  SEEDS=0 fm_queue fedgr_mixed fedgr-b_weighted -s $P.distill_on=weighted
  SEEDS=0 fm_queue fedgr_mixed fedgr-plain-b01 -s $P.views=plain -s $P.lambda_b=0.1
  fm_go fedgr_sym fedgr_mixed fedgr_sym_cnn
  $PY lab/fedgr_table.py "$FMNIST_OUT"
  exit 0
fi

OUT=${1:-runs/fedgr}
PY=${PY:-.venv/bin/python}
SEEDS=${SEEDS:-0 1 2}
export OMP_NUM_THREADS=1  # small models: more threads only add contention on a shared CPU
resume_flag() { if compgen -G "$1/checkpoints/*.pt" > /dev/null; then echo "--resume $1"; fi; }
AVG="-s method.name=fedavg -s method.params={}"
# name|overrides (every row on both digits presets and every seed)
ROWS=(
  "fedavg|$AVG"
  "fedprox|-s method.name=fedprox -s method.params={}"
  "coteaching|-s method.name=coteaching -s method.params={}"
  "fedcorr|-s method.name=fedcorr -s method.params={}"
  "dividemix|-s method.name=dividemix -s method.params={}"
  "fedgr|"
  "fedgr-no_fs|-s $P.sieving=false"
  "fedgr-no_lr|-s $P.refine=false"
  "fedgr-no_b|-s $P.ema_distill=false"
  "fedgr-no_r|-s $P.rep_reg=false"
  "fedgr-v1|$V1"
)
jobs_file=$(mktemp)
trap 'rm -f "$jobs_file"' EXIT
for row in "${ROWS[@]}"; do
  IFS='|' read -r name args <<< "$row"
  for preset in digits_sym digits_mixed; do
    cfg=configs/fedgr_${preset/digits_/digits_noniid_}.yaml
    for seed in $SEEDS; do
      data=$OUT/$preset/data-s$seed
      [ -f "$data/manifest.json" ] || $PY -m fedcore data prepare "$cfg" --out "$data" -s seed="$seed" > /dev/null
      run=$OUT/$preset/$name/s$seed
      [ -f "$run/metrics.json" ] && continue
      echo "$PY -m fedcore run $cfg --data $data --out $run $(resume_flag "$run") -s seed=$seed $args --no-progress > /dev/null" >> "$jobs_file"
    done
  done
done
xargs -P "$JOBS" -I{} nice -n 10 bash -c {} < "$jobs_file"
