#!/usr/bin/env bash
# The results pages' figures (lab/results/img/<set>/*.png), drawn by `fedcore report` from the
# run dirs that the pages' tables were measured on. RUNS holds the FedRG scenes' tuning runs: the OUT
# of `fedcore bench lab/grids/fmnist_fedrg.yaml`, or of the retired experiments/tuning.sh that
# made lab/results/tuning.md's tables (runs/tuning, the same layout).
#
# Usage: lab/figures.sh [RUNS]      (default runs/tuning)
# Environment: PY (.venv/bin/python), OUT (lab/results/img), FEDGR_RUNS and FEDSIR_RUNS (default
#   runs/fmnist: the OUT_DIR of `lab/fedgr.sh` and `lab/fedsir.sh fmnist`),
#   FEDHARMONY_RUNS (default runs/fedharmony: the OUT_DIR of `lab/fedharmony_pick_lam.sh`),
#   TUNING_BENCH (the bench OUT dirs of the tuning page's summary figure, below).
# A set whose runs are not all finished is skipped with a note; the others are redrawn.
set -euo pipefail
RUNS=${1:-runs/tuning}
PY=${PY:-.venv/bin/python}
OUT=${OUT:-lab/results/img}

figure_set() {  # NAME RUN_DIR...: every run must have finished (metrics.json)
  local name=$1 missing=0 tmp
  shift
  for d in "$@"; do [ -f "$d/metrics.json" ] || missing=$((missing + 1)); done
  if [ "$missing" -gt 0 ]; then
    echo "figures: $name skipped ($missing of $# runs missing under $RUNS)" >&2
    return 0
  fi
  tmp=$(mktemp -d)
  "$PY" -m fedcore report "$@" --out "$tmp" > /dev/null
  mkdir -p "$OUT/$name"
  rm -f "$OUT/$name"/*.png
  cp "$tmp"/*.png "$OUT/$name/"
  rm -rf "$tmp"
  echo "figures: $OUT/$name: $(cd "$OUT/$name" && echo *.png)" >&2
}

# FedRG's symmetric / localized scene: the preset's and the tuned FedAvg, the tuned baselines, FedRG.
S=$RUNS/fedrg_sym_localized
figure_set fedrg_sym_localized \
  "$S"/fedavg/default/s{0,1,2} "$S"/fedavg/tuned/s{0,1,2} "$S"/symmetric_ce/tuned/s{0,1,2} \
  "$S"/fedprox/tuned/s{0,1,2} "$S"/fedrg/default/s{0,1,2}

# FedGR's robust profile (ours) on the mixed-noise preset: curves and per-client noise-rate estimates.
G=${FEDGR_RUNS:-runs/fmnist}/fedgr_mixed
figure_set fedgr_mixed_robust "$G"/fedgr-robust/s{0,1,2}

# FedGR's paper regime (a CNN with the authors' 10 local epochs): FedAvg and both profiles.
C=${FEDGR_RUNS:-runs/fmnist}/fedgr_sym_cnn
figure_set fedgr_sym_cnn "$C"/fedavg/s{0,1,2} "$C"/fedgr/s{0,1,2} "$C"/fedgr-robust/s{0,1,2}

# FedSIR's 0.9 preset: FedAvg, FedNoRo (its reference code's choices) and FedSIR; curves, per-client
# noise-rate estimates and client identification.
F=${FEDSIR_RUNS:-runs/fmnist}/fedsir_09
figure_set fedsir_09 "$F"/fedavg/s{0,1,2} "$F"/fednoro/s{0,1,2} "$F"/fedsir/s{0,1,2}

# FedHarmony on the v3 bed: FedAvg, FedProx and the v3 reading at the lam chosen on validation (mAP curves).
H=${FEDHARMONY_RUNS:-runs/fedharmony}/scenes_v3
figure_set fedharmony_v3 "$H"/fedavg/s{0,1,2} "$H"/fedprox/s{0,1,2} "$H"/v3/s{0,1,2}

# The tuning page's summary: default and tuned last-10 of every row, per scene, with FedAvg's two bars,
# from the `fedcore bench` results of lab/grids/fmnist_*.yaml (the OUT dirs in TUNING_BENCH, in
# the page's scene order); drawn from those that have a bench.json.
TUNING_BENCH=${TUNING_BENCH:-"runs/bench/fmnist_fedrg runs/bench/fmnist_fedgr runs/bench/fmnist_fedsir_09 \
runs/bench/fmnist_fedharmony_scenes"}
bench=()
for d in $TUNING_BENCH; do if [ -f "$d/bench.json" ]; then bench+=("$d"); fi; done
if [ ${#bench[@]} -gt 0 ]; then
  mkdir -p "$OUT/tuning"
  "$PY" -m fedcore bench-table --summary --figure "$OUT/tuning/summary.png" "${bench[@]}" >&2
else
  echo "figures: tuning summary skipped (no bench.json in TUNING_BENCH: $TUNING_BENCH)" >&2
fi
