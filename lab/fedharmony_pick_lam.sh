#!/usr/bin/env bash
# The v3 bed's table (lab/results/fedharmony.md): lam for the v3 reading chosen on seed 0's validation
# split (val/mAP, best round; never the test split), then every row on each seed with that lam.
# (Named for what it does, not for the spec version it reads: it was lab/fedharmony_v3.sh.)
# Usage: bash lab/fedharmony_pick_lam.sh [OUT_DIR] [SEEDS...]; run it through /work/bin/slot on a shared machine.
set -euo pipefail
OUT=${1:-runs/fedharmony}
shift || true
SEEDS=${*:-0 1 2}
FH="$(dirname "$0")/fedharmony.sh"
PY=${FEDCORE:-.venv/bin/fedcore}
PY="$(dirname "$PY")/python"
export SETTINGS=scenes_v3
ONLY="fedavg v3_lam0.1 v3_lam1 v3_lam10" bash "$FH" "$OUT" 0 > /dev/null
LAM3=$("$PY" - "$OUT/scenes_v3" <<'PY'
import json, sys
from pathlib import Path
root = Path(sys.argv[1])
val = {lam: json.loads((root / f"v3_lam{lam}" / "s0" / "metrics.json").read_text())["summary"]["final/val_mAP_best"]
       for lam in ("0.1", "1", "10")}
print(max(val, key=val.get))
PY
)
echo "lam chosen on seed 0's validation: $LAM3"
export LAM3
# Seed 0's v3 row is the chosen run itself, not a second copy of it.
if [ ! -d "$OUT/scenes_v3/v3/s0" ]; then mkdir -p "$OUT/scenes_v3/v3"; cp -r "$OUT/scenes_v3/v3_lam$LAM3/s0" "$OUT/scenes_v3/v3/s0"; fi
for seed in $SEEDS; do
  ONLY="fedavg fedprox fedavg_iid v3 v3_caa v3_ecl fedharmony" bash "$FH" "$OUT" "$seed" > /dev/null
done
ONLY="fedavg fedavg_iid fedprox fedharmony v3 v3_ecl v3_caa v3_lam0.1 v3_lam1 v3_lam10" bash "$FH" "$OUT" $SEEDS
