"""Selection step of PE-means: weighted k-means over the candidates the noisy votes kept."""

from __future__ import annotations

import warnings

import numpy as np
from sklearn.cluster import KMeans
from sklearn.exceptions import ConvergenceWarning

# k-means++ restarts of the selection step: 5 is as good as 10 on the paper's sets (and better
# than 1 or 3 at k = 64) at half the cost of 10 (bench/RESULTS.md, "selection restarts").
KMEANS_RESTARTS = 5


def select_centres(
    candidates: np.ndarray,
    weights: np.ndarray,
    k: int,
    previous: np.ndarray | None,
    rng: np.random.Generator,
    *,
    restarts: int | None = None,
) -> np.ndarray:
    """k centres: weighted k-means (k-means++ init, `restarts` runs, default KMEANS_RESTARTS) on
    the positive-weight candidates.

    With fewer than k positive-weight candidates there is nothing to cluster; the previous
    selection is kept, or in the first iteration the positive candidates are completed with
    randomly chosen other candidates. The weights are noisy, so this is post-processing.
    """
    positive = np.flatnonzero(weights > 0)
    if positive.size < k:
        if previous is not None:
            return previous
        others = np.setdiff1d(np.arange(len(candidates)), positive)
        fill = rng.choice(others, size=k - positive.size, replace=False)
        return candidates[np.concatenate([positive, fill])].copy()
    if positive.size == k:
        return candidates[positive].copy()
    model = KMeans(
        n_clusters=k,
        init="k-means++",
        n_init=KMEANS_RESTARTS if restarts is None else restarts,
        random_state=int(rng.integers(2**31 - 1)),
    )
    with warnings.catch_warnings():
        # Coincident candidates (e.g. several mutants projected to the same boundary point) can
        # leave fewer distinct points than k; sklearn warns and still returns k centres.
        warnings.simplefilter("ignore", ConvergenceWarning)
        model.fit(candidates[positive], sample_weight=weights[positive])
    return np.asarray(model.cluster_centers_, dtype=np.float64)
