"""`PrivateKMeans`: scikit-learn's estimator interface over privclust's private k-means.

Every fit is one call to `privclust.clustering.cluster`, the function a worker calls for a job,
so the centres come from the same code (PE-means, HDPE-means, FastLloyd or the LSH-tree coreset,
with the same calibration). The differences from a job are only where the inputs come from: the rows
are the caller's array, and the budget is this fit's alone (there is no ledger).
"""

from __future__ import annotations

import numbers
from typing import Any

import numpy as np
from sklearn.base import BaseEstimator, ClusterMixin, TransformerMixin
from sklearn.metrics import euclidean_distances, pairwise_distances_argmin
from sklearn.utils.validation import check_is_fitted, validate_data

from privclust.clustering import Algorithm, ClusteringResult, Relation, cluster

DEFAULT_DELTA = 1e-6


class PrivateKMeans(ClusterMixin, TransformerMixin, BaseEstimator):
    """Differentially private k-means centres, as a scikit-learn clusterer and transformer.

    Parameters
    ----------
    n_clusters : int
        k, the number of centres released.
    epsilon : float
        The privacy budget of one `fit`, with `delta`: the fit is (epsilon, delta)-DP (it is
        mu-GDP for the largest mu that implies it, converted exactly).
    delta : float or None
        Default 1e-6. Choose one below 1/N for N rows; it is never derived from the data,
        because the row count is private.
    radius : float
        Radius R of the declared public domain, a ball around `center`. Required: it must come
        from public knowledge (units, instrument ranges), never from the rows. Rows outside are
        clipped onto the sphere.
    center : array of shape (n_features,) or None
        Centre of the domain; None is the origin.
    algorithm : {"auto", "pe-means", "hdpe-means", "fastlloyd", "lsh-coreset", "pe-lloyd"}
        "auto" chooses from public facts (privclust.clustering.auto: today HDPE-means when there are
        more than 32 columns, pe-lloyd otherwise); `algorithm_` names the method that ran.
    count_public : bool
        Declare the row count public. By default it is private: neighbouring datasets differ by
        adding or removing a row, and the fit spends a tenth of its mu on a noisy row count it
        plans with (as `privclust cluster` does). With True, neighbours replace one row and every
        release is calibrated to that.

    There is no `random_state`: the noise comes from a ChaCha20 generator keyed from the
    operating system's entropy on every fit. A caller-chosen seed would let anyone who knows it
    subtract the noise, so two fits of the same rows give different centres by design.

    Attributes
    ----------
    cluster_centers_ : ndarray of shape (n_clusters, n_features)
        The private centres: the only differentially private output.
    labels_ : ndarray of shape (n_samples,)
        The nearest centre of each training row. Computed from the rows, so NOT private: for the
        caller's own use, never to be published.
    algorithm_ : str
        The algorithm that ran ("auto" resolved).
    privacy_ : dict
        mu, epsilon, delta, sigma, releases, iterations, relation, count_mu (the part of mu
        spent on the noisy row count, None when the count is public) and n_rows_dp (that noisy
        count, itself DP output; None when the count is public).
    n_features_in_ : int
    """

    cluster_centers_: np.ndarray
    labels_: np.ndarray
    algorithm_: str
    privacy_: dict[str, Any]

    def __init__(
        self,
        n_clusters: int = 8,
        epsilon: float = 1.0,
        delta: float | None = None,
        radius: float | None = None,
        center: Any = None,
        algorithm: str = Algorithm.AUTO.value,  # a plain str: scikit-learn's parameter checks
        count_public: bool = False,
    ) -> None:
        self.n_clusters = n_clusters
        self.epsilon = epsilon
        self.delta = delta
        self.radius = radius
        self.center = center
        self.algorithm = algorithm
        self.count_public = count_public

    def __sklearn_tags__(self) -> Any:
        tags = super().__sklearn_tags__()
        # Fresh noise on every fit, by design: scikit-learn then skips the checks that compare
        # two fits (fit_transform against fit + transform, a Pipeline against the bare estimator).
        tags.non_deterministic = True
        return tags

    def fit(self, X: Any, y: Any = None) -> PrivateKMeans:
        """Release private centres of X (y is ignored). Spends (epsilon, delta) on X."""
        X = validate_data(self, X, dtype=[np.float64, np.float32])
        if self.radius is None:
            raise ValueError(
                "radius is required: declare the domain from public knowledge, never from the "
                "data (a radius computed from the rows would leak them)"
            )
        if not isinstance(self.n_clusters, numbers.Integral) or isinstance(self.n_clusters, bool):
            raise ValueError(f"n_clusters must be an integer, got {self.n_clusters!r}")
        result: ClusteringResult = cluster(
            X,
            int(self.n_clusters),
            algorithm=self.algorithm,
            radius=self.radius,
            center=None if self.center is None else np.asarray(self.center, dtype=np.float64),
            epsilon=self.epsilon,
            delta=DEFAULT_DELTA if self.delta is None else self.delta,
            relation=Relation.REPLACE_ONE if self.count_public else Relation.ADD_REMOVE,
        )
        self.cluster_centers_ = np.array(result.centers)  # a writable copy
        self.algorithm_ = result.algorithm
        self.privacy_ = result.privacy_spent()
        self.labels_ = self._nearest(X)
        return self

    def _nearest(self, X: np.ndarray) -> np.ndarray:
        return pairwise_distances_argmin(X, self.cluster_centers_).astype(np.intp)

    def predict(self, X: Any) -> np.ndarray:
        """The index of the nearest private centre of each row."""
        check_is_fitted(self)
        X = validate_data(self, X, dtype=[np.float64, np.float32], reset=False)
        return self._nearest(X)

    def transform(self, X: Any) -> np.ndarray:
        """Euclidean distances of each row to the private centres, shape (n, n_clusters)."""
        check_is_fitted(self)
        X = validate_data(self, X, dtype=[np.float64, np.float32], reset=False)
        return euclidean_distances(X, self.cluster_centers_)

    def score(self, X: Any, y: Any = None) -> float:
        """Minus the sum of squared distances of X's rows to their nearest centre (as KMeans).

        Computed from X, so not private: use it on data you may look at.
        """
        distances = self.transform(X)
        return -float(np.square(distances.min(axis=1)).sum())
