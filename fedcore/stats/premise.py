"""A sieve's premise checks: does a loss mixture find a noisy mode, or does it sort classes?

Fedcore's guard for sieving methods (FedGR's "federated sieving"; not part of any paper). Every
input is something the method may know: the loss surrogates, the sieve's flags, the given
labels and the global model's own predictions. No ground truth enters.

- `unimodal`: two GMM components do not lower the BIC below one Gaussian's (`stats.gmm.bic_pair`).
- `max_class_flag_share`: the largest share of any given class the sieve flags; above one half,
  the sieve takes most of a class's supervision away, which noise that is not class-wise cannot
  justify.
- `nmi_from_counts`: normalized mutual information from a contingency table, so clients can
  upload counts and the server pools them. The guard compares the flags' NMI with the given
  label against their NMI with the *estimated* noise, the global model disagreeing with the
  given label: flags that follow the label more than that estimate sort classes, not noise.
"""

from __future__ import annotations

import numpy as np

__all__ = ["nmi_from_counts", "premise_checks", "premise_warning"]


def _entropy(p: np.ndarray) -> float:
    p = p[p > 0]
    return float(-(p * np.log(p)).sum())


def nmi_from_counts(table: np.ndarray) -> float:
    """NMI of the two variables of a contingency table (rows x columns), arithmetic-mean
    normalized as scikit-learn's `normalized_mutual_info_score` is. Empty tables give NaN; a
    table where either variable takes one value gives 0 (nothing is shared; sklearn gives 1 when
    both take one value, which is no evidence of dependence here)."""
    t = np.asarray(table, dtype=np.float64)
    n = t.sum()
    if n <= 0:
        return float("nan")
    if (t.sum(1) > 0).sum() < 2 or (t.sum(0) > 0).sum() < 2:
        return 0.0
    p = t / n
    pr, pc = p.sum(1), p.sum(0)
    hr, hc = _entropy(pr), _entropy(pc)
    nz = p > 0
    mi = float((p[nz] * np.log(p[nz] / np.outer(pr, pc)[nz])).sum())
    return max(mi, 0.0) / ((hr + hc) / 2.0)


def premise_checks(bic: tuple[float, float] | None, class_flagged: np.ndarray | None,
                   class_n: np.ndarray | None, label_table: np.ndarray | None,
                   noise_table: np.ndarray | None) -> dict[str, float]:
    """`premise/*` metrics from a round's pooled statistics; any input may be None (not measured).

    bic: (one component, two components) on the pooled surrogates. class_flagged / class_n:
    flagged and total samples per given class. label_table: flags x given label counts (2, C);
    noise_table: flags x estimated noise counts (2, 2). `premise/fired` is 1 when any check fails.
    """
    out: dict[str, float] = {}
    fired = []
    if bic is not None:
        out["premise/bic_one"], out["premise/bic_two"] = float(bic[0]), float(bic[1])
        out["premise/unimodal"] = float(bic[1] >= bic[0])
        fired.append(out["premise/unimodal"])
    if class_flagged is not None and class_n is not None and np.sum(class_n) > 0:
        n = np.asarray(class_n, dtype=np.float64)
        share = np.asarray(class_flagged, dtype=np.float64)[n > 0] / n[n > 0]
        out["premise/max_class_flag_share"] = float(share.max())
        out["premise/class_flagged_whole"] = float(share.max() > 0.5)
        fired.append(out["premise/class_flagged_whole"])
    if label_table is not None and noise_table is not None:
        out["premise/flags_label_nmi"] = nmi_from_counts(label_table)
        out["premise/flags_noise_est_nmi"] = nmi_from_counts(noise_table)
        out["premise/sorts_classes"] = float(out["premise/flags_label_nmi"] > out["premise/flags_noise_est_nmi"])
        fired.append(out["premise/sorts_classes"])
    if fired:
        out["premise/fired"] = float(max(fired))
    return out


def premise_warning(checks: dict[str, float]) -> str | None:
    """One warning line naming every failed check, or None when all pass (or none was measured)."""
    why = []
    if checks.get("premise/unimodal"):
        why.append("the loss surrogate is unimodal (BIC of 1 component <= 2): the sieve finds no noisy mode")
    if checks.get("premise/class_flagged_whole"):
        why.append(f"the sieve flags {checks['premise/max_class_flag_share']:.0%} of one given class")
    if checks.get("premise/sorts_classes"):
        why.append(f"the flags follow the given label (NMI {checks['premise/flags_label_nmi']:.3f}) more than "
                   f"the estimated noise ({checks['premise/flags_noise_est_nmi']:.3f})")
    return "sieve premise does not hold: " + "; ".join(why) if why else None
