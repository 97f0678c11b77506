"""Strong views per second: fedcore's `strong` against the whole-batch form it replaced, same work.

`strong` (fedcore/train/augment.py) draws `num_ops` RandAugment ops per sample and applies
each op to the samples that drew it. The reference below is the earlier form: every op runs
over the whole batch and `torch.where` keeps the rows that drew it. Both take the same random
draws from the same generator, so they must return the same tensor bit for bit; the script
checks that first (and stops otherwise), then times each on the same batches.

    python benchmarks/augment_throughput.py                 # Fashion-MNIST-shaped and CIFAR-shaped batches
    python benchmarks/augment_throughput.py --batch 64 --reps 200

Not a test: timings depend on the machine. Report the printed table with its header line.
FedGR trains on one strong view per step, which was about half of a FedGR run's CPU time
(docs/performance.md, "Strong views").
"""

from __future__ import annotations

import argparse
import platform
import time

import torch
import torch.nn.functional as F

from fedcore.train import augment as A


def strong_whole_batch(x: torch.Tensor, gen: torch.Generator, flip: bool = True, num_ops: int = 2,
                       magnitude: float = 1.0, cutout_frac: float = 0.5, pad: int | None = None) -> torch.Tensor:
    """The reference: `strong` with every op computed over the whole batch, then selected per row."""
    x = A.weak(x, gen, flip=flip, pad=pad, brightness=0.0)
    b, dev = x.shape[0], x.device
    ops = A.GEOMETRIC + tuple(o for o in A.PHOTOMETRIC if x.shape[1] == 3 or o != "color")
    pick = (A.rand(gen, (b, num_ops), dev) * len(ops)).long().clamp(max=len(ops) - 1)
    mag = A.rand(gen, (b, num_ops), dev, 0.0, magnitude)
    onehot = F.one_hot(pick, len(ops)).to(x.dtype)
    act = (onehot * mag[..., None]).amax(1)
    chosen = onehot.amax(1) > 0
    signs = torch.stack([A.sign(gen, b, dev) for _ in ops])
    k_geo = len(A.GEOMETRIC)
    theta = A._affine_theta({o: act[:, i] for i, o in enumerate(A.GEOMETRIC)}, signs[:k_geo])
    x = torch.where(A.per_sample(chosen[:, :k_geo].any(1)), A.warp(x, theta), x)
    for i, op in enumerate(ops[k_geo:], start=k_geo):
        x = torch.where(A.per_sample(chosen[:, i]), A._photometric(x, op, act[:, i], signs[i]), x)
    return A.cutout(x, gen, cutout_frac) if cutout_frac > 0 else x


def views_per_second(fn, batches: list[torch.Tensor], seed: int) -> float:
    gen = torch.Generator().manual_seed(seed)
    start = time.perf_counter()
    for x in batches:
        fn(x, gen)
    return len(batches) / (time.perf_counter() - start)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--reps", type=int, default=300, help="batches timed per variant and shape")
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    print(f"# {platform.processor() or platform.machine()}, torch {torch.__version__}, {args.threads} thread(s), "
          f"batch {args.batch}, {args.reps} batches")
    print("| shape | whole batch (views/s) | fedcore (views/s) | ratio | equal |\n|---|---|---|---|---|")
    for shape in ((1, 28, 28), (3, 32, 32)):
        data = torch.Generator().manual_seed(0)
        batches = [torch.rand((args.batch, *shape), generator=data) for _ in range(args.reps)]
        equal = all(torch.equal(A.strong(x, torch.Generator().manual_seed(i)),
                                strong_whole_batch(x, torch.Generator().manual_seed(i)))
                    for i, x in enumerate(batches[:20]))
        if not equal:
            raise SystemExit(f"{shape}: fedcore's strong view differs from the whole-batch reference; not timing")
        ref = views_per_second(strong_whole_batch, batches, 1)
        new = views_per_second(A.strong, batches, 1)
        print(f"| {'x'.join(map(str, shape))} | {ref * args.batch:,.0f} | {new * args.batch:,.0f} "
              f"| {new / ref:.2f}x | yes |")


if __name__ == "__main__":
    main()
