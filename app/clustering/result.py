"""The value a clustering run returns: the private centres and the privacy it spent."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np

Algorithm = Literal["pe-means", "hdpe-means"]


@dataclass(frozen=True)
class ClusteringResult:
    """Differentially private cluster centres and the exact privacy accounting of the run.

    `centers` is a read-only k x d array in the caller's original coordinates. The run is
    `mu`-GDP: `releases` Gaussian mechanisms of sensitivity 1 (or R for HDPE's noisy sums) with
    noise multiplier `sigma`, composing to sqrt(releases) / sigma <= mu. `iterations` counts the
    PE-means iterations (for HDPE-means the PE iterations in the projected space; its two final
    noisy releases are counted in `releases`, not here). `epsilon`/`delta` are set when the
    budget was given as (epsilon, delta).
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
