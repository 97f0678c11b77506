#!/usr/bin/env bash
# Reproduce docs/results/fedharmony.md: FedAvg (drifted and IID split), FedProx, FedHarmony and
# its ablations on digits_mosaic, in two data settings:
#   occluded  the preset configs/fedharmony_digits_mosaic.yaml (occlude 0.5, pixel_noise 64)
#   clean     the same with undegraded tiles (occlude 0, pixel_noise 0): the earlier preset
#   matching  occluded tiles, 5 favoured pairs per group: co-occurrence drift without marginal skew
#             (not in the default SETTINGS; run it with SETTINGS=matching)
# One data artifact per (setting, split, seed), shared by every method.
# Usage: bash docs/results/fedharmony.sh [OUT_DIR] [SEEDS...]      (about 1 CPU-minute per run)
#   SETTINGS="occluded" ONLY="fedavg fedavg_iid" bash docs/results/fedharmony.sh runs/fh 3 4 5
#   runs a subset (here: the held-out drift-cost check).
set -euo pipefail
# An interrupted run (checkpoints, no metrics.json) is continued; `fedcore run` refuses to overwrite it.
resume_flag() { if compgen -G "$1/checkpoints/*.pt" > /dev/null; then echo "--resume $1"; fi; }
OUT=${1:-runs/fedharmony}
shift || true
SEEDS=${*:-0 1 2}
CFG=configs/fedharmony_digits_mosaic.yaml
FEDCORE=${FEDCORE:-.venv/bin/fedcore}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}  # tiny models: extra threads only add contention
declare -A DATA=(
  [occluded]="${OCCLUDED_DATA:-}"  # the preset; OCCLUDED_DATA overrides it (e.g. the heavier level)
  [clean]="-s data.params.occlude=0 -s data.params.pixel_noise=0"
  # Co-occurrence drift alone: each group's 5 favoured pairs cover all 10 digits, so every
  # client has the same label marginals and only the pairing differs (occluded tiles as the preset).
  [matching]="${OCCLUDED_DATA:-} -s data.params.pairs_per_group=5"
)
declare -A VARIANTS=(
  [fedavg]="-s method.name=fedavg"
  [fedavg_iid]="-s method.name=fedavg -s partition.kind=iid"  # same mosaics split IID: every client follows the global pattern
  [fedprox]="-s method.name=fedprox"
  [fedharmony]=""
  [no_consensus]="-s method.params.consensus=false"
  [no_caa]="-s method.params.caa=false"
  [no_blocks]="-s method.params.blocks=false"
  [lam0.1]="-s method.params.lam=0.1"  # sensitivity of the alignment weight (spec: 1.0)
  [lam0.01]="-s method.params.lam=0.01"
)
declare -A NAMES=(
  [occluded]="fedavg fedavg_iid fedprox fedharmony no_consensus no_caa no_blocks"
  [clean]="fedavg fedavg_iid fedprox fedharmony no_consensus no_caa no_blocks lam0.1 lam0.01"
  [matching]="fedavg fedavg_iid fedprox fedharmony no_consensus"
)
SETTINGS=${SETTINGS:-occluded clean}
for setting in $SETTINGS; do
  names=${ONLY:-${NAMES[$setting]}}
  for seed in $SEEDS; do
    for split in natural iid; do
      data="$OUT/$setting/data-$split-s$seed"
      [ -f "$data/manifest.json" ] && continue
      # shellcheck disable=SC2086
      nice -n 10 "$FEDCORE" data prepare "$CFG" -s seed="$seed" -s partition.kind="$split" ${DATA[$setting]} \
        --out "$data" >/dev/null
    done
    for v in $names; do
      run="$OUT/$setting/$v/s$seed"
      [ -f "$run/metrics.json" ] && continue
      split=natural; [ "$v" = fedavg_iid ] && split=iid
      # shellcheck disable=SC2086
      nice -n 10 "$FEDCORE" run "$CFG" -s seed="$seed" ${DATA[$setting]} ${VARIANTS[$v]} \
        --data "$OUT/$setting/data-$split-s$seed" --out "$run" $(resume_flag "$run") --no-progress >/dev/null
    done
  done
done
# The markdown tables of docs/results/fedharmony.md (x100, mean ± std over seeds), one per setting.
for setting in $SETTINGS; do
  echo "== $setting (seeds: $SEEDS)"
  "$(dirname "$FEDCORE")/python" - "$OUT/$setting" "$SEEDS" <<'PY'
import json, sys
from pathlib import Path
from fedcore.reporting.compare import mean_std
keys = [("final/mAP", "mAP"), ("final/mAP_last10", "mAP last10"), ("last/test/OmAP", "O-mAP"),
        ("last/test/CF1", "CF1"), ("last/test/OF1", "OF1"), ("last/test/corr_dist", "corr dist")]
seeds = sys.argv[2].split()
print("| run | seeds | " + " | ".join(n for _, n in keys) + " |")
print("|---|---|" + "---|" * len(keys))
for d in sorted(p for p in Path(sys.argv[1]).iterdir() if p.is_dir() and not p.name.startswith("data")):
    files = [d / f"s{s}" / "metrics.json" for s in seeds]
    recs = [json.loads(f.read_text())["summary"] for f in files if f.is_file()]
    if not recs:
        continue
    cells = []
    for k, _ in keys:
        m, s = mean_std([r.get(k) for r in recs])
        cells.append(f"{m:.2f} ± {s:.2f}" if k.endswith("corr_dist") else f"{m * 100:.1f} ± {s * 100:.1f}")
    print(f"| {d.name} | {len(recs)} | " + " | ".join(cells) + " |")
PY
done
