"""`cluster`: one entry point that resolves "auto" and runs PE-means, HDPE-means or FastLloyd."""

from __future__ import annotations

import numpy as np

from app.clustering.fastlloyd import fastlloyd
from app.clustering.hdpe import hdpe_means
from app.clustering.lsh_coreset import lsh_coreset
from app.clustering.params import (
    DEFAULT_MAX_POPULATION,
    DEFAULT_PROJECTION_DIM,
    data_shape,
    resolve_algorithm,
)
from app.clustering.pe import Progress, pe_means
from app.clustering.result import ClusteringResult


def cluster(
    X: np.ndarray,
    k: int,
    *,
    algorithm: str = "auto",
    radius: float,
    center: np.ndarray | None = None,
    epsilon: float | None = None,
    delta: float | None = None,
    mu: float | None = None,
    iterations: int | None = None,
    variations: int | None = None,
    projection_dim: int = DEFAULT_PROJECTION_DIM,
    rng: np.random.Generator | None = None,
    progress: Progress | None = None,
    max_population: int = DEFAULT_MAX_POPULATION,
    n_public: int | None = None,
    relation: str = "add-remove",
    summaries: bool = False,
) -> ClusteringResult:
    """Run the chosen algorithm; "auto" is HDPE-means when d > 32, PE-means otherwise.

    `projection_dim` only matters for HDPE-means; "lsh-coreset" runs with its default tree
    parameters (`iterations` = tree levels). `n_public` is the dataset's public row count
    (its released N~; the exact N only with `relation="replace-one"`). See pe_means and
    hdpe_means for the rest. `summaries=True` also releases the centres' private sizes and
    loss (app.clustering.summaries), paid out of the same mu.
    """
    if summaries:
        from app.clustering.summaries import cluster_with_summaries

        return cluster_with_summaries(
            cluster,
            X,
            k,
            algorithm=algorithm,
            radius=radius,
            center=center,
            epsilon=epsilon,
            delta=delta,
            mu=mu,
            iterations=iterations,
            rng=rng,
            n_public=n_public,
            relation=relation,
            variations=variations,
            projection_dim=projection_dim,
            progress=progress,
            max_population=max_population,
        )
    _, n_cols = data_shape(X)
    chosen = resolve_algorithm(algorithm, n_cols)
    if chosen in ("lsh-coreset", "fastlloyd"):
        method = lsh_coreset if chosen == "lsh-coreset" else fastlloyd
        return method(
            X,
            k,
            radius=radius,
            center=center,
            epsilon=epsilon,
            delta=delta,
            mu=mu,
            iterations=iterations,
            n_public=n_public,
            relation=relation,
            rng=rng,
            progress=progress,
        )
    if chosen == "hdpe-means":
        return hdpe_means(
            X,
            k,
            radius=radius,
            center=center,
            epsilon=epsilon,
            delta=delta,
            mu=mu,
            projection_dim=projection_dim,
            iterations=iterations,
            variations=variations,
            rng=rng,
            progress=progress,
            max_population=max_population,
            n_public=n_public,
            relation=relation,
        )
    return pe_means(
        X,
        k,
        radius=radius,
        center=center,
        epsilon=epsilon,
        delta=delta,
        mu=mu,
        iterations=iterations,
        variations=variations,
        rng=rng,
        progress=progress,
        max_population=max_population,
        n_public=n_public,
        relation=relation,
    )
