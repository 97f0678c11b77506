#!/usr/bin/env bash
# Reproduce lab/results/notes/fedharmony.md. Settings (SETTINGS picks; default: the two scenes presets):
#   scenes_digits   configs/fedharmony_scenes_digits.yaml: scenes_mosaic, digit tiles
#   scenes_fmnist   configs/fmnist/fedharmony_scenes.yaml: scenes_mosaic, Fashion-MNIST tiles
#   scenes_v3       configs/fmnist/fedharmony_scenes_v3.yaml: scenes_v3 (spec v3 bed), 10% of each client's
#                   data held out for validation (lam is chosen on val/mAP, never on test)
#                   (FMNIST_ROOT=/work/data/fmnist passes data.root; unset: the loader's own search)
#   scenes_v3_d3_{10x400,100x40,500x8}  D3 of the v3 notes: the v3 bed at clients x samples per client,
#                   equal sizes, 50 clients a round (10x400: all 10)
#   occluded        smoke scale: digits_mosaic preset (occlude 0.5, pixel_noise 64), spec-v1 FedHarmony
#   clean           smoke scale: the same with undegraded tiles (occlude 0, pixel_noise 0)
#   matching        smoke scale: occluded tiles, 5 favoured pairs per group (no marginal skew)
# FedAvg, FedProx, FedAvg on an IID split of the same data (the drift control), FedHarmony and its
# ablations. One data artifact per (setting, split, seed), shared by every method; the scenes
# settings draw their data with data.params.seed = the seed. Finished runs are skipped.
# Usage: bash lab/fedharmony.sh [OUT_DIR] [SEEDS...]   (scenes: about 2-5 CPU-minutes per run)
#   SETTINGS="scenes_digits" ONLY="fedavg fedavg_iid" bash lab/fedharmony.sh runs/fh 0
#   runs a subset. Run it through /work/bin/slot on a shared machine.
set -euo pipefail
# An interrupted run (checkpoints, no metrics.json) is continued; `fedcore run` refuses to overwrite it.
resume_flag() { if compgen -G "$1/checkpoints/*.pt" > /dev/null; then echo "--resume $1"; fi; }
OUT=${1:-runs/fedharmony}
shift || true
SEEDS=${*:-0 1 2}
FEDCORE=${FEDCORE:-.venv/bin/fedcore}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}  # tiny models: extra threads only add contention
MOSAIC=configs/fedharmony_digits_mosaic.yaml
declare -A CFG=(
  [scenes_digits]=configs/fedharmony_scenes_digits.yaml [scenes_fmnist]=configs/fmnist/fedharmony_scenes.yaml
  [scenes_v3]=configs/fmnist/fedharmony_scenes_v3.yaml
  [scenes_v3_d3_10x400]=configs/fmnist/fedharmony_scenes_v3.yaml
  [scenes_v3_d3_100x40]=configs/fmnist/fedharmony_scenes_v3.yaml
  [scenes_v3_d3_500x8]=configs/fmnist/fedharmony_scenes_v3.yaml
  [occluded]=$MOSAIC [clean]=$MOSAIC [matching]=$MOSAIC
)
declare -A DATA=(
  [scenes_digits]="" [scenes_fmnist]="${FMNIST_ROOT:+-s data.root=$FMNIST_ROOT}"
  [scenes_v3]="${FMNIST_ROOT:+-s data.root=$FMNIST_ROOT} -s data.validation.fraction=0.1"
  [scenes_v3_d3_10x400]="${FMNIST_ROOT:+-s data.root=$FMNIST_ROOT} -s data.validation.fraction=0.1 \
    -s data.params.groups=10 -s partition.num_clients=10 -s data.params.size_sigma=0 -s train.client_fraction=1.0"
  [scenes_v3_d3_100x40]="${FMNIST_ROOT:+-s data.root=$FMNIST_ROOT} -s data.validation.fraction=0.1 \
    -s data.params.size_sigma=0"
  [scenes_v3_d3_500x8]="${FMNIST_ROOT:+-s data.root=$FMNIST_ROOT} -s data.validation.fraction=0.1 \
    -s data.params.groups=500 -s partition.num_clients=500 -s data.params.size_sigma=0 -s train.client_fraction=0.1"
  [occluded]="${OCCLUDED_DATA:-}"  # the preset; OCCLUDED_DATA overrides it (e.g. the heavier level)
  [clean]="-s data.params.occlude=0 -s data.params.pixel_noise=0"
  # Co-occurrence drift alone: each group's 5 favoured pairs cover all 10 digits.
  [matching]="${OCCLUDED_DATA:-} -s data.params.pairs_per_group=5"
)
V3="-s method.params.timing=start -s method.params.teacher=pooled -s method.params.weighting=abs \
  -s method.params.diagonal=true -s method.params.scale=sum -s method.params.lam_schedule=caa \
  -s method.params.gamma_by=median -s method.params.mask_unannotated=true"
BASELINE="-s method.params={}"  # the FedHarmony presets carry method.params that baselines refuse
declare -A VARIANTS=(
  [fedavg]="-s method.name=fedavg $BASELINE"
  [fedavg_iid]="-s method.name=fedavg $BASELINE -s partition.kind=iid"  # same data split IID
  [fedprox]="-s method.name=fedprox $BASELINE"
  [fedharmony]=""
  [no_consensus]="-s method.params.consensus=false"  # CAA alone (no ECL)
  [no_caa]="-s method.params.caa=false"  # ECL alone
  [no_blocks]="-s method.params.blocks=false"
  [v1]="-s method.params.estimate=batch -s method.params.scale=sum"  # the spec-v1 alignment term
  [lam0.1]="-s method.params.lam=0.1"  # sensitivity of the alignment weight (spec: 1.0)
  [lam0.01]="-s method.params.lam=0.01"
  [lam10]="-s method.params.lam=10"
  # Spec v3's readings together (the fedharmony.py docstring lists v2 -> v3); LAM3 picks its lam (validation).
  [v3]="$V3 -s method.params.lam=${LAM3:-1.0}"
  [v3_ecl]="$V3 -s method.params.lam=${LAM3:-1.0} -s method.params.caa=false"  # ECL alone
  [v3_caa]="$V3 -s method.params.consensus=false"  # CAA alone
  [v3_lam0.1]="$V3 -s method.params.lam=0.1"
  [v3_lam1]="$V3 -s method.params.lam=1"
  [v3_lam10]="$V3 -s method.params.lam=10"
)
declare -A NAMES=(
  [scenes_digits]="fedavg fedavg_iid fedprox fedharmony no_consensus no_caa v1"
  [scenes_fmnist]="fedavg fedavg_iid fedprox fedharmony no_consensus no_caa v1"
  [scenes_v3]="fedavg fedavg_iid fedprox fedharmony v3 v3_ecl v3_caa"
  [scenes_v3_d3_10x400]="fedavg v3_ecl" [scenes_v3_d3_100x40]="fedavg v3_ecl" [scenes_v3_d3_500x8]="fedavg v3_ecl"
  [occluded]="fedavg fedavg_iid fedprox fedharmony no_consensus no_caa no_blocks"
  [clean]="fedavg fedavg_iid fedprox fedharmony no_consensus no_caa no_blocks lam0.1 lam0.01"
  [matching]="fedavg fedavg_iid fedprox fedharmony no_consensus"
)
SETTINGS=${SETTINGS:-scenes_digits scenes_fmnist}
for setting in $SETTINGS; do
  names=${ONLY:-${NAMES[$setting]}}
  for seed in $SEEDS; do
    dseed=""; [[ $setting == scenes_* ]] && dseed="-s data.params.seed=$seed"
    for split in natural iid; do
      data="$OUT/$setting/data-$split-s$seed"
      [ -f "$data/manifest.json" ] && continue
      # shellcheck disable=SC2086
      nice -n 10 "$FEDCORE" data prepare "${CFG[$setting]}" -s seed="$seed" -s partition.kind="$split" \
        ${DATA[$setting]} $dseed --out "$data" >/dev/null
    done
    for v in $names; do
      run="$OUT/$setting/$v/s$seed"
      [ -f "$run/metrics.json" ] && continue
      split=natural; [ "$v" = fedavg_iid ] && split=iid
      # The v3 preset's method section holds the v3 reading; its `fedharmony` row is v2's defaults.
      v2=""; [[ $setting == scenes_v3* && $v == fedharmony ]] && v2="-s method.params={}"
      # shellcheck disable=SC2086
      nice -n 10 "$FEDCORE" run "${CFG[$setting]}" -s seed="$seed" ${DATA[$setting]} $dseed ${VARIANTS[$v]} $v2 \
        --data "$OUT/$setting/data-$split-s$seed" --out "$run" $(resume_flag "$run") --no-progress >/dev/null
    done
  done
done
# The tables of lab/results/notes/fedharmony.md (x100, mean ± std over seeds), the premise check of each
# data artifact and the drift cost (fedavg_iid - fedavg, mAP points) per seed.
for setting in $SETTINGS; do
  echo "== $setting (seeds: $SEEDS)"
  "$(dirname "$FEDCORE")/python" - "$OUT/$setting" "$SEEDS" <<'PY'
import json, sys
from pathlib import Path
from fedcore.stats.summary import mean_std
root, seeds = Path(sys.argv[1]), sys.argv[2].split()
keys = [("final/mAP", "mAP"), ("final/val_mAP_best", "val mAP best"), ("final/mAP_last10", "mAP last10"), ("last/test/OmAP", "O-mAP"),
        ("last/test/CF1", "CF1"), ("last/test/OF1", "OF1"),
        ("last/test/corr_dist", "corr dist"), ("last/test/corr_dist_hard", "corr dist (0.5)")]
def summary(run, seed):
    f = root / run / f"s{seed}" / "metrics.json"
    return json.loads(f.read_text())["summary"] if f.is_file() else None
print("| run | seeds | " + " | ".join(n for _, n in keys) + " |")
print("|---|---|" + "---|" * len(keys))
for d in sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith("data")):
    recs = [r for r in (summary(d.name, s) for s in seeds) if r]
    if not recs:
        continue
    cells = []
    for k, _ in keys:
        m, s = mean_std([r.get(k) for r in recs])
        cells.append(f"{m:.2f} ± {s:.2f}" if "corr_dist" in k else f"{m * 100:.1f} ± {s * 100:.1f}")
    print(f"| {d.name} | {len(recs)} | " + " | ".join(cells) + " |")
for seed in seeds:
    scene = root / f"data-natural-s{seed}" / "scene.json"
    prem = json.loads(scene.read_text()).get("premise") if scene.is_file() else None
    if prem:
        print(f"premise s{seed}: " + "; ".join(f"{k} labels: consensus {v['consensus']:.2f} vs own {v['own']:.2f}"
                                              for k, v in prem.items()))
    a, b = summary("fedavg", seed), summary("fedavg_iid", seed)
    if a and b:
        print(f"drift cost s{seed}: {100 * (b['final/mAP'] - a['final/mAP']):.1f} mAP "
              f"(fedavg_iid {100 * b['final/mAP']:.1f} vs fedavg {100 * a['final/mAP']:.1f})")
PY
done
