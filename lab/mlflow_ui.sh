#!/usr/bin/env bash
# Screenshots of the MLflow UI for docs/pipelines.md ("MLflow UI"), taken with headless Chromium.
#
# Runs the experiment pipeline locally (FedGR on the quickstart's noisy digits, 15 rounds,
# system metrics every 2 s), opens its store with `mlflow ui` on 127.0.0.1, and shoots the
# experiment's run list, the child run's overview (datasets, source, model), its system
# metrics, and its noise-rate figure into docs/img/.
#
#   bash lab/mlflow_ui.sh [OUT]        # on a shared machine: /work/bin/slot bash lab/mlflow_ui.sh
#
# REUSE=1 re-shoots the store a previous call left in OUT, without a new run.
# Needs chromium (Debian: apt-get install -y chromium); PYTHON and CHROMIUM override the binaries.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-/tmp/fedcore-mlflow-ui}
PY=${PYTHON:-python}
CHROMIUM=${CHROMIUM:-chromium}
PORT=${PORT:-5077}
IMG=docs/img

if [ -z "${REUSE:-}" ]; then  # REUSE=1: shoot the store a previous call left in OUT
  rm -rf "$OUT"
  "$PY" -m fedcore pipeline run experiment configs/quickstart.yaml --local --out "$OUT" \
      --set method.name=fedgr --set 'method.params={}' --set train.rounds=15 --set tracking.system_metrics_every=2
fi
STORE="sqlite:///$OUT/mlruns/mlflow.db"

# Its own session, so the UI's workers go with it.
setsid "$PY" -m mlflow ui --backend-store-uri "$STORE" --default-artifact-root "$OUT/mlruns/artifacts" \
    --host 127.0.0.1 --port "$PORT" > "$OUT/mlflow-ui.log" 2>&1 &
UI=$!
trap 'kill -- -"$UI" 2>/dev/null || true' EXIT
for _ in $(seq 120); do
  curl -fs "http://127.0.0.1:$PORT/health" > /dev/null && break
  sleep 1
done

read -r EXP RUN < <("$PY" - "$STORE" <<'EOF'
import sys
from mlflow import MlflowClient
client = MlflowClient(sys.argv[1])
exp = client.get_experiment_by_name("fedcore")
(child,) = client.search_runs([exp.experiment_id], "tags.`fedcore.role` = 'child'", max_results=1)
print(exp.experiment_id, child.info.run_id)
EOF
)

# MLflow 3.17's UI picks GenAI or model-training pages from its workflow switch (default GenAI,
# remembered per browser), not from the experiment's mlflow.experimentKind tag: ask for training.
ML="?workflowType=machine_learning"
shoot() {  # shoot NAME URL-FRAGMENT
  local profile
  profile=$(mktemp -d)
  "$CHROMIUM" --headless --no-sandbox --disable-gpu --disable-background-networking --disable-component-update \
      --disable-sync --no-first-run --user-data-dir="$profile" --hide-scrollbars --window-size=1500,1000 \
      --virtual-time-budget=20000 --screenshot="$IMG/$1.png" "http://127.0.0.1:$PORT/#/experiments/$EXP$2" \
      2> "$OUT/chromium-$1.log"
  rm -rf "$profile"
}

mkdir -p "$IMG"
shoot mlflow_runs "$ML"
shoot mlflow_run_overview "/runs/$RUN$ML"
shoot mlflow_system_metrics "/runs/$RUN/system-metrics$ML"
shoot mlflow_noise_rates "/runs/$RUN/artifactPath/evaluation/noise_rates.png$ML"
echo "screenshots in $IMG (experiment $EXP, run $RUN)"
