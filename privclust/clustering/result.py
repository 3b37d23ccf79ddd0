"""The value a clustering run returns: the private centres and the privacy it spent."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np

Algorithm = Literal["pe-means", "hdpe-means", "fastlloyd", "lsh-coreset", "pe-lloyd"]


@dataclass(frozen=True)
class ClusteringResult:
    """Differentially private cluster centres and the exact privacy accounting of the run.

    `centers` is a read-only k x d array in the caller's original coordinates, snapped to
    multiples of R / 2^32 around the domain centre. The run is `mu`-GDP under `relation`:
    `releases` integer Gaussian mechanisms with noise multiplier `sigma` (each calibrated to its
    sensitivity: 1 for a vote histogram or count vector, R for HDPE's noisy sums, sqrt(2) and 2R
    under replace-one), plus, when `count_mu` is set, the run's own noisy row count, composing
    to sqrt(releases / sigma^2 + count_mu^2) <= mu. `n_public` is the public row count the run
    planned with (N~, or N when it is public). `iterations` counts the
    PE-means iterations (for HDPE-means the PE iterations in the projected space; its two final
    noisy releases are counted in `releases`, not here). `epsilon`/`delta` are set when the
    budget was given as (epsilon, delta).

    With summaries (privclust.clustering.summaries), `sizes` (noisy per-centre row counts, floored
    at 0) and `loss` (the noisy clipped k-means loss over N~, with the standard deviation of
    its noise `loss_se`) are released with `summary_mu` of the job's mu (two releases, see
    privclust.clustering.summaries.summary_sigmas); `releases` and `sigma` are then those of the
    centres, and sqrt(releases / sigma^2 + summary_mu^2 (+ count_mu^2)) <= mu.
    """

    centers: np.ndarray
    algorithm: Algorithm
    mu: float
    sigma: float
    releases: int
    iterations: int
    epsilon: float | None = None
    delta: float | None = None
    variations: int = 0
    final_variations: int = 0
    population_size: int = 0
    projection_dim: int | None = None
    n_public: int = 0
    relation: str = "add-remove"
    count_mu: float | None = None
    sizes: np.ndarray | None = None
    loss: float | None = None
    loss_se: float | None = None
    summary_mu: float | None = None
