"""Validation of clustering arguments and the run plan: algorithm, T, L, sigma, releases.

Everything here depends only on public quantities (N, d, k and the caller's parameters), so a
service can plan and price a job, and reject bad parameters, before touching the data.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass
from typing import Literal

import numpy as np

from app.clustering.errors import ClusteringInputError
from app.clustering.histogram import MIN_VARIATIONS
from app.clustering.result import Algorithm, ClusteringResult
from app.privacy.gdp import mu_from_epsilon_delta, noise_multiplier

AlgorithmChoice = Literal["auto", "pe-means", "hdpe-means"]
ALGORITHMS: tuple[str, ...] = ("auto", "pe-means", "hdpe-means")
# "auto" picks HDPE-means when d exceeds this (measured in bench/RESULTS.md, "auto threshold").
AUTO_HDPE_ABOVE_DIM = 32
DEFAULT_PROJECTION_DIM = 16
# Cap on the default population (L+1)*k. L = N/(5k) grows with N; the cap leaves every data set
# up to N ~ 20,000 unchanged and keeps a million-row job fast (bench/RESULTS.md, "population cap").
DEFAULT_MAX_POPULATION = 8192


def check_integer(field: str, value: object, minimum: int) -> int:
    """`value` as an int >= minimum, or ClusteringInputError naming `field`."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise ClusteringInputError(field, f"{field} must be an integer, got {value!r}")
    result = int(value)
    if result < minimum:
        raise ClusteringInputError(field, f"{field} must be at least {minimum}, got {result}")
    return result


def check_positive(field: str, value: object) -> float:
    """`value` as a finite float > 0, or ClusteringInputError naming `field`."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ClusteringInputError(field, f"{field} must be a number, got {value!r}")
    result = float(value)
    if not math.isfinite(result) or result <= 0.0:
        raise ClusteringInputError(field, f"{field} must be finite and > 0, got {result!r}")
    return result


def resolve_privacy(
    epsilon: float | None, delta: float | None, mu: float | None
) -> tuple[float, float | None, float | None]:
    """(mu, epsilon, delta) of a job from exactly one of (epsilon, delta) or mu.

    mu for (epsilon, delta) is the largest mu-GDP guarantee implying (epsilon, delta)-DP, rounded
    down by app.privacy.gdp; invalid epsilon/delta raise its PrivacyParameterError.
    """
    if mu is not None:
        if epsilon is not None or delta is not None:
            raise ClusteringInputError("mu", "give either (epsilon, delta) or mu, not both")
        return check_positive("mu", mu), None, None
    if epsilon is None:
        if delta is not None:
            raise ClusteringInputError("epsilon", "delta was given without epsilon")
        raise ClusteringInputError("epsilon", "give either (epsilon, delta) or mu")
    if delta is None:
        raise ClusteringInputError("delta", "epsilon needs a delta (or give mu instead)")
    return mu_from_epsilon_delta(epsilon, delta), float(epsilon), float(delta)


def resolve_algorithm(algorithm: str, n_cols: int) -> Algorithm:
    """The concrete algorithm for a choice: "auto" is HDPE-means when d > AUTO_HDPE_ABOVE_DIM."""
    if algorithm not in ALGORITHMS:
        raise ClusteringInputError(
            "algorithm", f"algorithm must be one of {', '.join(ALGORITHMS)}, got {algorithm!r}"
        )
    if algorithm == "auto":
        return "hdpe-means" if n_cols > AUTO_HDPE_ABOVE_DIM else "pe-means"
    return "hdpe-means" if algorithm == "hdpe-means" else "pe-means"


def default_pe_iterations(n_cols: int, epsilon: float | None) -> int:
    """T = floor(4 sqrt(d)); T = floor(eps * floor(4 sqrt(d))) when eps > 1; at least 1.

    With only mu given there is no epsilon to scale by, so T = floor(4 sqrt(d)).
    """
    base = math.isqrt(16 * n_cols)  # exactly floor(4 * sqrt(d))
    if epsilon is not None and epsilon > 1.0:
        base = math.floor(epsilon * base)
    return max(base, 1)


def default_hdpe_iterations(projection_dim: int) -> int:
    """PE iterations of HDPE-means: T_total - 2 with T_total = floor(4 sqrt(p)) (14 for p = 16)."""
    return max(math.isqrt(16 * projection_dim) - 2, 1)


def default_variations(n_rows: int, k: int, max_population: int) -> int:
    """L = max(floor(N / (5k)), 4), lowered so that (L+1)*k <= max_population (never below 4)."""
    heuristic = max(n_rows // (5 * k), MIN_VARIATIONS)
    capped = max(max_population // k - 1, MIN_VARIATIONS)
    return min(heuristic, capped)


@dataclass(frozen=True)
class RunPlan:
    """Everything a run will do that depends only on public inputs.

    `iterations` counts PE iterations (for HDPE-means, those in the projected space);
    `releases` counts every Gaussian release (HDPE adds its noisy sums and counts as 2), and
    sqrt(releases)/sigma <= mu. `progress_total` is the `total` passed to progress callbacks:
    the PE iterations, plus one final step for HDPE-means.
    """

    algorithm: Algorithm
    n_rows: int
    n_cols: int
    k: int
    mu: float
    epsilon: float | None
    delta: float | None
    sigma: float
    releases: int
    iterations: int
    variations: int
    population_size: int
    projection_dim: int | None
    progress_total: int

    def result(self, centres: np.ndarray, final_variations: int) -> ClusteringResult:
        """The run's outcome: `centres` (original coordinates, made read-only) and this plan."""
        centres.flags.writeable = False
        return ClusteringResult(
            centers=centres,
            algorithm=self.algorithm,
            mu=self.mu,
            sigma=self.sigma,
            releases=self.releases,
            iterations=self.iterations,
            epsilon=self.epsilon,
            delta=self.delta,
            variations=self.variations,
            final_variations=final_variations,
            population_size=self.population_size,
            projection_dim=self.projection_dim,
        )


def plan_run(
    n_rows: int,
    n_cols: int,
    k: int,
    *,
    algorithm: str = "auto",
    epsilon: float | None = None,
    delta: float | None = None,
    mu: float | None = None,
    iterations: int | None = None,
    variations: int | None = None,
    projection_dim: int | None = DEFAULT_PROJECTION_DIM,
    max_population: int = DEFAULT_MAX_POPULATION,
) -> RunPlan:
    """Validate the non-data arguments of a run and fix its T, L, sigma and release count.

    `iterations` overrides the default T (for HDPE-means: the PE iterations, default
    floor(4 sqrt(p)) - 2); `variations` overrides the initial L and must keep the population
    (L+1)*k within `max_population`. `projection_dim` is used by HDPE-means only (1 <= p <=
    max(d, 16)).
    """
    n_rows = check_integer("X", n_rows, 1)
    n_cols = check_integer("X", n_cols, 1)
    k = check_integer("k", k, 1)
    if k > n_rows:
        raise ClusteringInputError("k", f"k must be at most the number of rows ({n_rows}), got {k}")
    max_population = check_integer("max_population", max_population, 1)
    resolved = resolve_algorithm(algorithm, n_cols)
    job_mu, job_epsilon, job_delta = resolve_privacy(epsilon, delta, mu)

    p: int | None = None
    if resolved == "hdpe-means":
        p = check_integer(
            "projection_dim",
            DEFAULT_PROJECTION_DIM if projection_dim is None else projection_dim,
            1,
        )
        if p > max(n_cols, DEFAULT_PROJECTION_DIM):
            raise ClusteringInputError(
                "projection_dim",
                f"projection_dim must be at most max(d, {DEFAULT_PROJECTION_DIM}) = "
                f"{max(n_cols, DEFAULT_PROJECTION_DIM)}, got {p}",
            )
        pe_iterations = (
            default_hdpe_iterations(p)
            if iterations is None
            else check_integer("iterations", iterations, 1)
        )
        releases = pe_iterations + 2
        progress_total = pe_iterations + 1
    else:
        pe_iterations = (
            default_pe_iterations(n_cols, job_epsilon)
            if iterations is None
            else check_integer("iterations", iterations, 1)
        )
        releases = pe_iterations
        progress_total = pe_iterations

    if variations is None:
        initial_l = default_variations(n_rows, k, max_population)
    else:
        initial_l = check_integer("variations", variations, 1)
        if (initial_l + 1) * k > max(max_population, (MIN_VARIATIONS + 1) * k):
            raise ClusteringInputError(
                "variations",
                f"variations gives a population of {(initial_l + 1) * k} candidates; the "
                f"limit is {max_population} ((variations + 1) * k)",
            )

    sigma = noise_multiplier(job_mu, releases)
    if not math.sqrt(releases) / sigma <= job_mu:  # guaranteed by noise_multiplier
        raise ArithmeticError("noise multiplier does not meet the requested mu")
    return RunPlan(
        algorithm=resolved,
        n_rows=n_rows,
        n_cols=n_cols,
        k=k,
        mu=job_mu,
        epsilon=job_epsilon,
        delta=job_delta,
        sigma=sigma,
        releases=releases,
        iterations=pe_iterations,
        variations=initial_l,
        population_size=(initial_l + 1) * k,
        projection_dim=p,
        progress_total=progress_total,
    )


def data_shape(X: object) -> tuple[int, int]:
    """(N, d) of a 2-D array-like, or ClusteringInputError("X")."""
    shape = np.shape(X)  # type: ignore[call-overload]
    if len(shape) != 2:
        raise ClusteringInputError(
            "X", f"X must be a 2-D array (rows x columns), got shape {shape}"
        )
    if shape[0] < 1 or shape[1] < 1:
        raise ClusteringInputError("X", f"X must have at least one row and one column, got {shape}")
    return int(shape[0]), int(shape[1])


def prepare_rows(X: object, radius: float, center: object | None) -> tuple[np.ndarray, np.ndarray]:
    """(rows centred on c and clipped into the ball of radius R, c) as float64 arrays.

    X is read in blocks and never written (it may be a read-only memmap); the result is the one
    N x d working copy. Rows farther than R from c are scaled onto the sphere, a hair inside so
    that rounding can never leave a norm above R (the sensitivity of HDPE's noisy sums).
    """
    n_rows, n_cols = data_shape(X)
    source = X if isinstance(X, np.ndarray) else np.asarray(X)
    if source.dtype == np.bool_ or not (
        np.issubdtype(source.dtype, np.integer) or np.issubdtype(source.dtype, np.floating)
    ):
        raise ClusteringInputError("X", f"X must hold real numbers, got dtype {source.dtype}")
    radius = check_positive("radius", radius)
    if center is None:
        c = np.zeros(n_cols)
    else:
        try:
            c = np.asarray(center, dtype=np.float64)
        except (TypeError, ValueError) as exc:
            raise ClusteringInputError("center", "center must be a vector of numbers") from exc
        if c.shape != (n_cols,):
            raise ClusteringInputError(
                "center", f"center must have {n_cols} values (one per column), got shape {c.shape}"
            )
        if not np.isfinite(c).all():
            raise ClusteringInputError("center", "center must be finite")
    shrink = 1.0 - 4.0 * float(np.finfo(np.float64).eps)
    out = np.empty((n_rows, n_cols), dtype=np.float64)
    block_rows = max(1, (1 << 20) // n_cols)
    for start in range(0, n_rows, block_rows):
        block = out[start : start + block_rows]
        block[...] = source[start : start + block_rows]
        if not np.isfinite(block).all():
            row, col = np.argwhere(~np.isfinite(block))[0]
            raise ClusteringInputError(
                "X", f"X has a non-finite value at row {start + row}, column {col}"
            )
        block -= c
        if not np.isfinite(block).all():
            raise ClusteringInputError("X", "X has values too large to centre on the domain")
        sq = np.einsum("ij,ij->i", block, block)
        norms = np.sqrt(sq)
        overflow = ~np.isfinite(norms)
        if overflow.any():
            scale = np.abs(block[overflow]).max(axis=1)
            norms[overflow] = scale * np.linalg.norm(block[overflow] / scale[:, None], axis=1)
        outside = norms > radius
        if outside.any():
            block[outside] *= (radius / norms[outside] * shrink)[:, None]
    return out, c
