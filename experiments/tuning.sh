#!/usr/bin/env bash
# The equal-budget tuning protocol (docs/results/tuning.md): every method of a scene gets the same
# number of `fedcore tune` trials on one seed that no table reports (TUNE_SEED), judged on the
# clients' held-out validation split (10% of each client's samples, noisy labels); then the default
# and the tuned setting run on the reporting seeds, every run on that seed's one artifact.
#
# Usage: experiments/tuning.sh [OUT]      (default runs/tuning); prints the tables at the end.
# Environment: SCENES (fedrg_sym_localized fedgr_sym fedgr_mixed fedrg_pair_localized fedsir_09
#   fedharmony_scenes; also quickstart: configs/quickstart.yaml, the `make run` scene and its rows),
#   METHODS (default: every baseline plus the scene's own method, and on the
#   multi-label fedharmony_* scenes the baselines that train multi-label: FedAvg, FedProx; also a named
#   variant: fedgr-robust, FedGR's `profile: robust`, or fedharmony-v3, spec v3's reading at lam 0.1),
#   TRIALS (8), TUNE_SEED (100),
#   SEEDS ("0 1 2"), JOBS (1: the reporting runs in parallel; tunes run one at a time), PY (.venv/bin/python).
# Everything is resumable and skipped when done: a tune reruns to TRIALS finished trials (a killed one
# adds only the missing trials), a run with metrics.json is skipped, so a grid can be run in parts.
# Logs are appended, not truncated: a resumed run keeps its first attempt's log, and a second grid
# that reaches a run in use (refused by the run folder's lock) cannot wipe the running one's log.
set -euo pipefail
OUT=${1:-runs/tuning}
SCENES=${SCENES:-"fedrg_sym_localized fedgr_sym fedgr_mixed fedrg_pair_localized fedsir_09 fedharmony_scenes"}
TRIALS=${TRIALS:-8}
TUNE_SEED=${TUNE_SEED:-100}
SEEDS=${SEEDS:-"0 1 2"}
JOBS=${JOBS:-1}
PY=${PY:-.venv/bin/python}
VAL="-s data.validation.fraction=0.1"
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
BASELINES="fedavg fedprox symmetric_ce coteaching fednoro fedcorr dividemix"
MULTI_BASELINES="fedavg fedprox"  # the others refuse multi-label data

own_method() {
  case $1 in fedgr_*) echo fedgr ;; fedsir_*) echo fedsir ;; fedrg_*) echo fedrg ;; fedharmony_*) echo fedharmony ;;
    *) echo "" ;; esac
}
default_methods() {
  case $1 in fedharmony_*) echo "$MULTI_BASELINES fedharmony fedharmony-v3" ;;
    quickstart) echo "$BASELINES fedsir fedrg fedgr" ;;  # the `make run` table's rows
    *) echo "$BASELINES $(own_method "$1")" ;; esac
}
# Spec v3's reading of FedHarmony (experiments/fedharmony.sh's V3, lam 0.1 as picked there on validation).
HARMONY_V3="-s method.params.timing=start -s method.params.teacher=pooled -s method.params.weighting=abs \
-s method.params.diagonal=true -s method.params.scale=sum -s method.params.lam_schedule=caa \
-s method.params.gamma_by=median -s method.params.mask_unannotated=true -s method.params.lam=0.1"

# Named variants: a row that is a method with fixed params, tuned like any other row (same budget,
# same search space); the fixed params stay in its best.yaml.
variant_args() {
  case $1 in fedgr-robust) echo "-s method.params.profile=robust" ;; fedharmony-v3) echo "$HARMONY_V3" ;;
    *) echo "" ;; esac
}
base_method() { case $1 in fedgr-robust) echo fedgr ;; fedharmony-v3) echo fedharmony ;; *) echo "$1" ;; esac; }

method_args() {  # scene row -> the overrides that run the row's method on the scene's preset
  local own m
  own=$(own_method "$1")
  m=$(base_method "$2")
  if [ "$m" = "$own" ]; then
    # FedRG's SSL pretraining counts inside the baselines' 50 rounds (configs/fmnist/fedrg_*.yaml).
    [ "$m" = fedrg ] && echo "-s train.rounds=40 $(variant_args "$2")" || variant_args "$2"
  else
    echo "-s method.name=$m -s method.params={} -s train.stage_rounds={} $(variant_args "$2")"
  fi
}

# A multi-label scene's benchmark (blocks, mixtures, clients) is drawn from data.params.seed: each seed,
# the tuning seed too, draws its own, as experiments/fedharmony.sh does, so the tune sees no reporting data.
data_args() { case $1 in fedharmony_*) echo "-s data.params.seed=$2" ;; *) echo "" ;; esac; }

preset_of() { case $1 in quickstart) echo configs/quickstart.yaml ;; *) echo "configs/fmnist/$1.yaml" ;; esac; }

resume_flag() { if compgen -G "$1/checkpoints/*.pt" > /dev/null; then echo "--resume $1"; fi; }

jobs_file=$(mktemp)
trap 'rm -f "$jobs_file"' EXIT
for scene in $SCENES; do
  preset=$(preset_of "$scene")
  methods=${METHODS:-$(default_methods "$scene")}
  for m in $methods; do
    tune=$OUT/$scene/$m/tune
    # shellcheck disable=SC2046
    done_trials=$($PY -c "import json,sys; print(json.load(open(sys.argv[1]))['n_trials'])" "$tune/tune.json" 2>/dev/null \
      || echo 0)
    if [ "$done_trials" -lt "$TRIALS" ]; then
      echo "tuning: $scene $m ($TRIALS trials, seed $TUNE_SEED)" >&2
      mkdir -p "$(dirname "$tune")"
      # shellcheck disable=SC2086
      nice -n 10 $PY -m fedcore tune "$preset" $(method_args "$scene" "$m") -s seed=$TUNE_SEED \
        $(data_args "$scene" "$TUNE_SEED") $VAL \
        --trials "$TRIALS" --out "$tune" --no-progress >> "$tune.log" 2>&1 || { echo "FAILED tune $tune" >&2; continue; }
    fi
    for seed in $SEEDS; do
      data=$OUT/$scene/data-s$seed
      # shellcheck disable=SC2086
      [ -f "$data/manifest.json" ] || $PY -m fedcore data prepare "$preset" --out "$data" -s seed="$seed" \
        $(data_args "$scene" "$seed") $VAL > /dev/null
      for row in default tuned; do
        run=$OUT/$scene/$m/$row/s$seed
        [ -f "$run/metrics.json" ] && continue
        mkdir -p "$(dirname "$run")"
        if [ $row = default ]; then
          cmd="$preset $(method_args "$scene" "$m") $VAL"
        else
          cmd="$tune/best.yaml"
        fi
        echo "nice -n 10 $PY -m fedcore run $cmd -s seed=$seed $(data_args "$scene" "$seed") --data $data --out $run $(resume_flag "$run") --no-progress \
>> $run.log 2>&1 || echo FAILED $run" >> "$jobs_file"
      done
    done
  done
done
echo "tuning: $(wc -l < "$jobs_file") reporting runs to do under $OUT (JOBS=$JOBS)" >&2
xargs -P "$JOBS" -I{} bash -c {} < "$jobs_file"
# shellcheck disable=SC2086
$PY experiments/tuning_table.py "$OUT" $SCENES
