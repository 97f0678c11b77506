"""The recorded bench runs behind the docs are the shipped grids' runs, and the quickstart's sweep is one's output.

lab/records/NAME.json is the bench.json of `fedcore bench lab/grids/NAME.yaml` (run
dirs made relative). The grids take minutes to an hour, too long for the suite, so the tests check
the chain from each record instead: its grid is the grid file, its choice is what the rule computes
from its rows, and the quickstart's tunes give configs/sweeps/quickstart_tuned.yaml exactly. The rule is
the one the record says it was chosen by (`among`: the settings its choice read; a record without it was
written before the choice read default rows, and was chosen among tuned rows): the records are not rerun
when the rule changes, and each names the code that produced it.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from fedcore.bench.choice import among_of, choose
from fedcore.bench.grid import load_grid
from fedcore.bench.sweepfile import tuned_sweep

ROOT = Path(__file__).resolve().parents[2]
RECORDS_DIR = ROOT / "lab/records"


# record -> its scenes; (record, scene) -> the shipped sweep of that scene's tuned settings
RECORDS = {"quickstart": ["quickstart"], "digits_pairflip20": ["digits-pairflip20"],
           "fmnist_fedsir_09": ["fedsir_09"], "fmnist_fedharmony_scenes": ["fedharmony_scenes"],
           "fmnist_fedgr": ["fedgr_sym", "fedgr_mixed"],
           "fmnist_fedrg": ["fedrg_sym_localized", "fedrg_pair_localized", "fedrg_sym_globalized",
                            "fedrg_pair_globalized"],
           "crowd": ["crowd"]}
SHIPPED = {("quickstart", "quickstart"): "configs/sweeps/quickstart_tuned.yaml",
           ("fmnist_fedsir_09", "fedsir_09"): "configs/sweeps/fmnist_fedsir_09_tuned.yaml",
           ("fmnist_fedharmony_scenes", "fedharmony_scenes"): "configs/sweeps/fmnist_fedharmony_scenes_tuned.yaml",
           ("fmnist_fedgr", "fedgr_sym"): "configs/sweeps/fmnist_fedgr_sym_tuned.yaml",
           ("fmnist_fedgr", "fedgr_mixed"): "configs/sweeps/fmnist_fedgr_mixed_tuned.yaml",
           ("fmnist_fedrg", "fedrg_sym_localized"): "configs/sweeps/fmnist_fedrg_sym_localized_tuned.yaml",
           ("fmnist_fedrg", "fedrg_pair_localized"): "configs/sweeps/fmnist_fedrg_pair_localized_tuned.yaml",
           ("fmnist_fedrg", "fedrg_sym_globalized"): "configs/sweeps/fmnist_fedrg_sym_globalized_tuned.yaml",
           ("fmnist_fedrg", "fedrg_pair_globalized"): "configs/sweeps/fmnist_fedrg_pair_globalized_tuned.yaml"}
SCENES = [(r, s) for r, scenes in sorted(RECORDS.items()) for s in scenes]


def _record(name: str) -> dict:
    return json.loads((RECORDS_DIR / f"{name}.json").read_text())


@pytest.mark.parametrize("name", sorted(RECORDS))
def test_the_record_was_run_from_the_shipped_grid(name):
    bench = _record(name)
    grid = load_grid(ROOT / f"lab/grids/{name}.yaml")
    assert sorted(bench["scenes"]) == sorted(RECORDS[name]) == sorted(grid.scenes)
    assert bench["grid"]["methods"] == list(grid.methods)
    assert (bench["grid"]["trials"], bench["grid"]["tuning_seed"]) == (grid.trials, grid.tuning_seed)
    assert bench["grid"]["seeds"] == list(grid.seeds)
    assert bench["grid"]["validation_fraction"] == grid.validation_fraction


@pytest.mark.parametrize(("name", "scene"), sorted(SHIPPED))
def test_the_shipped_tuned_sweep_is_the_records_tunes_to_the_digit(name, scene):
    rec = _record(name)["scenes"][scene]
    shipped = yaml.safe_load((ROOT / SHIPPED[name, scene]).read_text())
    fixed = {m: t["fixed"] for m, t in rec["tuned"].items()}
    # The chosen row with the method it trains (itself, or a variant's: fedgr-robust trains fedgr).
    method = load_grid(ROOT / f"lab/grids/{name}.yaml").variant(rec["choice"]).method
    # A record's scene holds the federation's overrides (`set`); the sweep file holds them with the data they gave.
    scene_block = shipped.pop("scene", None)
    assert scene_block is None or scene_block["set"] == rec["set"]
    assert shipped == tuned_sweep(rec["tuned"], fixed, selected=(rec["choice"], method),
                                  setting=rec.get("choice_setting"))


@pytest.mark.parametrize(("name", "scene"), SCENES)
def test_the_records_choice_follows_from_its_rows(name, scene):
    bench = _record(name)
    rec = bench["scenes"][scene]
    got = choose(rec["rows"], bench["grid"]["seeds"], among_of(rec))
    assert (got["choice"], got["runner_up"]) == (rec["choice"], rec["runner_up"])
    assert got["margin"] == rec["margin"]
    assert "still_to_run" not in rec  # a page's tables come from a finished grid, not `--so-far`


@pytest.mark.parametrize(("name", "scene"), sorted(SHIPPED))
def test_fedcore_run_with_the_shipped_sweep_trains_the_records_tuned_runs(name, scene):
    """`fedcore run CONFIG --sweep FILE --method ROW` (plus the table's seed and validation split) builds the
    very config the bench's tuned run of ROW had: its tune's best trial, moved to the reporting seed."""
    from fedcore.bench.plan import row_base, seed_overrides
    from fedcore.pipeline.plan import load_sweep_spec, one_row_overrides
    from fedcore.registries import load_config

    bench = _record(name)
    grid = load_grid(ROOT / f"lab/grids/{name}.yaml")
    sc, rec = grid.scenes[scene], bench["scenes"][scene]
    spec = load_sweep_spec(ROOT / SHIPPED[name, scene])
    seed = grid.seeds[-1]
    table = [f"data.validation.fraction={grid.validation_fraction}", *seed_overrides(sc, seed)]
    for row, tune in rec["tuned"].items():
        best = [f"{k}={v!r}" for k, v in tune["best_params"].items()]
        bench_run = load_config(sc.config, [*row_base(grid, scene, row, []), *seed_overrides(sc, grid.tuning_seed),
                                            *best, *seed_overrides(sc, seed)])
        base = load_config(sc.config, table)
        ours = load_config(sc.config, [*one_row_overrides(base, spec, row), *table])
        assert ours.config_hash() == bench_run.config_hash(), row
