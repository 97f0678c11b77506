"""Re-measure issue 19's tracking outages: kill S3 or the MLflow server while `fedcore run` trains.

    python scripts/outage_check.py s3        # moto (the server's artifact store) dies mid-run
    python scripts/outage_check.py mlflow    # the MLflow server dies mid-run, then comes back

Starts moto and a real `mlflow server` (artifacts proxied to moto) on 127.0.0.1, runs
`fedcore run` against them in a subprocess, kills the chosen server once the run has logged
round 2, and reports: seconds until `fedcore run` ended and its exit code, its last stderr
line, which local outputs exist, and the MLflow run's status. Then it brings the server back
(moto restarts empty, so the bucket is made again) and recovers the way this version allows:
`fedcore tracking sync RUN_DIR` when the command exists, else `fedcore run --resume`. Finally
it counts the runs in the experiment and checks the test/acc steps. Point PYTHONPATH at the
tree to measure; FEDCORE_TRACKING_RETRY_SECONDS is passed through when set.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.fixtures.outage import Servers  # noqa: E402

ROUNDS = 12
TINY = ["train.device=cpu", f"train.rounds={ROUNDS}", "partition.num_clients=4", "data.max_train=400",
        "train.local_epochs=2", "train.checkpoint_every=1", "tracking.backend=mlflow", "tracking.experiment=outage"]
OUTPUTS = ("model.pt", "metrics.json", "history.csv", "config.yaml", "scene.json")


def client(uri: str):
    from mlflow import MlflowClient

    return MlflowClient(tracking_uri=uri)


def wait_for_round(uri: str, rnd: int, proc: subprocess.Popen[str], limit: float = 600) -> None:
    deadline = time.monotonic() + limit
    c = client(uri)
    while time.monotonic() < deadline and proc.poll() is None:
        exp = c.get_experiment_by_name("outage")
        runs = c.search_runs([exp.experiment_id]) if exp else []
        if runs and any(m.step >= rnd for m in c.get_metric_history(runs[0].info.run_id, "test/acc")):
            return
        time.sleep(0.1)
    raise RuntimeError(f"the run never logged round {rnd}")


def fedcore(args: list[str], env: dict[str, str], timeout: float = 1800) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "fedcore", *args], capture_output=True, text=True, env=env,
                          timeout=timeout)


def last_line(text: str) -> str:
    lines = [ln for ln in text.strip().splitlines() if ln.strip()]
    return lines[-1][:300] if lines else ""


def outage(which: str, work: Path) -> None:
    servers = Servers(work)
    servers.start_moto()
    servers.start_mlflow()
    env = {k: v for k, v in os.environ.items() if k != "MLFLOW_TRACKING_URI"} | servers.env
    out = work / "run"
    base = ["run", str(ROOT / "configs" / "quickstart.yaml"), "--out", str(out), "--no-progress",
            *[x for o in [*TINY, f"tracking.uri={servers.uri}"] for x in ("--set", o)]]
    try:
        proc = subprocess.Popen([sys.executable, "-m", "fedcore", *base], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, env=env)
        wait_for_round(servers.uri, 2, proc)
        servers.kill(which)
        t0 = time.monotonic()
        _, err = proc.communicate(timeout=1800)
        took = time.monotonic() - t0
        have = [f for f in OUTPUTS if (out / f).is_file()]
        warnings = [ln for ln in err.splitlines() if "tracking" in ln.lower() or "error" in ln.lower()]
        print(f"{which} killed after round 2: fedcore run ended {took:.0f} s later with exit {proc.returncode}")
        print(f"  stderr (tracking/error lines): {[w[:300] for w in warnings][-3:]}")
        print(f"  local outputs present: {have} (missing: {[f for f in OUTPUTS if f not in have]})")
        if which == "mlflow":
            servers.start_mlflow()
        else:
            servers.start_moto()
        c = client(servers.uri)
        exp = c.get_experiment_by_name("outage")
        runs = c.search_runs([exp.experiment_id])
        print(f"  after the outage: {len(runs)} run(s), status {[r.info.status for r in runs]}")
        sync = fedcore(["tracking", "sync", str(out)], env)
        if "No such command" in sync.stderr:
            res = fedcore([*base, "--resume", str(out)], env)
            print(f"  no `tracking sync`; `fedcore run --resume` exit {res.returncode}: {last_line(res.stderr)!r}")
        else:
            print(f"  `fedcore tracking sync` exit {sync.returncode}: {last_line(sync.stdout + sync.stderr)!r}")
        runs = c.search_runs([exp.experiment_id])
        for r in runs:
            steps = [m.step for m in c.get_metric_history(r.info.run_id, "test/acc")]
            arts = [a.path for a in c.list_artifacts(r.info.run_id)]
            print(f"  run {r.info.run_id[:8]}: status {r.info.status}, test/acc steps {steps}, "
                  f"artifacts {sorted(arts)}")
        print(f"TOTAL {which}: {len(runs)} MLflow run(s) hold this run dir's history")
    finally:
        servers.stop()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("which", choices=["s3", "mlflow"])
    ap.add_argument("--work", type=Path, default=None)
    args = ap.parse_args()
    work = args.work or Path(tempfile.mkdtemp(prefix=f"fedcore-outage-{args.which}-"))
    work.mkdir(parents=True, exist_ok=True)
    outage(args.which, work)


if __name__ == "__main__":
    main()
