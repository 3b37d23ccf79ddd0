"""`cluster`: one entry point that resolves "auto" (privclust.clustering.auto) and runs the
method."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from privclust.clustering import params
from privclust.clustering.errors import ClusteringInputError
from privclust.clustering.fastlloyd import fastlloyd
from privclust.clustering.hdpe import hdpe_means
from privclust.clustering.lsh_coreset import lsh_coreset
from privclust.clustering.params import (
    DEFAULT_MAX_POPULATION,
    DEFAULT_PROJECTION_DIM,
    check_integer,
    data_shape,
    default_pe_iterations,
    job_generator,
    plan_run,
    resolve_algorithm,
    resolve_privacy,
)
from privclust.clustering.pe import Progress, pe_means
from privclust.clustering.pe_lloyd import pe_lloyd
from privclust.clustering.result import ClusteringResult
from privclust.privacy.gdp import remaining_after
from privclust.privacy.noise import release_count


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
    summary_fraction: float | None = None,
) -> ClusteringResult:
    """Run the chosen algorithm; "auto" picks one from d, the public row count, k and the
    job's mu (privclust.clustering.auto.choose_algorithm) and the result names the one that ran.

    `projection_dim` only matters for HDPE-means; "lsh-coreset" runs with its default tree
    parameters (`iterations` = tree levels). `n_public` is the dataset's public row count
    (its released N~; the exact N only with `relation="replace-one"`). "auto" without a public
    count (a library call under add/remove neighbours) first releases N~ from a tenth of the
    job's mu, exactly as every method does on its own, and runs the chosen method with that
    N~ and the rest of the mu. See pe_means and hdpe_means for the rest. `summaries=True` also
    releases the centres' private sizes and loss (privclust.clustering.summaries), paid out of the
    same mu: `summary_fraction` of it (default SUMMARY_MU_FRACTION); without summaries it must
    be None.
    """
    if summaries:
        from privclust.clustering.summaries import cluster_with_summaries

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
            summary_fraction=summary_fraction,
        )
    if summary_fraction is not None:
        raise ClusteringInputError("summary_fraction", "summary_fraction needs summaries=True")
    n_rows, n_cols = data_shape(X)
    options: dict[str, Any] = {
        "X": X,
        "k": k,
        "radius": radius,
        "center": center,
        "iterations": iterations,
        "variations": variations,
        "projection_dim": projection_dim,
        "rng": rng,
        "progress": progress,
        "max_population": max_population,
        "relation": relation,
    }
    if algorithm != "auto" or relation == "replace-one" or n_public is not None:
        count = n_rows if relation == "replace-one" else max(int(n_public or 1), 1)
        job_mu = resolve_privacy(epsilon, delta, mu)[0] if algorithm == "auto" else 0.0
        chosen = resolve_algorithm(algorithm, n_cols, n_rows=count, k=k, mu=job_mu)
        return _run(chosen, epsilon=epsilon, delta=delta, mu=mu, n_public=n_public, **options)

    # "auto" needs N~ before it can choose: validate everything with a stand-in count (no
    # noise drawn yet), release N~ as plan_for_rows would, then run the choice on what is left.
    k = check_integer("k", k, 1)
    plan_run(
        k,
        n_cols,
        k,
        algorithm="auto",
        epsilon=epsilon,
        delta=delta,
        mu=mu,
        iterations=iterations,
        variations=variations,
        projection_dim=projection_dim,
        max_population=max_population,
        relation=relation,
    )
    job_mu, job_epsilon, job_delta = resolve_privacy(epsilon, delta, mu)
    count_mu = params.COUNT_MU_FRACTION * job_mu
    n_tilde = max(release_count(n_rows, count_mu, job_generator(rng)), k)
    chosen = resolve_algorithm("auto", n_cols, n_rows=n_tilde, k=k, mu=job_mu)
    if iterations is None and chosen in ("pe-means", "pe-lloyd"):
        # PE-means scales its T with epsilon (> 1): keep the T a direct call would plan.
        options["iterations"] = default_pe_iterations(n_cols, job_epsilon)
    result = _run(
        chosen,
        epsilon=None,
        delta=None,
        mu=remaining_after(job_mu, count_mu),
        n_public=n_tilde,
        **options,
    )
    return dataclasses.replace(
        result, mu=job_mu, epsilon=job_epsilon, delta=job_delta, count_mu=count_mu
    )


def _run(
    chosen: str,
    *,
    X: np.ndarray,
    k: int,
    radius: float,
    center: np.ndarray | None,
    epsilon: float | None,
    delta: float | None,
    mu: float | None,
    iterations: int | None,
    variations: int | None,
    projection_dim: int,
    rng: np.random.Generator | None,
    progress: Progress | None,
    max_population: int,
    n_public: int | None,
    relation: str,
) -> ClusteringResult:
    """Run one concrete method with the arguments it takes."""
    privacy = {"epsilon": epsilon, "delta": delta, "mu": mu}
    common = {
        "radius": radius,
        "center": center,
        "iterations": iterations,
        "n_public": n_public,
        "relation": relation,
        "rng": rng,
        "progress": progress,
        **privacy,
    }
    if chosen == "lsh-coreset":
        return lsh_coreset(X, k, **common)  # type: ignore[arg-type]
    if chosen == "fastlloyd":
        return fastlloyd(X, k, **common)  # type: ignore[arg-type]
    pe_options = {**common, "variations": variations, "max_population": max_population}
    if chosen == "hdpe-means":
        return hdpe_means(X, k, projection_dim=projection_dim, **pe_options)  # type: ignore[arg-type]
    if chosen == "pe-lloyd":
        return pe_lloyd(X, k, **pe_options)  # type: ignore[arg-type]
    return pe_means(X, k, **pe_options)  # type: ignore[arg-type]
