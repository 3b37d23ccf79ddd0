"""`PrivateKMeans`: scikit-learn's estimator interface over privclust's private k-means.

Every fit is one call to `privclust.clustering.cluster`, the function a worker calls for a job,
so the centres come from the same code (every method, with the same calibration and the
service's domain limits). The differences from a job are only where the inputs come from: the
rows are the caller's array, table or Parquet file, and the budget is this fit's alone (there is
no ledger).
"""

from __future__ import annotations

import numbers
import os
from pathlib import Path
from typing import Any

import numpy as np
from sklearn.base import BaseEstimator, ClusterMixin, TransformerMixin
from sklearn.metrics import euclidean_distances, pairwise_distances_argmin
from sklearn.utils.validation import check_is_fitted, validate_data

from privclust.clustering import Algorithm, ClusteringResult, Relation, cluster
from privclust.clustering.auto import describe_auto
from privclust.clustering.data.scaling import Box
from privclust.clustering.outputs.accuracy import Space, result_accuracy
from privclust.clustering.outputs.uncertainty import run_warnings, sizes_noise_std
from privclust.tables import read_rows
from privclust.tabular import DEFAULT_CATEGORY_WEIGHT, TableError, TableSpec, category_shares
from privclust.tabular_read import ShapedTable, read_table, shape_table

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
        Radius R of the declared public domain, a ball around `center`. It (or `lower` and
        `upper`) must come from public knowledge (units, instrument ranges), never from the
        rows. Rows outside are clipped onto the sphere. Limits as the service's: R in
        [1e-100, 1e100], every |center_i| + R at most 1e100.
    center : array of shape (n_features,) or None
        Centre of the domain; None is the origin.
    lower, upper : arrays of shape (n_features,) or None
        Instead of a ball: declared bounds per column (within +-1e100). The fit clusters where
        each column is mapped onto [0, 1] by its bounds, so columns in different units get noise
        on their own scale; the centres come back in the columns' own units, and `loss_` is
        measured in that scaled space (`loss_space_` "scaled").
    algorithm : {"auto", "pe-means", "hdpe-means", "fastlloyd", "lsh-coreset", "pe-lloyd"}
        {auto}; `algorithm_` names the method that ran.
    columns : list of str or None
        The columns to use, by name, when X is a table (a pandas DataFrame) or a path to a
        Parquet or CSV file.
    summaries : bool
        Also release private cluster sizes and loss, paid out of the same budget (`sizes_`,
        `sizes_se_`, `loss_`, `loss_se_`, `warnings_`).
    count_public : bool
        Declare the row count public. By default it is private: neighbouring datasets differ by
        adding or removing a row, and the fit spends a tenth of its mu on a noisy row count it
        plans with (as `privclust cluster` does). With True, neighbours replace one row and every
        release is calibrated to that.

    max_rows_per_unit : int or None
        With `fit(X, groups=...)`: m, the most rows one unit of privacy (a person, a customer:
        `groups` gives each row's unit) keeps; each unit keeps at most m rows, chosen uniformly
        at random, and every release is calibrated for one unit's rows (m times a row's noise).
        Without groups the fit protects one row, not one person.
    missing : {"reject", "drop-row", "fill"}
        Missing values (NaN, or a null or missing marker in a table or file): refused (the
        default), rows dropped, or filled with `fill` (a dict per column; else the centre of
        the column's declared domain). Never computed from the data.
    fill : dict or None
    categories : dict or None
        Categorical columns of a table and their categories, e.g. {"plan": ["basic", "premium"]}:
        one-hot encoded (needs `lower` and `upper` for the numeric columns only), with
        `category_weight` (default 0.2; docs/algorithms.md, section 16). `category_shares_`
        gives each centre's share of each category; predict and transform take rows in that
        encoded form (`columns_`).
    category_weight : float

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
        count, itself DP output; None when the count is public). k above that noisy count is
        refused, as the service refuses it.
    sizes_, sizes_se_ : ndarray of shape (n_clusters,), float
        With summaries: the noisy number of rows nearest each centre, and its noise's std.
    loss_, loss_se_ : float
        With summaries: the noisy k-means loss over the noisy row count, and its standard error.
    loss_space_ : str
        "original" (a ball) or "scaled" (per-column bounds).
    warnings_ : list of (code, detail)
        Where a released figure is not informative (docs/algorithms.md, "Warnings").
    centre_error_ : ndarray of shape (n_features_in_,)
        Per column, in its units: a band that should contain, about 9 times in 10, the
        distance from a released centre to where a non-private k-means puts it (noise and
        segmentation: docs/algorithms.md, "Centre error"); read from the released loss with
        summaries, from the declared domain without.
    n_features_in_ : int
    """

    cluster_centers_: np.ndarray
    labels_: np.ndarray
    algorithm_: str
    privacy_: dict[str, Any]
    sizes_: np.ndarray | None
    sizes_se_: float | None
    loss_: float | None
    loss_se_: float | None
    loss_space_: str
    warnings_: list[tuple[str, str]]
    centre_error_: np.ndarray

    def __init__(
        self,
        n_clusters: int = 8,
        epsilon: float = 1.0,
        delta: float | None = None,
        radius: float | None = None,
        center: Any = None,
        algorithm: str = Algorithm.AUTO.value,  # a plain str: scikit-learn's parameter checks
        count_public: bool = False,
        lower: Any = None,
        upper: Any = None,
        columns: Any = None,
        summaries: bool = False,
        max_rows_per_unit: int | None = None,
        missing: str = "reject",
        fill: Any = None,
        categories: Any = None,
        category_weight: float = DEFAULT_CATEGORY_WEIGHT,
    ) -> None:
        self.n_clusters = n_clusters
        self.epsilon = epsilon
        self.delta = delta
        self.radius = radius
        self.center = center
        self.algorithm = algorithm
        self.count_public = count_public
        self.lower = lower
        self.upper = upper
        self.columns = columns
        self.summaries = summaries
        self.max_rows_per_unit = max_rows_per_unit
        self.missing = missing
        self.fill = fill
        self.categories = categories
        self.category_weight = category_weight

    def __sklearn_tags__(self) -> Any:
        tags = super().__sklearn_tags__()
        # Fresh noise on every fit, by design: scikit-learn then skips the checks that compare
        # two fits (fit_transform against fit + transform, a Pipeline against the bare estimator).
        tags.non_deterministic = True
        return tags

    def fit(self, X: Any, y: Any = None, groups: Any = None) -> PrivateKMeans:
        """Release private centres of X (y is ignored). Spends (epsilon, delta) on X, per row,
        or per unit of `groups` (each row's unit; needs `max_rows_per_unit`).

        X is an array, a table (a pandas DataFrame; `columns` picks columns by name) or a path
        to a Parquet or CSV file (read with `columns`)."""
        shaped = self._shaped(X, groups)
        self.domain_ = self._domain() if shaped is None else shaped.domain
        self.columns_ = None if shaped is None else shaped.columns
        rows = self._rows(X) if shaped is None else shaped.rows
        X = validate_data(self, rows, dtype=[np.float64, np.float32])
        if not isinstance(self.n_clusters, numbers.Integral) or isinstance(self.n_clusters, bool):
            raise ValueError(f"n_clusters must be an integer, got {self.n_clusters!r}")
        result: ClusteringResult = cluster(
            X,
            int(self.n_clusters),
            algorithm=self.algorithm,
            epsilon=self.epsilon,
            delta=DEFAULT_DELTA if self.delta is None else self.delta,
            relation=Relation.REPLACE_ONE if self.count_public else Relation.ADD_REMOVE,
            summaries=bool(self.summaries),
            check_k=True,  # k above the noisy row count is refused, as the service does
            contribution_bound=1 if shaped is None else shaped.contribution_bound,
            **self.domain_,
        )
        self.cluster_centers_ = np.array(result.centers)  # a writable copy
        self.algorithm_ = result.algorithm
        self.privacy_ = result.privacy_spent()
        self._summarise(result)
        self.labels_ = self._nearest(X)
        self.category_shares_ = (
            None
            if shaped is None
            else category_shares(self.cluster_centers_, shaped.columns, self._spec())
        )
        return self

    def _spec(self) -> TableSpec:
        return TableSpec(
            missing=self.missing,
            fill=dict(self.fill or {}),
            categories={c: list(v) for c, v in (self.categories or {}).items()},
            category_weight=self.category_weight,
            max_rows_per_unit=self.max_rows_per_unit,
        )

    def _shaped(self, X: Any, groups: Any) -> ShapedTable | None:
        """X shaped by the table terms (None for a plain fit: no groups, gaps or categories)."""
        spec = self._spec()
        if spec.plain and groups is None:
            if self.max_rows_per_unit is not None:
                raise ValueError("max_rows_per_unit needs groups (each row's unit)")
            return None
        columns = None if self.columns is None else list(self.columns)
        if isinstance(X, str | os.PathLike):
            X = read_table(Path(X), spec, columns)
        elif not hasattr(X, "columns") and not hasattr(X, "column_names"):
            array = np.asarray(X, dtype=np.float64)
            if array.ndim != 2:
                raise ValueError(f"X must be 2-D (rows, columns), got shape {array.shape}")
            X = {f"x{j}": array[:, j] for j in range(array.shape[1])}
        try:
            return shape_table(X, spec, self._domain(), columns, groups)
        except TableError as exc:
            raise ValueError(f"{exc.field}: {exc}") from exc

    def _rows(self, X: Any) -> Any:
        """The rows of X: a file's (by path), a table's chosen columns, or X itself."""
        if isinstance(X, str | os.PathLike):
            columns = None if self.columns is None else list(self.columns)
            return read_rows(Path(X), columns)[0]
        if self.columns is not None:
            if not hasattr(X, "columns"):
                raise ValueError("columns picks columns by name: give a table or a file path")
            return X[list(self.columns)]
        return X

    def _domain(self) -> dict[str, Any]:
        """The declared domain as the library takes it: a ball or per-column bounds."""
        if self.lower is not None or self.upper is not None:
            if self.radius is not None or self.center is not None:
                raise ValueError("declare either radius (and center) or lower and upper")
            return {"lower": self.lower, "upper": self.upper}
        if self.radius is None:
            raise ValueError(
                "radius (or lower and upper) is required: declare the domain from public "
                "knowledge, never from the data (a domain computed from the rows would leak them)"
            )
        center = None if self.center is None else np.asarray(self.center, dtype=np.float64)
        return {"radius": self.radius, "center": center}

    def _summarise(self, result: ClusteringResult) -> None:
        """The private summaries and the warnings about the released figures."""
        self.sizes_ = None if result.sizes is None else np.array(result.sizes)
        self.sizes_se_ = sizes_noise_std(result.summary_mu, result.relation)
        self.loss_, self.loss_se_ = result.loss, result.loss_se
        self.loss_space_ = result.loss_space
        lower, upper = self._ranges(result.centers.shape[1])
        self.warnings_ = [(c.code, c.detail) for c in run_warnings(result, lower, upper)]
        n_cols = result.centers.shape[1]
        if self.domain_.get("lower") is not None:  # the fit's box: one-hot columns included
            space = Space.box(Box.of(self.domain_["lower"], self.domain_["upper"], n_cols))
        else:
            space = Space.ball(float(self.radius or 0.0), n_cols)
        self.centre_error_ = np.array(result_accuracy(result, space).centre_error)

    def _ranges(self, n_cols: int) -> tuple[np.ndarray, np.ndarray]:
        """Each column's declared range: the bounds, or c +- R for a ball."""
        domain = self.domain_
        if domain.get("lower") is not None:
            return np.asarray(domain["lower"], dtype=float), np.asarray(
                domain["upper"], dtype=float
            )
        c = np.zeros(n_cols) if self.center is None else np.asarray(self.center, dtype=float)
        radius = float(self.radius or 0.0)  # set: the fit declared a ball
        return c - radius, c + radius

    def _in_fit_space(self, X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """X's rows and the centres where the fit clustered and `loss_` is measured: for
        per-column bounds the scaled space (each column over its declared range, as the fit
        declared it: a categorical column's one-hot columns included, rows clipped into the
        box), else the columns' own units."""
        if self.domain_.get("lower") is not None:
            lower, upper = self.domain_["lower"], self.domain_["upper"]
            box = Box.of(lower, upper, self.cluster_centers_.shape[1])
            scaled = box.to_scaled(np.asarray(X, dtype=np.float64))
            return scaled, box.to_scaled(self.cluster_centers_)
        return np.asarray(X), self.cluster_centers_

    def _nearest(self, X: np.ndarray) -> np.ndarray:
        """Each row's nearest centre, compared where the fit clustered (`_in_fit_space`)."""
        rows, centres = self._in_fit_space(X)
        return pairwise_distances_argmin(rows, centres).astype(np.intp)

    def predict(self, X: Any) -> np.ndarray:
        """The index of the nearest private centre of each row."""
        check_is_fitted(self)
        X = validate_data(self, X, dtype=[np.float64, np.float32], reset=False)
        return self._nearest(X)

    def transform(self, X: Any) -> np.ndarray:
        """Euclidean distances of each row to the private centres, shape (n, n_clusters), in
        the space `predict` compares in and `loss_` is measured in (`loss_space_`: with
        per-column bounds each column over its declared range), so that the nearest centre by
        `transform` is `predict`'s."""
        check_is_fitted(self)
        X = validate_data(self, X, dtype=[np.float64, np.float32], reset=False)
        return euclidean_distances(*self._in_fit_space(X))

    def score(self, X: Any, y: Any = None) -> float:
        """Minus the sum of squared distances of X's rows to their nearest centre (as KMeans),
        in `transform`'s space: with per-column bounds the scaled one, so that score / n is
        comparable with `loss_`.

        Computed from X, so not private: use it on data you may look at.
        """
        distances = self.transform(X)
        return -float(np.square(distances.min(axis=1)).sum())


# The one description of "auto" (privclust.clustering.auto.describe_auto), put in the docstring.
PrivateKMeans.__doc__ = (PrivateKMeans.__doc__ or "").replace(
    "{auto}", describe_auto().capitalize()
)
