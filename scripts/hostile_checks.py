"""Re-measure issue 19's findings through the `fedcore` CLI alone (so it runs on any version).

    python scripts/hostile_checks.py kills      # kills after checkpoint writes: stuck or resumed?
    python scripts/hostile_checks.py kills --which random --count 20   # kills at random file operations
    python scripts/hostile_checks.py pickle     # a crafted checkpoint on --resume: does code run?
    python scripts/hostile_checks.py lock       # two runs into one --out at once
    python scripts/hostile_checks.py config     # the config cases of the issue through `config show`
    python scripts/hostile_checks.py config-run # the cases that only fail inside `run`, and --out /dev/null/x
    python scripts/hostile_checks.py laughs     # a billion-laughs YAML: seconds and peak memory
    python scripts/hostile_checks.py manifest   # edits of a dataset artifact's manifest.json

Each prints one line per case and a total. Runs go through `python -m fedcore` (or
scripts/crashhook.py for the kills) in subprocesses with this process's PYTHONPATH, so point
PYTHONPATH at the tree to measure. Work files go to a temp dir (or --work).

--fork runs each CLI call in a forked child of this process instead (`fedcore.cli.main` with the
same argv, its stdout and stderr captured, a traceback printed as Python would): same exit codes,
one torch import in all, so a whole check costs seconds of CPU instead of minutes. It needs a
version whose `fedcore.cli.main` takes argv (the layout refactor on), and kills use the same hook.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# The shared helpers live in hostile_lib (this file would pass 300 lines); FORK is set there.
import hostile_lib as lib  # noqa: E402  (scripts/ is on sys.path when this file runs)
from hostile_lib import CONFIG, ROOT, TINY, digest, fedcore, forked, last_line, prepare, sets  # noqa: E402,F401

# -- kills --------------------------------------------------------------------------------------


def _hook():
    import importlib.util

    spec = importlib.util.spec_from_file_location("crashhook", ROOT / "scripts" / "crashhook.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def killed_run(art: Path, out: Path, n: int) -> int:
    args = ["run", CONFIG, "--out", str(out), "--data", str(art), "--no-progress", *sets(TINY)]
    if lib.FORK:
        hook = _hook()
        return forked(args, 600, before=lambda: hook.arm(n, out)).returncode
    cmd = [sys.executable, str(ROOT / "scripts" / "crashhook.py"), str(n), str(out), "--", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=600).returncode


def op_log(art: Path, work: Path) -> tuple[list[str], str]:
    import shutil

    out = work / "count"
    shutil.rmtree(out, ignore_errors=True)  # a finished run there from an earlier check would be refused
    log = work / "ops.txt"
    args = ["run", CONFIG, "--out", str(out), "--data", str(art), "--no-progress", *sets(TINY)]
    if lib.FORK:
        hook = _hook()  # arm(None) only counts; the child writes the log as it exits
        res = forked(args, 600, before=lambda: hook.arm(None, out), after=lambda: log.write_text("\n".join(hook._ops)))
    else:
        cmd = [sys.executable, str(ROOT / "scripts" / "crashhook.py"), "0", str(out), "--", *args]
        env = {**os.environ, "CRASHHOOK_LOG": str(log)}
        res = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env)
    assert res.returncode == 0, res.stderr
    return log.read_text().splitlines(), digest(out)


def after_kill(art: Path, out: Path, want: str) -> str:
    """What a user can do next: 'resumed' (bit-identical), 'resumed-differs', 'fresh-ok', or 'stuck: ...'."""
    base = ["run", CONFIG, "--out", str(out), "--data", str(art), "--no-progress", *sets(TINY)]
    fresh = fedcore(base)
    if fresh.returncode == 0:
        return "fresh-ok" if digest(out) == want else "fresh-differs"
    res = fedcore([*base, "--resume", str(out)])
    if res.returncode != 0:
        return f"stuck: fresh said '{last_line(fresh.stderr)}'; resume said '{last_line(res.stderr)}'"
    return "resumed" if digest(out) == want else "resumed-differs"


def kills(work: Path, which: str, count: int = 20, seed: int = 0) -> None:
    import random

    art = prepare(work)
    ops, want = op_log(art, work)
    ckpt = [i for i, op in enumerate(ops, 1) if op.split(" ", 1)[1].startswith("checkpoints")]  # folder fsyncs too
    # On-disk state changes only at these operations (a write is torn at its kill), so a kill at
    # any instant leaves the disk as a kill at the next operation does.
    drawn = sorted(random.Random(seed).sample(range(1, len(ops) + 1), min(count, len(ops))))
    cases = {
        # the op right after checkpoints/latest.pt was replaced
        "after-latest": [i + 1 for i, op in enumerate(ops, 1) if op == "replace checkpoints/latest.pt"],
        # the op right after any checkpoint file was replaced
        "after-each-write": [i + 1 for i, op in enumerate(ops, 1)
                             if op.startswith("replace checkpoints/")],
        # every file operation of every checkpoint write
        "every-op": ckpt,
        # `count` operations drawn at random (seeded) among all of a run's
        "random": drawn,
    }[which]
    print(f"{len(ops)} watched file ops in a run, {len(ckpt)} of them on checkpoints; {len(cases)} kill points, "
          f"{len(set(cases) & set(ckpt))} of them on checkpoints")
    stuck = 0
    for n in cases:
        out = work / f"kill-{which}-{n}"
        rc = killed_run(art, out, n)
        verdict = after_kill(art, out, want) if rc != 0 else "not killed (op past the end)"
        stuck += verdict.startswith(("stuck", "resumed-differs", "fresh-differs"))
        print(f"kill at op {n:3d} ({ops[n - 1] if n <= len(ops) else 'end'}): rc={rc} -> {verdict}")
    print(f"TOTAL {which}: {stuck} of {len(cases)} stuck or not bit-identical")


# -- crafted checkpoint -------------------------------------------------------------------------


class _Payload:
    marker = ""

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def crafted(work: Path) -> None:
    art = prepare(work)
    run = work / "victim"
    (run / "checkpoints").mkdir(parents=True, exist_ok=True)
    marker = work / "PWNED"
    marker.unlink(missing_ok=True)
    _Payload.marker = str(marker)
    import torch

    torch.save({"format": 1, "evil": _Payload()}, run / "checkpoints" / "latest.pt")
    # A legacy sidecar that matches, as an attacker would write it.
    data = (run / "checkpoints" / "latest.pt").read_bytes()
    (run / "checkpoints" / "latest.sha256").write_text(hashlib.sha256(data).hexdigest())
    res = fedcore(["run", CONFIG, "--out", str(work / "victim-out"), "--data", str(art), "--no-progress",
                   "--resume", str(run), *sets(TINY)])
    print(f"crafted checkpoint: exit {res.returncode}; code ran: {marker.exists()}; "
          f"stderr: {last_line(res.stderr)!r}")


# -- two writers --------------------------------------------------------------------------------


def two_writers(work: Path) -> None:
    art = prepare(work)
    out = work / "shared"
    args = [sys.executable, "-m", "fedcore", "run", CONFIG, "--out", str(out), "--data", str(art), "--no-progress",
            *sets([*TINY, "train.rounds=8"])]
    procs = [subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    for i, p in enumerate(procs):
        _, err = p.communicate(timeout=600)
        print(f"writer {i}: exit {p.returncode}; stderr: {last_line(err)!r}")
    print(f"TOTAL lock: {sum(p.returncode == 0 for p in procs)} of 2 writers exited 0")


# -- config cases -------------------------------------------------------------------------------

CONFIG_CASES: list[tuple[str, bytes | None, list[str]]] = [
    # (name, file content or None for quickstart.yaml, overrides)
    ("latin-1 file", "seed: 1\nrun_name: caf\xe9\n".encode("latin-1"), []),
    ("utf-16 file", "seed: 1\n".encode("utf-16"), []),
    ("yaml date seed", b"seed: 2024-01-01\n", []),
    ("yaml timestamp run_name", b"tracking:\n  run_name: 2024-01-01 10:00:00\n", []),
    ("!!binary", b"tracking:\n  run_name: !!binary aGVsbG8=\n", []),
    ("!!set", b"method:\n  params: !!set {a, b}\n", []),
    ("circular alias", b"data: &a\n  params: *a\n", []),
    ("300-level nesting", b"data:\n  params:\n    x: " + b"[" * 300 + b"]" * 300 + b"\n", []),
    ("seed=1e23", None, ["seed=1e23"]),
    ("lr=1e308", None, ["train.lr=1e308"]),
    ("width=1e12", None, ["model.width=1e12"]),
    ("lr=.inf", None, ["train.lr=.inf"]),
    ("lr=.nan", None, ["train.lr=.nan"]),
    ("stage_rounds.bogus=3", None, ["train.stage_rounds.bogus=3"]),
    ("stage_rounds.train=-4", None, ["train.stage_rounds.train=-4"]),
    ("data.params.bogus=1", None, ["data.params.bogus=1"]),
    ("local_epochs=0", None, ["train.local_epochs=0"]),
    ("file holding []", b"[]\n", []),
    ("file holding 0", b"0\n", []),
    ("file holding ''", b"''\n", []),
    ("duplicate keys", b"seed: 1\nseed: 2\n", []),
    ("phi with noisy_client_fraction", b"noise:\n  phi: 0.5\n  noisy_client_fraction: 0.7\n", []),
    ("num_clients: true", b"partition:\n  num_clients: true\n", []),
    ("control chars in key", None, ["data.\x1b[31mbad=1"]),
]


# Cases that pass `config show` on some versions but fail later, inside `run`.
RUN_CASES: list[tuple[str, bytes | None, list[str]]] = [
    ("seed: 1.0e+23 (a float)", b"seed: 1.0e+23\n", []),
    ("lr=1e308", None, ["train.lr=1e308"]),
    ("model.width: 1.0e+12", b"model:\n  width: 1.0e+12\n", []),
    ("lr=.inf", None, ["train.lr=.inf"]),
]


def config_cases(work: Path, command: str = "show") -> None:
    tracebacks = accepted = 0
    for name, content, overrides in CONFIG_CASES if command == "show" else RUN_CASES:
        path = CONFIG
        if content is not None:
            path = str(work / f"case-{re.sub(r'[^a-z0-9]+', '-', name.lower())}.yaml")
            Path(path).write_bytes(content)
        if command == "show":
            res = fedcore(["config", "show", path, *sets(overrides)], timeout=120)
        else:
            out = work / f"run-{re.sub(r'[^a-z0-9]+', '-', name.lower())}"
            res = fedcore(["run", path, "--out", str(out), "--no-progress", *sets([*TINY, *overrides])], timeout=300)
        err = res.stderr.strip()
        if "Traceback" in res.stderr:
            verdict = f"TRACEBACK {last_line(err)!r}"
            tracebacks += 1
        elif res.returncode == 0:
            verdict = "ACCEPTED (exit 0)"
            accepted += 1
        else:
            one = len(err.splitlines()) == 1
            verdict = f"exit {res.returncode}, {'one line' if one else f'{len(err.splitlines())} lines'}: {err[:140]!r}"
        print(f"{name:32s} {verdict}")
    print(f"TOTAL config {command}: {tracebacks} tracebacks, {accepted} accepted")
    if command == "show":
        return
    res = fedcore(["run", CONFIG, "--out", "/dev/null/x", "--no-progress", *sets(TINY)], timeout=300)
    print(f"--out /dev/null/x: exit {res.returncode}, traceback: {'Traceback' in res.stderr}, "
          f"{last_line(res.stderr)!r}")


def laughs(work: Path) -> None:
    lines = ['a0: &a0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    lines += [f"a{i}: &a{i} [{','.join([f'*a{i - 1}'] * 9)}]" for i in range(1, 9)]
    lines += ["data:", "  params:", "    x: *a8"]
    path = work / "laughs.yaml"
    path.write_text("\n".join(lines) + "\n")
    t0 = time.monotonic()
    cmd = ["/usr/bin/time", "-f", "MAXRSS_KB %M", sys.executable, "-m", "fedcore", "config", "show", str(path)]
    try:
        res = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
        rss = re.search(r"MAXRSS_KB (\d+)", res.stderr)
        err = [ln for ln in res.stderr.splitlines() if not ln.startswith(("MAXRSS_KB", "Command exited"))]
        print(f"billion laughs: exit {res.returncode} after {time.monotonic() - t0:.1f} s, peak RSS "
              f"{int(rss.group(1)) / 1e6 if rss else float('nan'):.2f} GB; stderr: {(err[-1] if err else '')[:140]!r}")
    except subprocess.TimeoutExpired:
        print(f"billion laughs: still running after {time.monotonic() - t0:.0f} s (killed)")


# -- manifest edits ----------------------------------------------------------------------------


def manifest_cases(work: Path) -> None:
    import shutil

    art = prepare(work)
    edits = {
        "meta.num_classes=3": lambda m: m["meta"].__setitem__("num_classes", 3),
        "meta.mean=[1000]": lambda m: m["meta"].__setitem__("mean", [1000.0]),
    }
    for name, edit in edits.items():
        copy = work / f"art-{len(name)}"
        shutil.rmtree(copy, ignore_errors=True)
        shutil.copytree(art, copy)
        manifest = json.loads((copy / "manifest.json").read_text())
        edit(manifest)
        (copy / "manifest.json").write_text(json.dumps(manifest, indent=2, sort_keys=True))
        report(name, copy, work)
    copy = work / "art-flip"
    shutil.rmtree(copy, ignore_errors=True)
    shutil.copytree(art, copy)
    raw = bytearray((copy / "manifest.json").read_bytes())
    raw[len(raw) // 2] ^= 0xFF
    (copy / "manifest.json").write_bytes(bytes(raw))
    report("byte flip in manifest.json", copy, work)


def report(name: str, art: Path, work: Path) -> None:
    out = work / f"run-{abs(hash(name))}"
    res = fedcore(["run", CONFIG, "--out", str(out), "--data", str(art), "--no-progress", *sets(TINY)], timeout=600)
    acc = ""
    if res.returncode == 0:
        acc = f", final/acc {json.loads((out / 'metrics.json').read_text())['summary'].get('final/acc'):.3f}"
    kind = "TRACEBACK" if "Traceback" in res.stderr else f"exit {res.returncode}"
    print(f"{name:28s} {kind}{acc}: {last_line(res.stderr)!r}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("what", choices=["kills", "pickle", "lock", "config", "config-run", "laughs", "manifest"])
    ap.add_argument("--which", default="after-latest",
                    choices=["after-latest", "after-each-write", "every-op", "random"])
    ap.add_argument("--count", type=int, default=20, help="kill points for --which random")
    ap.add_argument("--seed", type=int, default=0, help="draws the kill points for --which random")
    ap.add_argument("--fork", action="store_true", help="run CLI calls in forked children (module docstring)")
    ap.add_argument("--work", type=Path, default=None)
    args = ap.parse_args()
    lib.FORK = args.fork
    work = args.work or Path(tempfile.mkdtemp(prefix="fedcore-hostile-"))
    work.mkdir(parents=True, exist_ok=True)
    {"kills": lambda: kills(work, args.which, args.count, args.seed), "pickle": lambda: crafted(work),
     "lock": lambda: two_writers(work),
     "config": lambda: config_cases(work),
     "config-run": lambda: config_cases(work, "run"), "laughs": lambda: laughs(work),
     "manifest": lambda: manifest_cases(work)}[args.what]()


if __name__ == "__main__":
    main()
