"""`fedcore bench GRID`: tune every method of every scene with the same budget, run the default
and tuned settings on the reporting seeds, and pick a method per scene on validation.
`fedcore bench-table OUT...`: the tables of one or more bench results (a grid in parts read together)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from fedcore.bench.choice import choice_line  # stdlib only, so `fedcore --help` stays fast
from fedcore.cli.console import (
    TrackingOpt,
    TrackingUriOpt,
    list_option,
    local_folder,
    make_console,
    set_option,
    split_list,
    tracking_sets,
)
from fedcore.errors import UserError

console = make_console()
err_console = make_console(stderr=True)
SetOpt = set_option("dotted override for every scene, e.g. train.rounds=3 (repeatable; never method or seed)")
# The plural spellings are those of fedcore before one list style (issue 71); both parse alike.
SeedsOpt = list_option(("--seed", "--seeds"), "reporting seeds, e.g. 0,1 (the grid's otherwise)", ints=True)
MethodsOpt = list_option(("--method", "--methods"), "methods, e.g. fedavg,fedgr-robust (the grid's otherwise)")
ScenesOpt = list_option(("--scene", "--scenes"), "only these scenes (the grid's otherwise): a grid in parts, "
                        "read together by `fedcore bench-table A B`")
TableScenesOpt = list_option(("--scene", "--scenes"), "scenes to print, in this order (all otherwise)")


def bench(
    grid: Annotated[Path, typer.Argument(help="grid YAML, e.g. configs/grids/tiny.yaml")],
    out: Annotated[Path, typer.Option("--out", "-o", help="bench dir: data, tunes, runs, bench.json")] = Path(
        "runs/bench"),
    trials: Annotated[int | None, typer.Option("--trials", "-n", help="tune trials per method (the grid's "
                                               "otherwise)")] = None,
    seeds: SeedsOpt = None,
    methods: MethodsOpt = None,
    scenes: ScenesOpt = None,
    set_: SetOpt = None,
    jobs: Annotated[int, typer.Option("--jobs", "-j", min=1, help="tunes and runs at once, each in its own "
                                      "process on one thread")] = 1,
    progress: Annotated[bool, typer.Option(help="show the progress bar")] = True,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="print what is left to run per scene and method, "
                                          "and the time left (paced on OUT's finished jobs, else on stated "
                                          "per-method costs); run nothing")] = False,
    so_far: Annotated[bool, typer.Option("--so-far", help="write bench.json, tables, sweeps and reports from "
                                         "the runs finished so far, scenes with work left marked partial; "
                                         "runs nothing, so it may run beside a bench on OUT")] = False,
    tracking: TrackingOpt = None,
    tracking_uri: TrackingUriOpt = None,
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
    cli_set = [*(set_ or []), *tracking_sets(tracking, tracking_uri)]
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
    costs, eta = grid_eta(jobs, workers, stated=True)
    units = sum(costs.values())
    if not units:
        console.print("nothing left to run: `fedcore bench` writes bench.json from the finished runs")
        return
    left = time_left(eta.left())
    if left and not eta.measured:  # nothing timed in OUT yet: the stated per-method costs, scaled
        left += (" at the per-method costs lab/results/tuning.md states, scaled by rounds, epochs and "
                 "images (a rough guess until a job of this OUT has been timed)")
    console.print(f"{units:g} units to run (a run is one, a tune its trials left) with --jobs {workers}; "
                  + (left or "no time measured yet in this OUT (each job's time is kept as it ends)"),
                  markup=False, highlight=False, soft_wrap=True)


def say(line: str) -> None:
    err_console.print(line, markup=False, highlight=False, soft_wrap=True)


def int_list(text: str | list[int] | None, option: str) -> list[int] | None:
    from fedcore.errors import UserError  # lazy: CLI start-up

    if text is None or isinstance(text, list):  # a list option's items, split already (console.list_option)
        return text
    try:
        return [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise UserError(f"{option} '{text}': give comma-separated integers, e.g. 0,1,2") from None


def str_list(text: str | list[str] | None) -> list[str] | None:
    return split_list([text] if isinstance(text, str) else text)


def bench_table(
    results: Annotated[list[Path], typer.Argument(help="`fedcore bench` OUT dirs (or their bench.json), one or "
                                                  "more")],
    scenes: TableScenesOpt = None,
    summary: Annotated[bool, typer.Option("--summary", help="one table, methods x scenes: tuned mean "
                                          "last-10, ✓ where it beats FedAvg's two bars on every seed")] = False,
    figure: Annotated[Path | None, typer.Option("--figure", help="also draw default and tuned last-10 per "
                                                "scene, with FedAvg's bars, to this PNG")] = None,
    per_seed: Annotated[bool, typer.Option("--per-seed", help="per scene, every row's last-10 on each seed "
                                           "beside FedAvg's two bars, ✓ where a tuned row beats both")] = False,
) -> None:
    """Print the tables of bench results (one OUT, or a grid's parts together): per scene, default and tuned
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

