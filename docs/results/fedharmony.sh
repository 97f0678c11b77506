#!/usr/bin/env bash
# Reproduce docs/results/fedharmony.md: FedAvg, FedProx, FedHarmony and its ablations on
# digits_mosaic, seeds 0-2. One data artifact per seed, shared by every method.
# Usage: bash docs/results/fedharmony.sh [OUT_DIR] [SEEDS...]   (about 1 CPU-minute per run)
set -euo pipefail
OUT=${1:-runs/fedharmony}
shift || true
SEEDS=${*:-0 1 2}
CFG=configs/fedharmony_digits_mosaic.yaml
FEDCORE=${FEDCORE:-.venv/bin/fedcore}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}  # tiny models: extra threads only add contention
declare -A VARIANTS=(
  [fedavg]="-s method.name=fedavg"
  [fedprox]="-s method.name=fedprox"
  [fedharmony]=""
  [no_consensus]="-s method.params.consensus=false"
  [no_caa]="-s method.params.caa=false"
  [no_blocks]="-s method.params.blocks=false"
  [lam0.1]="-s method.params.lam=0.1"  # sensitivity of the alignment weight (spec: 1.0)
  [lam0.01]="-s method.params.lam=0.01"
)
NAMES="fedavg fedprox fedharmony no_consensus no_caa no_blocks lam0.1 lam0.01"
for seed in $SEEDS; do
  data="$OUT/data-s$seed"
  [ -f "$data/manifest.json" ] || nice -n 10 "$FEDCORE" data prepare "$CFG" -s seed="$seed" --out "$data" >/dev/null
  for v in $NAMES; do
    run="$OUT/$v/s$seed"
    [ -f "$run/metrics.json" ] && continue
    # shellcheck disable=SC2086
    nice -n 10 "$FEDCORE" run "$CFG" -s seed="$seed" ${VARIANTS[$v]} --data "$data" --out "$run" --no-progress >/dev/null
  done
done
for v in $NAMES; do
  echo "== $v"
  "$FEDCORE" compare "$OUT/$v"/s*
done
# The markdown table of docs/results/fedharmony.md (x100, mean ± std over seeds).
"$(dirname "$FEDCORE")/python" - "$OUT" <<'PY'
import json, sys
from pathlib import Path
from fedcore.compare import mean_std
keys = [("final/mAP", "mAP"), ("final/mAP_last10", "mAP last10"), ("last/test/OmAP", "O-mAP"),
        ("last/test/CF1", "CF1"), ("last/test/OF1", "OF1"), ("last/test/corr_dist", "corr dist")]
print("| run | seeds | " + " | ".join(n for _, n in keys) + " |")
print("|---|---|" + "---|" * len(keys))
for d in sorted(p for p in Path(sys.argv[1]).iterdir() if p.is_dir() and not p.name.startswith("data")):
    recs = [json.loads(f.read_text())["summary"] for f in sorted(d.glob("s*/metrics.json"))]
    cells = []
    for k, _ in keys:
        m, s = mean_std([r.get(k) for r in recs])
        scale = 1 if k.endswith("corr_dist") else 100
        cells.append(f"{m * scale:.2f} ± {s * scale:.2f}" if scale == 1 else f"{m * scale:.1f} ± {s * scale:.1f}")
    print(f"| {d.name} | {len(recs)} | " + " | ".join(cells) + " |")
PY
