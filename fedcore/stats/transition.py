"""Label-noise transition matrices estimated from a model's predictions (pure numpy).

T[k, j] approximates P(given label j | true class k): the matrix a forward correction
`softmax(logits) @ T` multiplies the clean prediction with. Used by FedRG's `t_init: estimate`
(spec: shared/spec/fedrg.md, v2 notes), where T is set from the samples its detector flagged.
"""

from __future__ import annotations

import numpy as np


def estimate_transition(probs: np.ndarray, labels: np.ndarray, num_classes: int,
                        prior: float = 1.0) -> np.ndarray:
    """Soft confusion between predicted class and given label, rows normalized: (C, C).

    probs: (n, C) predicted class distributions of the samples (e.g. the flagged ones);
    labels: (n,) their given labels. With counts N[k, j] = sum_{i: y_i = j} probs[i, k],

        T[k, j] = (N[k, j] + prior * [j == k]) / (sum_j' N[k, j'] + prior),

    so a class no sample is predicted as keeps the identity row (also with prior 0), and `prior` pseudo-samples per
    class pull every row towards keeping its label. With one-hot predictions of the true class,
    N is the exact confusion of true class against given label.
    """
    probs = np.asarray(probs, float)
    if probs.ndim != 2 or probs.shape[1] != num_classes:
        raise ValueError(f"probs must be (n, {num_classes}), got {probs.shape}")
    onehot = np.zeros((len(probs), num_classes))
    onehot[np.arange(len(probs)), np.asarray(labels, int)] = 1.0
    eye = np.eye(num_classes)
    counts = probs.T @ onehot + prior * eye
    empty = counts.sum(1) <= 0  # only with prior 0: no evidence either way, keep the label
    counts[empty] = eye[empty]
    return counts / counts.sum(1, keepdims=True)
