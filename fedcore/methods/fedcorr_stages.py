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
    passes of `per_pass` rounds when at least one pass fits (the server judges the clients at the
    end of each pass), but at most `iterations` passes; fine-tuning takes `finetune_rounds` (default:
    half of what is left); usual training the rest. Tiny budgets shrink the stages instead of being
    refused: usual training keeps at least 1 round, then pre-processing 1 when total >= 2, then
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
    pre = max(0, min(pre, total - 1, iterations * per_pass))
    if total >= 2 and preprocess_share > 0:
        pre = max(pre, 1)
    left = total - pre
    ft = (left // 2 if finetune_rounds is None else finetune_rounds) if fine_tuning else 0
    ft = max(0, min(ft, left - 1))
    return pre, ft, max(left - ft, 1)
