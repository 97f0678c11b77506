"""FedCorr's round budget (Xu et al., CVPR 2022, arXiv:2204.04677): how train.rounds is shared
between its pre-processing, fine-tuning and usual-training stages.

Pure arithmetic, apart from `fedcore.methods.fedcorr` so that file stays about one thing.
"""

from __future__ import annotations


def stage_split(total: int, per_pass: int, iterations: int, budget: str, preprocess_share: float,
                finetune_rounds: int | None, fine_tuning: bool) -> tuple[int, int, int]:
    """(preprocess, finetune, train) rounds.

    budget "within": the three stages share `total` (train.rounds), so FedCorr gets the budget of
    every other method. Pre-processing takes preprocess_share * total rounds, rounded down to whole
    passes of `per_pass` rounds (the server judges the clients at the end of each pass), but at most
    `iterations` passes; when the share is under one pass it takes one whole pass if the budget
    holds it with a round to spare, because a partial pass never judges a client and FedCorr would
    then run as FedAvg without saying so (20 clients in 40 rounds did). Fine-tuning takes
    `finetune_rounds` (default: half of what is left); usual training the rest. Tiny budgets shrink
    the stages instead of being refused: usual training keeps at least 1 round, then
    pre-processing 1 when total >= 2 (a partial pass: `judges` says whether a pass completes), then
    fine-tuning gets what is left (possibly 0).
    budget "extra" (the former behaviour): `iterations` whole passes on top of total, which
    fine-tuning (default half) and usual training share.
    """
    if budget == "extra":
        pre = iterations * per_pass
        ft = (total // 2 if finetune_rounds is None else finetune_rounds) if fine_tuning else 0
        return pre, ft, max(total - ft, 1)
    pre = int(preprocess_share * total)
    if pre >= per_pass:
        pre = min(pre // per_pass, iterations) * per_pass
    elif preprocess_share > 0 and iterations >= 1 and per_pass <= total - 1:
        pre = per_pass
    pre = max(0, min(pre, total - 1, iterations * per_pass))
    if total >= 2 and preprocess_share > 0:
        pre = max(pre, 1)
    left = total - pre
    ft = (left // 2 if finetune_rounds is None else finetune_rounds) if fine_tuning else 0
    ft = max(0, min(ft, left - 1))
    return pre, ft, max(left - ft, 1)


def judges(preprocess_rounds: int, per_pass: int) -> bool:
    """Whether pre-processing completes a pass, the point where the server identifies noisy clients."""
    return per_pass > 0 and preprocess_rounds >= per_pass
