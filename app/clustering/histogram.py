"""Noisy vote histogram post-processing (approximate MLE) and the adaptive variation count."""

from __future__ import annotations

import numpy as np

MIN_VARIATIONS = 4


def postprocess_votes(noisy: np.ndarray, n_rows: int) -> np.ndarray:
    """Approximate MLE of the true votes given the noisy ones (ALGORITHM.md 2, step 3).

    Keep the smallest set of largest bins whose sum reaches N, zero every other bin and every
    negative bin; when even all bins together never reach N, keep every positive bin.
    Pure post-processing of the noisy histogram: it costs no privacy.
    """
    noisy = np.asarray(noisy, dtype=np.float64)
    order = np.argsort(-noisy, kind="stable")
    cumulative = np.cumsum(noisy[order])
    reached = np.flatnonzero(cumulative >= n_rows)
    keep = np.zeros(noisy.size, dtype=bool)
    if reached.size:
        keep[order[: reached[0] + 1]] = True
    else:
        keep[:] = True
    processed = np.where(keep & (noisy > 0), noisy, 0.0)
    return processed


def adapt_variations(
    variations: int, processed: np.ndarray, sigma: float, population_size: int
) -> int:
    """Halve L (not below 4) when the processed histogram looks dominated by noise.

    The signal-to-noise estimate is sum(processed^2) / (population_size * sigma^2), the energy of
    the kept bins against the expected energy of the noise over the whole population. An L
    already below 4 (set explicitly) is never raised by this rule.
    """
    energy = float(np.dot(processed, processed))
    if energy < population_size * sigma * sigma:
        return max(variations // 2, min(variations, MIN_VARIATIONS))
    return variations
