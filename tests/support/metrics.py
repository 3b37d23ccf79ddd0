"""Clustering loss for tests and benchmarks (non-private: never part of a released result)."""

from __future__ import annotations

import numpy as np

from privclust.clustering.evolution.nearest import nearest_candidates


def kmeans_loss(X: np.ndarray, centers: np.ndarray) -> float:
    """(1/N) sum_i min_j |x_i - mu_j|^2, the paper's normalised k-means loss."""
    points = np.asarray(X, dtype=np.float64)
    centres = np.asarray(centers, dtype=np.float64)
    labels = nearest_candidates(points, centres)
    total = 0.0
    for start in range(0, len(points), 1 << 16):
        diff = points[start : start + (1 << 16)] - centres[labels[start : start + (1 << 16)]]
        total += float(np.einsum("ij,ij->", diff, diff))
    return total / len(points)
