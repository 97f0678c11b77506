"""Do FedGR's strong views destroy 8x8 digits? Train the presets' MLP centrally on clean labels.

Usage: .venv/bin/python lab/notes/fedgr_strongview.py
Trains on plain, weak and strong views (FixMatch RandAugment at a few magnitude/cutout
settings) of the clean digits training split and prints the clean test accuracy, plus the
accuracy on strong views of the test set. If strong views kept no label information, training
on them would not transfer to plain test images.
"""

from __future__ import annotations

import dataclasses

import torch
import torch.nn.functional as F

from fedcore.config import DataConfig
from fedcore.data.datasets import load_digits_dataset
from fedcore.models.small import MLP
from fedcore.train.augment import Augmenter


def train_eval(view, x, y, x_te, y_te, epochs: int = 40, seed: int = 0) -> tuple[float, float]:
    """(clean test accuracy, accuracy on `view` of the test set) of an MLP trained on `view`."""
    gen = torch.Generator().manual_seed(seed)
    model = MLP((1, 8, 8), 128, 10)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, weight_decay=5e-4)

    def norm(v):  # the digits dataset's normalization
        return (v - 0.3) / 0.4

    for _ in range(epochs):
        perm = torch.randperm(len(y), generator=gen)
        for s in range(0, len(perm), 32):
            idx = perm[s:s + 32]
            loss = F.cross_entropy(model(norm(view(x[idx], gen))), y[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
    model.eval()
    with torch.no_grad():
        clean = (model(norm(x_te)).argmax(1) == y_te).float().mean().item()
        viewed = (model(norm(view(x_te, torch.Generator().manual_seed(1)))).argmax(1) == y_te).float().mean().item()
    return clean, viewed


def main() -> None:
    ds = load_digits_dataset(DataConfig())
    x, y = torch.tensor(ds.x_train).float() / 255, torch.tensor(ds.y_train)
    x_te, y_te = torch.tensor(ds.x_test).float() / 255, torch.tensor(ds.y_test)
    base = Augmenter(channels=1, size=8, flip_ok=False)
    views = {"plain": lambda v, g: v, "weak": base.weak}
    for mag, cut in ((1.0, 0.5), (0.5, 0.25)):
        views[f"strong m={mag} cutout={cut}"] = dataclasses.replace(base, strong_magnitude=mag, cutout=cut).strong
    for name, view in views.items():
        clean, viewed = train_eval(view, x, y, x_te, y_te)
        print(f"{name:28s} clean test acc {clean:.3f}   acc on the same view of the test set {viewed:.3f}")


if __name__ == "__main__":
    main()
