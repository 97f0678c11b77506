"""The quickstart comparison: baselines on one shared noisy digits artifact, plus clean FedAvg."""

from __future__ import annotations

from pathlib import Path

from rich.console import Console

from fedcore.config import ExperimentConfig, load_config
from fedcore.errors import ConfigError

QUICKSTART_METHODS = ("fedavg", "fedprox", "symmetric_ce", "coteaching")


def find_config(name: str = "quickstart.yaml") -> Path:
    """configs/<name> from the working directory or the source checkout."""
    for base in (Path.cwd(), Path(__file__).resolve().parents[1]):
        p = base / "configs" / name
        if p.is_file():
            return p
    raise ConfigError(f"configs/{name} not found; run from the fedcore checkout")


def run_quickstart(out: Path, console: Console, rounds: int | None = None,
                   methods: tuple[str, ...] = QUICKSTART_METHODS) -> list[dict]:
    from fedcore.cli_run import run_callbacks
    from fedcore.compare import comparison_table, load_run
    from fedcore.data.build import build
    from fedcore.data.report import print_scene
    from fedcore.run import run_experiment

    overrides = [f"train.rounds={rounds}"] if rounds else []
    base = load_config(find_config(), overrides)
    fed = build(base)
    data_dir = fed.save(out / "data")
    print_scene(fed, console)
    records = []
    for name in methods:
        cfg = base.model_copy(update={"method": base.method.model_copy(update={"name": name})})
        cfg = ExperimentConfig.model_validate(cfg.to_dict())
        run_dir = out / name
        run_experiment(cfg, run_dir, data=data_dir, callbacks=run_callbacks(cfg, cfg.train.rounds, True, name))
        records.append(load_run(run_dir))
    clean = load_config(find_config(), [*overrides, "noise.type=none"])
    cbs = run_callbacks(clean, clean.train.rounds, True, "fedavg clean")
    run_experiment(clean, out / "fedavg-clean", callbacks=cbs)
    rec = load_run(out / "fedavg-clean")
    rec["method"] = "fedavg (clean labels)"
    records.append(rec)
    console.print(comparison_table(records, title="quickstart: noisy digits, same artifact for every method"))
    return records
