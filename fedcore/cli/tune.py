"""`fedcore tune`: equal-budget hyperparameter search on validation (Optuna; Katib on a cluster)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from fedcore.cli.console import (
    ConfigArg,
    TrackingOpt,
    TrackingUriOpt,
    list_option,
    local_folder,
    make_console,
    set_option,
    tracking_sets,
)

console = make_console()
err_console = make_console(stderr=True)
SetOpt = set_option()
ParamsOpt = list_option(("--param", "-p"), "tune only these declared params, e.g. train.lr (default: every "
                        "declared one)")


def tune(
    config: ConfigArg,
    trials: Annotated[int, typer.Option("--trials", "-n", help="finished trials to reach (a rerun adds the missing "
                                        "ones)")] = 8,
    out: Annotated[Path, typer.Option("--out", "-o", help="tune dir: study, trials, tune.json, best.yaml")] = Path(
        "runs/tune"),
    set_: SetOpt = None,
    param: ParamsOpt = None,
    data: Annotated[str | None, typer.Option("--data", help="FederatedDataset artifact dir or s3:// prefix "
                                             "(default: prepared once under OUT/data)")] = None,
    objective: Annotated[str, typer.Option("--objective", help="last10 (mean of the last 10 val scores) or best "
                                           "(the best round's)")] = "last10",
    prune: Annotated[bool, typer.Option(help="stop trials whose val score trails the median at the same round")] = True,
    start_at_default: Annotated[bool, typer.Option(
        "--start-at-default", help="spend the first trial on the config's own setting, so the tune ends there or "
        "at a setting that beat it on validation")] = False,
    progress: Annotated[bool, typer.Option(help="show the progress bar")] = True,
    tracking: TrackingOpt = None,
    tracking_uri: TrackingUriOpt = None,
) -> None:
    """Tune the train section's and the method's declared ranges on validation, never on test.

    Every trial is one fedcore run on the same dataset artifact and seed (tune on a seed your
    tables do not report). Writes OUT/tune.json and OUT/best.yaml (`fedcore run OUT/best.yaml
    --set seed=0`: best.yaml keeps the tuning seed)."""
    from fedcore.tuning.study import TuneRequest, run_tune  # lazy: CLI start-up

    out = local_folder(out)
    overrides = [*(set_ or []), *tracking_sets(tracking, tracking_uri)]
    req = TuneRequest(config=str(config), overrides=overrides, trials=trials, out=out, data=data,
                      objective=objective, only=param, prune=prune, progress=progress,
                      start_at_default=start_at_default)
    try:
        result = run_tune(req, say=lambda line: err_console.print(line, markup=False, highlight=False,
                                                                  soft_wrap=True))
    except KeyboardInterrupt as err:  # Ctrl-C, or SIGTERM as fedcore.errors.Terminated
        raise interrupted(err, out) from None
    params = ", ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in result["best_params"].items())
    own = ", the config's own setting" if result.get("best_is_default") else ""
    # In %, as every score a person reads; tune.json keeps the fraction.
    console.print(f"best {result['objective']} = {100 * result['best_value']:.2f}% (trial {result['best_trial']}{own}; "
                  f"{result['n_trials']} trials, {result['n_pruned']} pruned): {params}", markup=False, highlight=False)
    tuned = result["seed"]
    console.print(f"run it: fedcore run {out / 'best.yaml'} --set seed={reporting_seed(tuned)} (best.yaml keeps "
                  f"the tuning seed {tuned}, whose scores the tune picked for: report seeds it never saw)",
                  markup=False, highlight=False, soft_wrap=True)


def interrupted(err: KeyboardInterrupt, out: Path):
    """The one line and exit code of a tune stopped by a signal: the trials it kept and how to go on."""
    from fedcore.engine.interrupt import EXIT_CODES, stop_signal, stopped_line  # lazy: CLI start-up
    from fedcore.errors import Interrupted  # lazy: CLI start-up

    sig = stop_signal(err)
    kept = sum(1 for _ in (out / "trials").glob("*/metrics.json"))  # each finished trial's run dir
    return Interrupted(f"{stopped_line(sig)} before the tune finished; {kept} finished trial(s) are kept in "
                       f"'{out}': the same command goes on from them (the trial in flight is drawn again)",
                       EXIT_CODES[sig])


def reporting_seed(tuned: int) -> int:
    """The seed the closing hint runs best.yaml on: 0, or 1 when the tune itself ran on 0."""
    return 1 if tuned == 0 else 0
