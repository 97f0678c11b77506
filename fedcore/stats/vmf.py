"""von Mises-Fisher mixtures on the unit sphere, for FedRG's geometry-first noise detection.

FedRG: "Unleashing the Representation Geometry for Federated Learning with Noisy Clients",
CVPR 2026 (code: github Tianjoker/FedRG); spec: shared/spec/fedrg.md.

Pure numpy/scipy (float64). Shapes: embeddings z (n, d) with unit rows; G components;
responsibilities (n, G + 1) with column 0 the uniform background. Choices:
- the log-normalizer log C_d(kappa) uses `scipy.special.ive`; where ive underflows
  (large d, small kappa) it falls back to Debye's uniform asymptotic expansion of I_v;
- tempering scales kappa inside the full density, vMF(z | mu, r_i kappa), so a tempered
  component stays a density; without the normalizer (the public code's form) both the
  component and the background terms drop their normalizers;
- the Dirichlet prior on the mixing weights adds prior/G pseudo-counts per component and
  prior/10 to the background, whose weight is then clamped.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.special import gammaln, ive, logsumexp

from fedcore.stats.gmm import clean_posterior


def _log_bessel_iv(v: float, kappa: np.ndarray) -> np.ndarray:
    """log I_v(kappa) for kappa > 0: exact via ive where it is representable, else Debye."""
    shape = np.shape(kappa)
    kappa = np.atleast_1d(np.asarray(kappa, dtype=float)).ravel()
    scaled = ive(v, kappa)
    with np.errstate(divide="ignore"):
        exact = np.log(scaled) + kappa
    bad = scaled < 1e-290
    if not bad.any():
        return exact.reshape(shape)
    # Debye: I_v(v t) ~ exp(v eta) / (sqrt(2 pi v) (1 + t^2)^(1/4)) * (1 + u1(p) / v), p = 1/sqrt(1+t^2);
    # ive only underflows for v in the hundreds, where the O(1/v^2) error is negligible.
    t = kappa[bad] / v
    s = np.sqrt(1.0 + t * t)
    eta = s + np.log(t / (1.0 + s))
    p = 1.0 / s
    u1 = (3.0 * p - 5.0 * p**3) / 24.0
    exact[bad] = v * eta - 0.5 * np.log(2 * np.pi * v) - 0.25 * np.log1p(t * t) + np.log1p(u1 / v)
    return exact.reshape(shape)


def log_vmf_normalizer(kappa: np.ndarray, d: int) -> np.ndarray:
    """log C_d(kappa) = (d/2 - 1) log kappa - (d/2) log 2 pi - log I_{d/2-1}(kappa); kappa > 0, any shape."""
    v = d / 2.0 - 1.0
    kappa = np.asarray(kappa, dtype=float)
    return v * np.log(kappa) - (d / 2.0) * np.log(2 * np.pi) - _log_bessel_iv(v, kappa)


def log_uniform_sphere(d: int) -> float:
    """log density of the uniform distribution on S^{d-1}: -log(2 pi^(d/2) / Gamma(d/2))."""
    return float(-(np.log(2.0) + (d / 2.0) * np.log(np.pi) - gammaln(d / 2.0)))


@dataclass
class VMFMixture:
    """pi0 U(z) + sum_g pi[g] vMF(z | mu[g], kappa[g]); pi0 + pi.sum() == 1."""

    mu: np.ndarray  # (G, d) unit rows
    kappa: np.ndarray  # (G,)
    pi: np.ndarray  # (G,)
    pi0: float

    def as_dict(self) -> dict[str, np.ndarray | float]:
        return {"mu": self.mu, "kappa": self.kappa, "pi": self.pi, "pi0": self.pi0}


def init_mixture(z: np.ndarray, g: int, rng: np.random.Generator, kappa0: float = 5.0,
                 pi0: float = 0.05) -> VMFMixture:
    """k-means++ seeds on z (n, d) as mean directions, kappa0 everywhere, equal weights.

    With fewer samples than components the remaining directions are random (they get
    little weight after the first M-step).
    """
    from sklearn.cluster import kmeans_plusplus  # lazy: scikit-learn adds ~2 s to start-up

    n, d = z.shape
    k = min(g, n)
    mu = np.empty((g, d))
    if k:
        mu[:k], _ = kmeans_plusplus(z, k, random_state=int(rng.integers(2**31)))
    mu[k:] = rng.standard_normal((g - k, d))
    mu /= np.maximum(np.linalg.norm(mu, axis=1, keepdims=True), 1e-12)
    return VMFMixture(mu, np.full(g, float(kappa0)), np.full(g, (1.0 - pi0) / g), float(pi0))


def log_joint(z: np.ndarray, mix: VMFMixture, r: np.ndarray | None = None,
              normalizer: bool = True) -> np.ndarray:
    """log pi_k p_k(z_i) for the background (column 0) and each component: (n, G + 1).

    r: (n,) tempering factors, scaling each sample's concentrations (None = 1).
    """
    d = z.shape[1]
    kap = mix.kappa[None, :] * (1.0 if r is None else np.asarray(r, float)[:, None])  # (n or 1, G)
    comp = np.log(mix.pi)[None, :] + kap * (z @ mix.mu.T)
    bg = np.full((len(z), 1), np.log(mix.pi0))
    if normalizer:
        comp = comp + log_vmf_normalizer(kap, d)
        bg = bg + log_uniform_sphere(d)
    return np.concatenate([bg, comp], axis=1)


def responsibilities(z: np.ndarray, mix: VMFMixture, r: np.ndarray | None = None,
                     normalizer: bool = True, temperature: float = 1.0) -> np.ndarray:
    """Posterior over [background, components] by log-sum-exp: (n, G + 1), rows sum to 1.

    temperature: the log joint is divided by it first (1 = the posterior; the FedRG authors'
    code uses 2, which flattens it).
    """
    lj = log_joint(z, mix, r, normalizer) / temperature
    return np.exp(lj - logsumexp(lj, axis=1, keepdims=True))


def aug_concentration(z1: np.ndarray, z2: np.ndarray) -> np.ndarray:
    """Per-sample concentration of two unit views (n, d): R = |(z1+z2)/2|, R (d - R^2) / (1 - R^2)."""
    d = z1.shape[1]
    r = np.clip(np.linalg.norm((z1 + z2) / 2.0, axis=1), 1e-6, 1 - 1e-6)
    return r * (d - r**2) / (1 - r**2)


def ema_median(prev: float | None, values: np.ndarray, momentum: float = 0.9) -> float:
    """momentum * prev + (1 - momentum) * median(values); the first call returns the median."""
    med = float(np.median(values))
    return med if prev is None else float(momentum * prev + (1 - momentum) * med)


def temper_factor(kappa_aug: np.ndarray, median: float, lo: float = 0.2, hi: float = 2.0) -> np.ndarray:
    """r_i = clamp(kappa_aug_i / median, lo, hi): (n,)."""
    return np.clip(np.asarray(kappa_aug, float) / max(median, 1e-12), lo, hi)


def banerjee_kappa(rbar: np.ndarray, d: int, lo: float = 0.5, hi: float = 100.0) -> np.ndarray:
    """Banerjee et al. (JMLR 2005) approximation of A_d^{-1}(rbar), clamped to [lo, hi]."""
    rbar = np.clip(np.asarray(rbar, float), 1e-6, 1 - 1e-6)
    return np.clip(rbar * (d - rbar**2) / (1 - rbar**2), lo, hi)


def m_step(z: np.ndarray, resp: np.ndarray, old: VMFMixture, prior: float = 5.0,
           kappa_clamp: tuple[float, float] = (0.5, 100.0),
           pi0_clamp: tuple[float, float] = (1e-3, 0.2)) -> VMFMixture:
    """Maximize given responsibilities resp (n, G + 1); a component with no mass keeps mu and kappa."""
    n, d = z.shape
    g = resp.shape[1] - 1
    s = resp[:, 1:].T @ z  # (G, d)
    mass = resp[:, 1:].sum(0)
    norm = np.linalg.norm(s, axis=1)
    alive = norm > 1e-10
    mu, kappa = old.mu.copy(), old.kappa.copy()
    mu[alive] = s[alive] / norm[alive, None]
    kappa[alive] = banerjee_kappa(norm[alive] / np.maximum(mass[alive], 1e-12), d, *kappa_clamp)
    bg = resp[:, 0].sum()
    pi0 = float(np.clip((bg + 0.1 * prior) / (n + 0.1 * prior + prior), *pi0_clamp))
    pi = (1.0 - pi0) * (mass + prior / g) / (mass.sum() + prior)
    return VMFMixture(mu, kappa, pi, pi0)


def blend(old: VMFMixture, new: VMFMixture, momentum: float) -> VMFMixture:
    """(1 - momentum) * old + momentum * new, directions renormalized; momentum 1 is plain EM."""
    if momentum >= 1.0:
        return new
    mu = (1 - momentum) * old.mu + momentum * new.mu
    mu /= np.maximum(np.linalg.norm(mu, axis=1, keepdims=True), 1e-12)
    return VMFMixture(mu, (1 - momentum) * old.kappa + momentum * new.kappa,
                      (1 - momentum) * old.pi + momentum * new.pi,
                      float((1 - momentum) * old.pi0 + momentum * new.pi0))


def fit(z: np.ndarray, mix: VMFMixture, iters: int = 1, momentum: float = 1.0, normalizer: bool = True,
        **m_kw) -> VMFMixture:
    """`iters` rounds of E-step (untempered) + M-step blended in with `momentum`."""
    for _ in range(iters):
        mix = blend(mix, m_step(z, responsibilities(z, mix, None, normalizer), mix, **m_kw), momentum)
    return mix


def class_counts(gamma: np.ndarray, labels: np.ndarray, weight: np.ndarray, num_classes: int,
                 eta: float = 0.5) -> np.ndarray:
    """Smoothed soft counts N[c, g] = sum_{i: y_i = c} w_i gamma[i, g] + eta: (C, G).

    gamma: (n, G) component responsibilities (background column excluded); weight (n,):
    1 for samples counted as clean, 0 otherwise.
    """
    counts = np.zeros((num_classes, gamma.shape[1]))
    np.add.at(counts, np.asarray(labels, int), gamma * np.asarray(weight, float)[:, None])
    return counts + eta


def label_fallback(labels: np.ndarray, clean: np.ndarray) -> np.ndarray:
    """B weights (n,): the clean mask, except that a label none of whose samples is clean
    counts all of them. Without this a label judged all-noisy once gets a uniform B row,
    scores 1/G for every sample and stays all-noisy for good (right for a label that is all
    noise, e.g. a class the client does not hold under globalized noise; wrong otherwise)."""
    labels, w = np.asarray(labels, int), np.asarray(clean, bool).astype(float)
    dead = np.setdiff1d(np.unique(labels), np.unique(labels[w > 0]))
    w[np.isin(labels, dead)] = 1.0
    return w


def ema_rows(old: np.ndarray, new: np.ndarray, momentum: float = 0.1) -> np.ndarray:
    """(1 - momentum) * old + momentum * new, rows renormalized (guards rounding drift)."""
    out = (1 - momentum) * old + momentum * new
    return out / out.sum(1, keepdims=True)


def clean_score(resp: np.ndarray, b: np.ndarray, labels: np.ndarray, form: str = "paper") -> np.ndarray:
    """Geometric clean score (n,) from tempered responsibilities resp (n, G + 1) and B (C, G).

    paper: <gamma_i, B[y_i]>. code: q / (q + <gamma_i, 1 - B[y_i]> + gamma_bg) with q the
    paper score; when resp rows sum to 1 the denominator is 1 and both forms coincide.
    (The `posterior` form is `posterior_score`: it needs the counts, not B.)
    """
    labels = np.asarray(labels, int)
    gamma = resp[:, 1:]
    by = b[labels]
    q = (gamma * by).sum(1)
    if form == "paper":
        return q
    if form == "code":
        return q / (q + (gamma * (1.0 - by)).sum(1) + resp[:, 0] + 1e-12)
    raise ValueError(f"unknown score form {form!r}")


def label_posterior(counts: np.ndarray) -> np.ndarray:
    """P(label | component) (C, G): the smoothed soft counts of `class_counts` normalized per column
    (B is the same counts normalized per row, P(component | label))."""
    counts = np.asarray(counts, float)
    return counts / counts.sum(0, keepdims=True)


def posterior_score(resp: np.ndarray, counts: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """Clean score (n,) <gamma_i, P(y_i | .)> from resp (n, G + 1) and class counts (C, G).

    The paper's score asks how typical a sample's components are *for its label*; where a
    (client, label) group is mostly noise, the label's template learns the noise and the noise
    scores as clean. This one asks which label dominates the sample's components: a true class's
    components keep its own label as the majority whenever less than half of it is flipped,
    however the flipped samples pile up under another label.
    """
    return (resp[:, 1:] * label_posterior(counts)[np.asarray(labels, int)]).sum(1)


def split_noisy(score_noisy: np.ndarray, seed: int) -> np.ndarray:
    """Per-client split of a noisiness score (n,) (e.g. 1 - P_clean or a loss) by a 2-component GMM.

    Returns a bool mask (n,), True where the higher-mean (noisy) component is more likely.
    """
    q, _ = clean_posterior(np.asarray(score_noisy, float), seed=seed)
    return q < 0.5
