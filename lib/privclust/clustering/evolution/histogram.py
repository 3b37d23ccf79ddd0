"""Noisy vote histogram post-processing (approximate MLE) and the adaptive variation count."""

from __future__ import annotations

import numpy as np

from privclust.clustering.run.plan import MIN_VARIATIONS


def postprocess_votes(noisy: np.ndarray, n_public: int) -> np.ndarray:
    """Approximate MLE of the true votes given the noisy ones (docs/algorithms.md 4, step 3).

    Keep the smallest set of largest bins whose sum reaches the public row count `n_public`
    (the dataset's noisy count N~, never the exact N under add/remove neighbours), zero every
    other bin and every negative bin; when even all bins together never reach it, keep every
    positive bin. `noisy` is the integer-valued release; the result is int64. Pure
    post-processing of the noisy histogram and of N~: it costs no privacy.
    """
    noisy = np.asarray(noisy)
    if not np.issubdtype(noisy.dtype, np.integer):
        raise TypeError(f"post-processing takes the integer release, got {noisy.dtype}")
    noisy = noisy.astype(np.int64, copy=False)
    order = np.argsort(-noisy, kind="stable")
    cumulative = np.cumsum(noisy[order])
    reached = np.flatnonzero(cumulative >= n_public)
    keep = np.zeros(noisy.size, dtype=bool)
    if reached.size:
        keep[order[: reached[0] + 1]] = True
    else:
        keep[:] = True
    return np.where(keep & (noisy > 0), noisy, 0)


def adapt_variations(
    variations: int, processed: np.ndarray, noise_std: float, population_size: int
) -> int:
    """Halve L (not below 4) when the processed histogram looks dominated by noise.

    The signal-to-noise estimate is sum(processed^2) / (population_size * noise_std^2), the
    energy of the kept bins against the expected energy of the noise over the whole population
    (`noise_std` is the std of each bin's noise). An L already below 4 (set explicitly) is never
    raised by this rule.
    """
    kept = np.asarray(processed, dtype=np.float64)
    energy = float(np.dot(kept, kept))
    if energy < population_size * noise_std * noise_std:
        return max(variations // 2, min(variations, MIN_VARIATIONS))
    return variations
