# Shared by the `fmnist` modes of lab/{baselines,fedgr,fedrg,fedsir}.sh (source it).
# Every run lands in $FMNIST_OUT/<preset>/<row>/s<seed>; all rows of a (preset, seed) share one
# prepared artifact, $FMNIST_OUT/<preset>/data-s<seed> (the clean-label ceiling has its own,
# data-clean-s<seed>: same partition, noise.type=none). Rows that finished (metrics.json) are
# skipped, interrupted ones (checkpoints, no metrics.json) resumed, so the scripts share runs:
# the baselines of a preset run once whichever script queues them first.
# Environment: FMNIST_OUT (runs/fmnist), SEEDS ("0 1 2"), JOBS (1), PY (.venv/bin/python),
#   EXTRA (appended to every run, e.g. "-s train.device=cuda"; never data/partition/noise keys),
#   FMNIST_PRESETS (configs/fmnist: where <preset>.yaml lives),
#   FM_ROWS (a space-separated list of row names: queue only those). A row named *-clean runs on
#   the clean-label artifact. FM_RETRY=1: run again the seeds whose last try diverged (skipped
#   by default; their <seed>.log says why).
# Baselines log the small-loss probe on their global model (train.loss_probe; it never feeds back
# into training), so docs can compare a method's detector with small loss on a FedAvg+CE model.
FMNIST_OUT=${FMNIST_OUT:-runs/fmnist}
FMNIST_PRESETS=${FMNIST_PRESETS:-configs/fmnist}
SEEDS=${SEEDS:-"0 1 2"}
JOBS=${JOBS:-1}
PY=${PY:-.venv/bin/python}
EXTRA=${EXTRA:-}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1} MKL_NUM_THREADS=${MKL_NUM_THREADS:-1}
# The baselines of every doc's Fashion-MNIST table (method.params={} and train.stage_rounds={}: drop
# the preset method's params and stage budgets, which other methods refuse).
FM_BASELINES=(fedavg fedprox symmetric_ce coteaching fednoro fedcorr dividemix)

fm_resume() { if compgen -G "$1/checkpoints/*.pt" > /dev/null; then echo "--resume $1"; fi; }

fm_jobs=$(mktemp)
trap 'rm -f "$fm_jobs"' EXIT

fm_prepare() {  # preset seed [clean] -> prints the data dir (prepared once)
  local data=$FMNIST_OUT/$1/data-s$2 noise=""
  if [ "${3:-}" = clean ]; then data=$FMNIST_OUT/$1/data-clean-s$2; noise="-s noise.type=none"; fi
  # shellcheck disable=SC2086
  [ -f "$data/manifest.json" ] || $PY -m fedcore data prepare "$FMNIST_PRESETS/$1.yaml" --out "$data" \
    -s seed="$2" $noise > /dev/null || { echo "prepare failed: $data" >&2; return 1; }
  echo "$data"
}

fm_queue() {  # preset row args... : one run per seed; command.txt records the row's command
  local preset=$1 row=$2 seed data run clean=""
  shift 2
  if [ -n "${FM_ROWS:-}" ] && [[ " $FM_ROWS " != *" $row "* ]]; then return 0; fi
  # A clean row's run must say noise.type=none too: the artifact's config hash has to match.
  case $row in *-clean) clean=clean; set -- -s noise.type=none "$@" ;; esac
  mkdir -p "$FMNIST_OUT/$preset/$row"
  echo "fedcore run $FMNIST_PRESETS/$preset.yaml --data $FMNIST_OUT/$preset/data${clean:+-clean}-s<seed>" \
    "-s seed=<seed> $*" > "$FMNIST_OUT/$preset/$row/command.txt"
  for seed in $SEEDS; do
    run=$FMNIST_OUT/$preset/$row/s$seed
    [ -f "$run/metrics.json" ] && continue
    # A run the engine stopped as diverged would diverge again (same data, seed and machine): its
    # log keeps the reason and the table names the seed. FM_RETRY=1 runs it again.
    if [ -z "${FM_RETRY:-}" ] && grep -qs "training diverged" "$run.log"; then
      echo "fmnist: skipping $run (diverged before, see $run.log; FM_RETRY=1 retries)" >&2; continue
    fi
    data=$(fm_prepare "$preset" "$seed" $clean) || return 1
    echo "nice -n 10 $PY -m fedcore run $FMNIST_PRESETS/$preset.yaml --data $data --out $run $(fm_resume "$run")" \
      "-s seed=$seed $* $EXTRA --no-progress > $run.log 2>&1 || echo FAILED $run" >> "$fm_jobs"
  done
}

fm_baselines() {  # preset: every baseline plus FedAvg on clean labels (the ceiling)
  local m
  for m in "${FM_BASELINES[@]}"; do fm_queue "$1" "$m" -s method.name=$m "-s method.params={}" "-s train.stage_rounds={}" -s train.loss_probe=true; done
  fm_queue "$1" fedavg-clean -s method.name=fedavg "-s method.params={}" "-s train.stage_rounds={}"
}

fm_go() {  # run what was queued, then print the tables of the given presets
  echo "fmnist: $(wc -l < "$fm_jobs") runs to do under $FMNIST_OUT (JOBS=$JOBS)" >&2
  xargs -P "$JOBS" -I{} bash -c {} < "$fm_jobs"
  $PY lab/fmnist_table.py "$FMNIST_OUT" "$@"
}
