"""The Gaussian mechanism: the only place the clustering library adds privacy noise."""

from __future__ import annotations

import numpy as np


def gaussian_release(
    values: np.ndarray, *, sensitivity: float, sigma: float, rng: np.random.Generator
) -> np.ndarray:
    """values + i.i.d. N(0, (sensitivity * sigma)^2) noise on every entry (a new array).

    When the l2 sensitivity of `values` is at most `sensitivity`, the release is (1/sigma)-GDP;
    T such releases compose to sqrt(T)/sigma-GDP.
    """
    noise = rng.normal(0.0, sensitivity * sigma, size=np.shape(values))
    return np.asarray(values, dtype=np.float64) + noise
