"""Seeded utility tests: PE-means reaches the published loss level of the PE-means paper.

The paper reports, per data set, only the area under the loss-vs-epsilon curve over
epsilon in {0.25, 0.5, 1, 2, 4} (width 3.75), so AUC / 3.75 is its mean loss over that range.
Loss falls with epsilon and epsilon = 1 sits mid-range, so we require the mean loss at
epsilon = 1 over fixed seeds to stay near that level:

* sklearn_4_4 (paper AUC 0.0778 -> 0.02075, non-private 0.0207): PE-means converges to the
  optimum here; per-seed SD is ~1e-5 (20 seeds), so we allow 2%: mean <= 0.0212.
* sklearn_16_16 (paper AUC 0.0668 -> 0.01781): per-seed loss at epsilon 1 has SD ~0.0022 over
  20 seeds (one in twenty seeds lands in a local optimum at ~0.027), so the 5-seed mean has SD
  ~0.001; we allow 25%: mean <= 0.0223, about 3 SD above our 20-seed mean of 0.0193.

The seeds are fixed, so the tests are deterministic; for a random draw of seeds the stated bounds
would fail with probability about 0.1%. Data and protocol as in docs/algorithms.md section 9:
make_blobs(20000, d, k, random_state=1), centred, scaled to max row norm 1, R = 1,
delta = 1/N^1.1.
"""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.datasets import make_blobs

from privclust.clustering import pe_means
from tests.support.metrics import kmeans_loss


def _paper_set(k: int, d: int) -> np.ndarray:
    X, _ = make_blobs(n_samples=20_000, n_features=d, centers=k, random_state=1)
    X = X - X.mean(axis=0)
    return X / np.linalg.norm(X, axis=1).max()


@pytest.mark.parametrize(
    ("k", "d", "seeds", "bound"),
    [(4, 4, 3, 1.02 * 0.0778 / 3.75), (16, 16, 5, 1.25 * 0.0668 / 3.75)],
)
def test_pe_means_meets_the_paper_loss_level_at_epsilon_1(
    k: int, d: int, seeds: int, bound: float
) -> None:
    X = _paper_set(k, d)
    delta = 20_000**-1.1
    losses = [
        kmeans_loss(
            X,
            pe_means(
                X, k, radius=1.0, epsilon=1.0, delta=delta, rng=np.random.default_rng(seed)
            ).centers,
        )
        for seed in range(seeds)
    ]
    assert np.mean(losses) <= bound
