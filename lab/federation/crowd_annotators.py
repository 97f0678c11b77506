"""Write the worked example of docs/federation.md: a Fashion-MNIST federation of crowd annotators.

Usage:
  crowd_annotators.py --out runs/crowd-data [--seed 0] [--per-client 300] [--test 1000] [--format table|arrays]

Each client is an annotator who labelled their own batch of images. Annotators do not err at random:
each confuses a few pairs of classes that look alike (shirt and T-shirt, pullover and coat, sneaker
and ankle boot, ...) at their own rates, as crowd labels do, and an annotator's errors on a pair
can run one way more than the other. Some annotators are nearly clean, some are poor. The labels as
given are the annotator's; about 5% of the training rows carry a trusted (audited) label as well,
and the test split holds clean labels of images no annotator saw.

The layout is fedcore's `table`: ROOT/crowd.csv with columns path, label, client, trusted, split,
and the images as 28x28 grey PNGs under ROOT/images/ (or, with --format arrays, ROOT/crowd.npz).
ROOT/annotators.json keeps each annotator's confusion matrix and their realised error rate: the
truth, which only this page reads; fedcore never sees it.

Deterministic: every draw comes from one np.random.default_rng(seed).
"""

from __future__ import annotations

import argparse
import csv
import json
from pathlib import Path

import numpy as np
from PIL import Image

from fedcore.config import DataConfig
from fedcore.data.datasets import load_dataset

# Fashion-MNIST's look-alike pairs (class ids): the confusions a human annotator makes.
LOOKALIKES = [(0, 6), (2, 4), (2, 6), (4, 6), (0, 3), (3, 4), (5, 7), (7, 9), (5, 9), (0, 2)]

# One profile per annotator: (pairs confused, their rate range, background rate on every class).
# Two nearly clean, three middling, three poor, so that which clients to trust is a real question.
PROFILES = [
    (1, (0.02, 0.05), 0.00),
    (2, (0.03, 0.08), 0.01),
    (3, (0.15, 0.25), 0.01),
    (3, (0.20, 0.30), 0.02),
    (4, (0.25, 0.35), 0.02),
    (4, (0.40, 0.55), 0.03),
    (5, (0.45, 0.60), 0.05),
    (6, (0.50, 0.70), 0.05),
]


def confusion(rng: np.random.Generator, k: int, n_pairs: int, rates: tuple[float, float],
              background: float) -> np.ndarray:
    """One annotator's (k, k) row-stochastic matrix P[true, given].

    n_pairs look-alike pairs are confused, each direction at its own rate in `rates` (a person who
    calls coats pullovers need not call pullovers coats as often); `background` spreads evenly over
    every other class (slips)."""
    p = np.full((k, k), background / (k - 1))
    np.fill_diagonal(p, 0.0)
    for a, b in (LOOKALIKES[i] for i in rng.choice(len(LOOKALIKES), size=n_pairs, replace=False)):
        p[a, b] += rng.uniform(*rates)
        p[b, a] += rng.uniform(*rates) * rng.uniform(0.3, 1.0)
    np.fill_diagonal(p, 0.0)
    # A class confused with several others keeps at least 30% of its own label.
    off = p.sum(axis=1, keepdims=True)
    p = np.where(off > 0.7, p * 0.7 / np.maximum(off, 1e-12), p)
    np.fill_diagonal(p, 1.0 - p.sum(axis=1))
    return p


def draw_clients(rng: np.random.Generator, y: np.ndarray, n_clients: int, per_client: int) -> list[np.ndarray]:
    """Disjoint batches of training indices, one per annotator, each with its own class mix
    (Dirichlet(2) over classes: annotators see different, not disjoint, parts of the catalogue)."""
    k = int(y.max()) + 1
    pools = [rng.permutation(np.flatnonzero(y == c)).tolist() for c in range(k)]
    out = []
    for _ in range(n_clients):
        mix = rng.dirichlet(np.full(k, 2.0))
        counts = rng.multinomial(per_client, mix)
        out.append(np.array([pools[c].pop() for c in range(k) for _ in range(counts[c])], dtype=np.int64))
    return out


def build(seed: int, per_client: int, n_test: int, trusted_share: float) -> dict:
    """Every row of the federation as arrays: images uint8 (N, 28, 28), true and given class ids,
    client names ("" for test), trusted ids (-1 where none), split; plus the annotators' truth."""
    rng = np.random.default_rng(seed)
    fm = load_dataset(DataConfig(name="fashion_mnist"))
    names = list(fm.class_names)
    k = len(names)
    x_tr, y_tr = fm.x_train[:, 0], np.asarray(fm.y_train)
    batches = draw_clients(rng, y_tr, len(PROFILES), per_client)
    xs, true, given, client, annot = [], [], [], [], []
    for a, (prof, idx) in enumerate(zip(PROFILES, batches, strict=True)):
        p = confusion(rng, k, *prof)
        noisy = np.array([rng.choice(k, p=p[c]) for c in y_tr[idx]], dtype=np.int64)
        name = f"annotator_{a + 1:02d}"
        xs.append(x_tr[idx])
        true.append(y_tr[idx])
        given.append(noisy)
        client += [name] * len(idx)
        annot.append({"client": name, "n": len(idx), "error_rate": round(float((noisy != y_tr[idx]).mean()), 4),
                      "confusion": np.round(p, 4).tolist()})
    true_tr, given_tr = np.concatenate(true), np.concatenate(given)
    audited = rng.random(len(true_tr)) < trusted_share
    te = rng.choice(len(fm.y_test), size=n_test, replace=False)
    return {
        "x": np.concatenate([*xs, fm.x_test[te, 0]]),
        "true": np.concatenate([true_tr, fm.y_test[te]]),
        "given": np.concatenate([given_tr, fm.y_test[te]]),
        "client": np.array(client + [""] * n_test),
        "trusted": np.concatenate([np.where(audited, true_tr, -1), np.full(n_test, -1)]),
        "split": np.array(["train"] * len(true_tr) + ["test"] * n_test),
        "names": names, "annotators": annot,
    }


def write_table(root: Path, d: dict) -> None:
    """ROOT/crowd.csv and ROOT/images/NNNNN.png: labels and trusted labels as class names."""
    (root / "images").mkdir(parents=True, exist_ok=True)
    names = d["names"]
    with open(root / "crowd.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["path", "label", "client", "trusted", "split"])
        for i in range(len(d["x"])):
            rel = f"images/{i:05d}.png"
            Image.fromarray(d["x"][i], mode="L").save(root / rel)
            t = int(d["trusted"][i])
            w.writerow([rel, names[d["given"][i]], d["client"][i], names[t] if t >= 0 else "", d["split"][i]])


def write_arrays(root: Path, d: dict) -> None:
    """ROOT/crowd.npz: the same rows as arrays (fixed-width strings, since fedcore refuses object arrays)."""
    root.mkdir(parents=True, exist_ok=True)
    names = np.asarray(d["names"], dtype=str)
    trusted = np.where(d["trusted"] >= 0, names[np.maximum(d["trusted"], 0)], "")
    np.savez_compressed(root / "crowd.npz", x=d["x"], y=names[d["given"]], client=d["client"].astype(str),
                        trusted=np.asarray(trusted, dtype=str), split=d["split"].astype(str))


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, required=True, help="the federation's root (data.root)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--per-client", type=int, default=300, help="images each annotator labelled")
    ap.add_argument("--test", type=int, default=1000, help="clean test images")
    ap.add_argument("--trusted", type=float, default=0.05, help="share of training rows with an audited label")
    ap.add_argument("--format", choices=("table", "arrays"), default="table")
    args = ap.parse_args(argv)
    d = build(args.seed, args.per_client, args.test, args.trusted)
    (write_table if args.format == "table" else write_arrays)(args.out, d)
    train = d["split"] == "train"
    summary = {"seed": args.seed, "format": args.format, "classes": d["names"], "train": int(train.sum()),
               "test": int((~train).sum()), "trusted": int((d["trusted"] >= 0).sum()),
               "error_rate": round(float((d["given"][train] != d["true"][train]).mean()), 4),
               "annotators": d["annotators"]}
    (args.out / "annotators.json").write_text(json.dumps(summary, indent=1) + "\n")
    print(f"{args.out}: {summary['train']} training rows by {len(d['annotators'])} annotators "
          f"(labels wrong on {summary['error_rate']:.1%}), {summary['trusted']} trusted, {summary['test']} test")
    for a in d["annotators"]:
        print(f"  {a['client']}: {a['n']} images, {a['error_rate']:.1%} wrong")


if __name__ == "__main__":
    main()
