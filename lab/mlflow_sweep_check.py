"""What a user sees in the MLflow UI after `make run` (the sweep), checked in a real browser.

(lab/mlflow_ui.sh shoots the experiment pipeline's pages: a child's overview, datasets and
system metrics; this one checks the sweep's: the run list, the parent's comparison, a child's figures.)

Starts a real `mlflow server` on a finished run dir's store (default runs/quickstart, what
`make run` writes), opens the experiment's run list, the sweep's parent run and one child run in
headless Chromium, checks that each page shows what fedcore logged (the parent's comparison
figure and table, FedGR's child with its curves and noise-rate figures), and saves the screenshots to
docs/img/. Prints one JSON line; exits 1 when a check fails, 2 when Chromium or the store is missing.

Usage: .venv/bin/python lab/mlflow_sweep_check.py [RUN_DIR] [--out docs/img] [--port 5077]
Needs Chromium (Debian: `apt-get install chromium`); it is not part of `make test`.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
import urllib.request
from pathlib import Path


def _server(store: Path, port: int) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "mlflow", "server", "--backend-store-uri", f"sqlite:///{store / 'mlflow.db'}",
           "--default-artifact-root", str(store / "artifacts"), "--host", "127.0.0.1", "--port", str(port),
           "--workers", "1"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(120):
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1)
            return proc
        except OSError:
            time.sleep(0.5)
    proc.kill()
    raise SystemExit(f"error: mlflow server on port {port} did not come up in 60 s")


def _browse(chromium: str, url: str, shot: Path | None) -> str:
    """The page's DOM after its scripts ran (and a screenshot of it)."""
    base = [chromium, "--headless=new", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
            "--window-size=1440,960", "--virtual-time-budget=20000"]
    if shot is not None:
        subprocess.run([*base, f"--screenshot={shot}", url], capture_output=True, timeout=120, check=False)
    done = subprocess.run([*base, "--dump-dom", url], capture_output=True, text=True, timeout=120, check=False)
    return done.stdout


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run_dir", nargs="?", default="runs/quickstart", type=Path)
    ap.add_argument("--out", default=Path("docs/img"), type=Path)
    ap.add_argument("--port", default=5077, type=int)
    args = ap.parse_args(argv)
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    store = args.run_dir / "mlruns"
    if chromium is None or not (store / "mlflow.db").is_file():
        print(f"error: needs chromium on PATH and {store / 'mlflow.db'} (run `make run` first)", file=sys.stderr)
        return 2
    from mlflow import MlflowClient

    server = _server(store, args.port)
    try:
        url = f"http://127.0.0.1:{args.port}"
        client = MlflowClient(url)
        exp = client.get_experiment_by_name("fedcore")
        runs = client.search_runs([exp.experiment_id], order_by=["start_time DESC"])
        parent = next(r for r in runs if r.data.tags.get("fedcore.role") == "parent")
        # FedGR estimates every client's noise rate, so its run has the noise-rate figure.
        child = next(r for r in runs
                     if r.data.tags.get("fedcore.role") == "child" and r.info.run_name.startswith("fedgr"))
        ml = "?workflowType=machine_learning"
        at = f"{url}/#/experiments/{exp.experiment_id}"
        pages = {
            "mlflow_sweep_runs.png": (f"{at}{ml}", ["sweep · ", "matching runs"]),
            "mlflow_sweep_summary.png": (f"{at}/runs/{parent.info.run_id}/artifacts/summary/compare.png{ml}",
                                         ["compare.png", "compare_table.json"]),
            "mlflow_sweep_noise_rates.png": (f"{at}/runs/{child.info.run_id}/artifacts/figures/noise_rates.png{ml}",
                                             ["noise_rates.png", "curves.png"]),
        }
        args.out.mkdir(parents=True, exist_ok=True)
        checks = {}
        for name, (page, expected) in pages.items():
            dom = _browse(chromium, page, args.out / name)
            checks[name] = {"url": page.replace(url, ""), "found": {e: e in dom for e in expected},
                            "screenshot_bytes": (args.out / name).stat().st_size if (args.out / name).is_file() else 0}
    finally:
        server.terminate()
        server.wait(20)
    ok = all(all(c["found"].values()) and c["screenshot_bytes"] > 0 for c in checks.values())
    print(json.dumps({"ok": ok, "chromium": subprocess.run([chromium, "--version"], capture_output=True,
                                                           text=True).stdout.strip(), "pages": checks}))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
