"""Grids of FedGR's weak and strong views per dataset, to judge by eye whether they keep the label.

Usage: .venv/bin/python lab/fedgr_views.py [OUT_DIR] [--fmnist-root DIR] [--cifar-root DIR]
Writes OUT_DIR/fedgr_views_<dataset>.png (default OUT_DIR: lab/results): one row per class
(the first training image of each class), columns = the plain image, three weak views and
five strong views (FixMatch RandAugment, 2 ops at magnitude up to 1, cutout up to half the
side), all drawn with `fedcore.train.augment.Augmenter.for_dataset` as FedGR uses it. A
dataset whose files are missing is skipped with a note.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import torch

from fedcore.config import DataConfig
from fedcore.data.datasets import load_dataset
from fedcore.errors import UserError
from fedcore.reporting.plots import plt
from fedcore.train.augment import Augmenter

WEAK, STRONG = 3, 5


def class_examples(raw) -> tuple[torch.Tensor, list[str]]:
    """The first training image of each class as floats in [0, 1]: (K, C, H, W), class names."""
    y = np.asarray(raw.y_train)
    idx = [int(np.flatnonzero(y == k)[0]) for k in range(raw.num_classes)]
    names = list(raw.class_names) or [str(k) for k in range(raw.num_classes)]
    return torch.as_tensor(np.asarray(raw.x_train)[idx]).float() / 255.0, names


def grid(x01: torch.Tensor, names: list[str], flip_ok: bool, title: str, out: Path) -> None:
    aug = Augmenter(channels=x01.shape[1], size=x01.shape[-1], flip_ok=flip_ok)
    gen = torch.Generator().manual_seed(0)
    cols = [x01] + [aug.weak(x01, gen) for _ in range(WEAK)] + [aug.strong(x01, gen) for _ in range(STRONG)]
    heads = ["plain"] + [f"weak {i + 1}" for i in range(WEAK)] + [f"strong {i + 1}" for i in range(STRONG)]
    fig, axes = plt.subplots(len(names), len(cols), figsize=(1.1 * len(cols), 1.1 * len(names)), squeeze=False)
    for r, name in enumerate(names):
        for c, view in enumerate(cols):
            ax = axes[r, c]
            img = view[r].permute(1, 2, 0).clamp(0, 1).numpy()
            ax.imshow(img[..., 0] if img.shape[-1] == 1 else img, cmap="gray", vmin=0, vmax=1,
                      interpolation="nearest")
            ax.set_xticks([]), ax.set_yticks([])
            if r == 0:
                ax.set_title(heads[c], fontsize=7)
            if c == 0:
                ax.set_ylabel(name[:12], fontsize=7)
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)


def main(argv: list[str]) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", nargs="?", default="lab/results")
    ap.add_argument("--fmnist-root", default="/work/data/fmnist")
    ap.add_argument("--cifar-root", default=None)
    args = ap.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for name, root in (("digits", None), ("fashion_mnist", args.fmnist_root), ("cifar10", args.cifar_root)):
        try:
            raw = load_dataset(DataConfig(name=name, root=root))
        except UserError as err:
            print(f"{name}: skipped ({err})")
            continue
        x01, names = class_examples(raw)
        side = x01.shape[-1]
        path = out / f"fedgr_views_{name}.png"
        grid(x01, names, bool(raw.flip_ok), f"{name} ({side}x{side}): plain, weak, strong views", path)
        print(f"{name}: wrote {path}")


if __name__ == "__main__":
    main(sys.argv[1:])
