"""`fedcore bench GRID`: tune every method of every scene with the same budget, run the default
and tuned settings on the reporting seeds, and pick a method per scene on validation.
`fedcore bench-table OUT...`: the tables of docs/results/tuning.md from one or more bench results.
`fedcore bench-record OUT... --out FILE`: one portable bench.json from a grid's parts."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from fedcore.cli.console import local_folder, make_console, set_option
from fedcore.errors import UserError

console = make_console()
err_console = make_console(stderr=True)
SetOpt = set_option("dotted override for every scene, e.g. train.rounds=3 (repeatable; never method or seed)")


def bench(
    grid: Annotated[Path, typer.Argument(help="grid YAML, e.g. experiments/grids/quickstart.yaml")],
    out: Annotated[Path, typer.Option("--out", "-o", help="bench dir: data, tunes, runs, bench.json")] = Path(
        "runs/bench"),
    trials: Annotated[int | None, typer.Option("--trials", "-n", help="tune trials per method (the grid's "
                                               "otherwise)")] = None,
    seeds: Annotated[str | None, typer.Option("--seeds", help="reporting seeds, e.g. 0,1 (the grid's "
                                              "otherwise)")] = None,
    methods: Annotated[str | None, typer.Option("--methods", help="methods, e.g. fedavg,fedgr-robust (the grid's "
                                                "otherwise)")] = None,
    scenes: Annotated[str | None, typer.Option("--scenes", help="only these scenes, e.g. fedrg_sym_localized (the "
                                              "grid's otherwise): a grid in parts, joined by `fedcore "
                                              "bench-record`")] = None,
    set_: SetOpt = None,
    jobs: Annotated[int, typer.Option("--jobs", "-j", min=1, help="tunes and runs at once, each in its own "
                                      "process on one thread")] = 1,
    progress: Annotated[bool, typer.Option(help="show the progress bar")] = True,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="print what is left to run per scene and method, "
                                          "and the time left where OUT's finished jobs measured it; run "
                                          "nothing")] = False,
    so_far: Annotated[bool, typer.Option("--so-far", help="write bench.json, tables, sweeps and reports from "
                                         "the runs finished so far, scenes with work left marked partial; "
                                         "runs nothing, so it may run beside a bench on OUT")] = False,
) -> None:
    """Pick a method for your federation: equal-budget tunes on validation, then default and tuned
    runs on the reporting seeds. Resumable: a rerun does only what is missing. Writes OUT/bench.json."""
    from fedcore.bench.eta import grid_progress  # lazy: CLI start-up
    from fedcore.bench.grid import load_grid  # lazy: CLI start-up
    from fedcore.bench.plan import data_jobs, grid_todo, plan_grid, scene_left  # lazy: CLI start-up
    from fedcore.bench.results import write_results  # lazy: CLI start-up
    from fedcore.bench.runner import check_data, prepare_data, run_jobs  # lazy: CLI start-up
    from fedcore.bench.stale import refuse_stale  # lazy: CLI start-up

    if dry_run and so_far:
        raise UserError("--dry-run prints what is left and --so-far writes what is done; ask for one")
    out = local_folder(out)
    cli_set = list(set_ or [])
    g = load_grid(grid, trials=trials, seeds=int_list(seeds, "--seeds"), methods=str_list(methods), shared=cli_set,
                  scenes=str_list(scenes))
    first, after = plan_grid(g, out, cli_set)
    all_jobs = [*first, *(j for js in after.values() for j in js)]
    refuse_stale(all_jobs)  # before a dry run too: it would count another grid's runs as done
    # What preparing the data would refuse, refused before anything is written (a dry run too).
    built = {} if so_far else check_data(data_jobs(g, out, cli_set))
    if dry_run:
        print_todo(all_jobs, jobs, out)
        return
    todo = grid_todo(all_jobs) if so_far else []
    if so_far and not any(r["default"][0] + r["tuned"][0] for r in todo):
        raise UserError(f"no run of this grid has finished in '{out}' yet; --so-far writes results from "
                        "finished runs (`--dry-run` shows what is left)")
    if not so_far:
        prepare_data(data_jobs(g, out, cli_set), say=say, built=built)
        with grid_progress(all_jobs, progress, say, err_console, workers=jobs) as done:
            run_jobs(first, after, jobs, done)
    left = scene_left(todo) if so_far else None
    result = write_results(g, out, cli_set, left)
    for name, scene in result["scenes"].items():
        console.print(choice_line(name, scene), markup=False, highlight=False, soft_wrap=True)
        for note in scene["test_notes"]:  # test labels as noisy as training's: every test score reads them
            console.print(f"{name}: caveat from the data: {note}; the test scores read those labels",
                          markup=False, highlight=False, soft_wrap=True)
    if left:
        console.print(f"partial: {sum(s['tune_trials'] for s in left.values())} tune trials and "
                      f"{sum(s['runs'] for s in left.values())} runs still to run (the same command without "
                      "--so-far does them)", markup=False, highlight=False, soft_wrap=True)
    console.print(f"wrote {out / 'bench.json'} (per scene: tuned_sweep.yaml, table.md, report/report.md)",
                  markup=False, highlight=False)


def print_todo(jobs: list, workers: int, out: Path) -> None:
    """--dry-run: a row per (scene, method) with what is done of its tune and runs, then the total."""
    from fedcore.bench.eta import grid_eta, time_left  # lazy: CLI start-up
    from fedcore.bench.plan import grid_todo  # lazy: CLI start-up

    table = Table("scene", "method", "tune trials", "default runs", "tuned runs", title=f"fedcore bench {out}")
    for r in grid_todo(jobs):
        table.add_row(r["scene"], r["row"], *(f"{done}/{planned}" for done, planned in
                                               (r["trials"], r["default"], r["tuned"])))
    console.print(table)
    costs, eta = grid_eta(jobs, workers)
    units = sum(costs.values())
    if not units:
        console.print("nothing left to run: `fedcore bench` writes bench.json from the finished runs")
        return
    left = time_left(eta.left())
    console.print(f"{units:g} units to run (a run is one, a tune its trials left) with --jobs {workers}; "
                  + (left if left else "no time measured yet in this OUT (each job's time is kept as it ends)"),
                  markup=False, highlight=False, soft_wrap=True)


def say(line: str) -> None:
    err_console.print(line, markup=False, highlight=False, soft_wrap=True)


def choice_line(name: str, scene: dict) -> str:
    """'quickstart: fedsir at its tuned setting (val acc last-10 0.912), runner-up fednoro (default) by 0.004'."""
    from fedcore.bench.choice import among_of, label  # lazy: CLI start-up

    if scene.get("still_to_run"):
        name += " (so far)"
    setting = scene.get("choice_setting") or among_of(scene)[-1]  # a record from before settings: tuned
    if scene["choice"] is None:
        return f"{name}: no method has a validation score on every reporting seed at either setting"
    means = scene["means"]
    mean = means.get(label(scene["choice"], setting), means.get(scene["choice"]))
    line = f"{name}: {scene['choice']} at its {setting} setting (val {scene['metric']} last-10 {mean:.4f})"
    if scene["runner_up"] is not None:
        other = scene.get("runner_up_setting")
        line += f", runner-up {scene['runner_up']}{f' ({other})' if other else ''} by {scene['margin']:.4f}"
    if scene["left_out"]:
        line += f"; left out (a seed without a score): {', '.join(scene['left_out'])}"
    return line


def int_list(text: str | None, option: str) -> list[int] | None:
    if text is None:
        return None
    try:
        return [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise UserError(f"{option} '{text}': give comma-separated integers, e.g. 0,1,2") from None


def str_list(text: str | None) -> list[str] | None:
    return None if text is None else [x.strip() for x in text.split(",") if x.strip()]


def bench_table(
    results: Annotated[list[Path], typer.Argument(help="`fedcore bench` OUT dirs (or their bench.json), one or "
                                                  "more")],
    scenes: Annotated[str | None, typer.Option("--scenes", help="scenes to print, in this order, e.g. "
                                               "fedgr_sym,fedgr_mixed (all otherwise)")] = None,
    summary: Annotated[bool, typer.Option("--summary", help="one table, methods x scenes: tuned mean "
                                          "last-10, ✓ where it beats FedAvg's two bars on every seed")] = False,
    figure: Annotated[Path | None, typer.Option("--figure", help="also draw default and tuned last-10 per "
                                                "scene, with FedAvg's bars, to this PNG")] = None,
    per_seed: Annotated[bool, typer.Option("--per-seed", help="per scene, every row's last-10 on each seed "
                                           "beside FedAvg's two bars, ✓ where a tuned row beats both")] = False,
) -> None:
    """Print the tables of docs/results/tuning.md from bench results: per scene, default and tuned
    rows with the verdicts against FedAvg (the table OUT/SCENE/table.md holds too), or --summary, or
    --per-seed."""
    from fedcore.bench.tables import (  # lazy: CLI start-up
        load_scenes,
        scene_table,
        scene_tables,
        seed_table,
        summary_table,
    )

    chosen = scene_tables(load_scenes(results), str_list(scenes) or [])
    if figure is not None:
        from fedcore.bench.tables import figure_data  # lazy: CLI start-up
        from fedcore.reporting.plots import paired_bars_figure, save  # lazy: CLI start-up

        panels, refs, metric = figure_data(chosen)
        save(paired_bars_figure(panels, refs, xlabel=f"last-10 test {metric} (%)"), figure)
        say(f"wrote {figure}")
    if summary and per_seed:
        raise UserError("--summary and --per-seed are two different tables; ask for one")
    if per_seed:
        text = "\n\n".join(f"### {n}, per seed\n\n{seed_table(s, n)}" for n, s in chosen.items())
    else:
        text = summary_table(chosen) if summary else "\n\n".join(scene_table(n, s) for n, s in chosen.items())
    console.print(text, markup=False, highlight=False, soft_wrap=True)


def bench_record(
    results: Annotated[list[Path], typer.Argument(help="`fedcore bench` OUT dirs (or bench.json files, records "
                                                  "included) of one grid's parts")],
    out: Annotated[Path, typer.Option("--out", "-o", help="the record to write, e.g. "
                                      "docs/results/bench/NAME.json (may be one of the inputs)")],
    scenes: Annotated[str | None, typer.Option("--scenes", help="only these scenes, in this order (every "
                                               "finished scene given otherwise)")] = None,
) -> None:
    """Join the finished scenes of a grid run in parts (`fedcore bench GRID --scenes ...`) into one
    bench.json with paths relative to a bench dir; `fedcore bench-table FILE` reads it. Refuses parts of
    different grids, a scene given twice and a scene with work left."""
    from fedcore.bench.record import join_records  # lazy: CLI start-up
    from fedcore.io import atomic_write_bytes  # lazy: CLI start-up

    record, origin = join_records(results, str_list(scenes))
    out = local_folder(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(out, (json.dumps(record, indent=2) + "\n").encode())
    for name, scene in record["scenes"].items():
        console.print(f"{choice_line(name, scene)}  [from {origin[name]}]", markup=False, highlight=False,
                      soft_wrap=True)
    console.print(f"wrote {out} ({len(record['scenes'])} scenes)", markup=False, highlight=False)
