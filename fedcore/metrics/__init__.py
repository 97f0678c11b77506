"""Metrics. Methods report estimates; only this package compares them with ground truth."""

from fedcore.metrics.classification import accuracy, confusion, last_k_mean, macro_prf, summarize_history
from fedcore.metrics.noise import (
    binary_prf,
    flag_dependence,
    memorization_rate,
    noise_majority,
    rate_pearson_mae,
    relabel_metrics,
    split_prf,
)

__all__ = [
    "accuracy", "binary_prf", "confusion", "flag_dependence", "last_k_mean", "macro_prf", "memorization_rate",
    "noise_majority", "rate_pearson_mae", "relabel_metrics", "split_prf", "summarize_history",
]
