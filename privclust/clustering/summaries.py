"""Private summaries of released centres (cluster sizes, k-means loss), the owner's labels, and a
private sweep over k with its elbow rule (docs/algorithms.md section 12).

Everything here reads the rows only through blocks of at most BLOCK_ROWS rows: a dataset may be
a memory-mapped matrix of millions of rows. The two summary releases are integer releases
(privclust.privacy.noise.integer_release):

- the sizes: how many rows have each released centre as their nearest, a k-vector of counts
  (l2 sensitivity 1 under add/remove, sqrt(2) under replace-one);
- the loss sum: sum_i min(||x_i - c(x_i)||^2, B) on the grid B / 2^LOSS_GRID_BITS, where B =
  loss_bound(centres, R) is a public upper bound on the squared distance from any point of the
  declared ball to its nearest released centre (so the clip never binds on a row in the domain,
  and B <= (2R)^2). Each row contributes an integer in [0, 2^LOSS_GRID_BITS] (clamped after
  rounding), so one row changes the sum by at most 2^LOSS_GRID_BITS grid units under either
  relation, whatever B is.

The loss released is the noisy sum over N~ (the public planning count, never the exact N).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from privclust.clustering.errors import ClusteringInputError
from privclust.clustering.nearest import nearest_candidates
from privclust.clustering.params import (
    check_integer,
    data_shape,
    job_generator,
    prepare_rows,
    resolve_algorithm,
    resolve_privacy,
)
from privclust.clustering.result import ClusteringResult
from privclust.privacy import noise
from privclust.privacy.gdp import equal_share, noise_multiplier, remaining_after

# The summaries' default share of a job's mu: summary_mu = SUMMARY_MU_FRACTION * mu (4% of the
# job in GDP terms, mu^2); the centres keep sqrt(1 - 0.2^2) = 98.0% of mu. Measured in
# bench/RESULTS.md ("private summaries", auto, 10-20 seeds): the Table I AUCs move by less than
# 5% at 0.2 on every set, while 0.3 moved sklearn_16_16's by +7.1% (SE 3.0%).
SUMMARY_MU_FRACTION = 0.2
# A sweep's jobs give their summaries a larger share: the noisy losses are the sweep's answer.
# The centres keep sqrt(1 - 0.5^2) = 86.6% of each job's mu. Measured in bench/RESULTS.md
# ("sweeps over k"): at 0.3, a sweep of sklearn_16_16 at epsilon 1 had every noisy loss within
# 20% of the exact one in 36 of 40 runs; at 0.5 in 40 of 40.
SWEEP_SUMMARY_FRACTION = 0.5
# The loss sum's part of the summaries' mu, in GDP terms (mu_loss^2 = 0.8 mu_summary^2); the
# sizes get the rest. The loss is the hard one to estimate (its sensitivity, the clip B of at
# least R^2, is far above a typical row's squared distance), while a size's noise is small next
# to N~/k.
SUMMARY_LOSS_SHARE = 0.8
# A row's clipped squared distance is put on a grid of B / 2^LOSS_GRID_BITS: a relative
# resolution of 1e-6 of the largest possible term, far below the noise, and sums stay exact
# in int64 for up to 2^43 rows.
LOSS_GRID_BITS = 20
# loss_bound: at most this many Frank-Wolfe steps on its convex relaxation (any iterate is a
# valid bound; with KMeans' centres on the Table I sets the result is within 2% of the largest
# distance a search over the sphere finds), and the grid, in units of R^2, that the bound is
# rounded up to (a short number, never below the relaxation's value).
LOSS_BOUND_STEPS = 200
LOSS_BOUND_GRID = 2.0**-10
# Rows per block when reading a dataset (bounds the working memory of summaries and labels).
BLOCK_ROWS = 1 << 16
# The elbow rule (suggest_k): a larger k must lower the noisy loss by more than this fraction,
# plus ELBOW_SE_MULTIPLIER standard errors of the difference, to count as an improvement.
ELBOW_DROP = 0.2
ELBOW_SE_MULTIPLIER = 2.0


def summary_mu(job_mu: float, fraction: float | None = None) -> float:
    """The part of a job's mu spent on its summaries (`fraction` of it; default
    SUMMARY_MU_FRACTION). The centres share remaining_after(job_mu, summary_mu)."""
    share = SUMMARY_MU_FRACTION if fraction is None else float(fraction)
    if not (math.isfinite(share) and 0.0 < share < 1.0):
        raise ClusteringInputError(
            "summary_fraction", f"summary_fraction must be in (0, 1), got {share!r}"
        )
    return share * job_mu


def summary_sigmas(mu_summary: float) -> tuple[float, float]:
    """(sizes sigma, loss sigma) of the two summary releases, composing to at most mu_summary:
    the loss gets mu_loss = sqrt(SUMMARY_LOSS_SHARE) mu_summary, the sizes what is left."""
    mu_loss = math.sqrt(SUMMARY_LOSS_SHARE) * mu_summary
    mu_sizes = remaining_after(mu_summary, mu_loss)
    return noise_multiplier(mu_sizes, 1), noise_multiplier(mu_loss, 1)


def centres_mu(job_mu: float, mu_summary: float) -> float:
    """What the centres may spend when `mu_summary` of `job_mu` goes to the summaries."""
    return remaining_after(job_mu, mu_summary)


def loss_bound(centred_centres: np.ndarray, radius: float) -> float:
    """A public upper bound B on max over ||x|| <= R of min_j ||x - c_j||^2 (the centres centred
    on the domain's centre): no row of the declared domain is farther than sqrt(B) from its
    nearest released centre, so clipping a row's squared distance at B changes no row's term.

    For any weights lam on the simplex, min_j ||x - c_j||^2 <= sum_j lam_j ||x - c_j||^2
    = ||x||^2 - 2 x.c(lam) + sum_j lam_j ||c_j||^2 <= R^2 + 2R ||c(lam)|| + sum_j lam_j ||c_j||^2
    with c(lam) = sum_j lam_j c_j. The right side is convex in lam; Frank-Wolfe from the best
    vertex (which alone gives (R + min_j ||c_j||)^2) lowers it, and every iterate is a valid bound.
    With KMeans' centres on the Table I sets at d = 16 and 64 the result is within 2% of the
    largest distance a search over the sphere finds, and 1.1 to 1.7 R^2 against the worst case
    (2R)^2 = 4 R^2. It is never below R^2, so it is loose where many centres cover a
    low-dimensional ball (the true radius is then below R).

    B depends on the released centres and the declared radius only (post-processing). It is
    rounded up to LOSS_BOUND_GRID R^2 and capped at 4 R^2 (the distance of two points of the
    ball). The loss's sensitivity in grid units does not depend on it: privacy never rests on
    this bound being right, only the absence of clipping bias does.
    """
    R = float(radius)
    C = np.asarray(centred_centres, dtype=np.float64) / R  # in units of R
    if C.size == 0 or not np.all(np.isfinite(C)):
        return 4.0 * R * R
    sq = np.einsum("ij,ij->i", C, C)
    j = int(np.argmin(sq))
    mean = C[j].copy()  # c(lam)
    linear = float(sq[j])  # sum_j lam_j ||c_j||^2

    def value(m: np.ndarray, lin: float) -> float:
        return 1.0 + 2.0 * float(np.linalg.norm(m)) + lin

    best = value(mean, linear)
    for _ in range(LOSS_BOUND_STEPS):
        norm = float(np.linalg.norm(mean))
        gradient = sq + (2.0 * (C @ mean) / norm if norm > 0.0 else 0.0)
        j = int(np.argmin(gradient))
        step = C[j] - mean
        rise = float(sq[j]) - linear
        lo, hi = 0.0, 1.0  # the objective is convex along the step: ternary search
        for _ in range(40):
            a, b = lo + (hi - lo) / 3.0, hi - (hi - lo) / 3.0
            at_a = value(mean + a * step, linear + a * rise)
            if at_a <= value(mean + b * step, linear + b * rise):
                hi = b
            else:
                lo = a
        t = lo
        if t <= 0.0:
            break
        mean = mean + t * step
        linear = linear + t * rise
        best = min(best, value(mean, linear))
    # A relative margin covers the rounding of the sums above; then up to the grid.
    units = math.ceil(best * (1.0 + 1e-9) / LOSS_BOUND_GRID) * LOSS_BOUND_GRID
    return min(units, 4.0) * R * R


@dataclass(frozen=True)
class ExactSummary:
    """Exact statistics of the rows against the released centres (private: never released
    as such). `counts[j]` rows have centre j as their nearest; `loss_units` is the sum of their
    clipped squared distances in grid units of `bound` / 2^LOSS_GRID_BITS, `bound` being
    loss_bound(centres, R) (public)."""

    counts: np.ndarray
    loss_units: int
    bound: float


@dataclass(frozen=True)
class Summary:
    """The released summaries of a job's centres (post-processed integer releases).

    `sizes` are the noisy counts floored at 0; `loss` is the noisy loss sum over N~ (clamped to
    [0, B]), in squared units of the data; `loss_se` is the standard deviation of its noise,
    B * loss_sigma / N~ (public: it depends on the released centres, R, the sigma and N~ only),
    B = loss_bound(centres, R).
    """

    sizes: np.ndarray
    loss: float
    loss_se: float
    mu: float
    sizes_sigma: float
    loss_sigma: float


def _centred_centres(centers: np.ndarray, c: np.ndarray) -> np.ndarray:
    return np.asarray(centers, dtype=np.float64) - c


def _blocks(
    X: Any, centers: np.ndarray, radius: float, center: np.ndarray | None
) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """(clipped centred rows, their nearest centre, the centred centres) per block of X.

    Rows are clipped into the ball exactly as a job reads them (`prepare_rows`), so the nearest
    centre of a row is the one its job's summaries counted it for.
    """
    n_rows, _ = data_shape(X)
    for start in range(0, n_rows, BLOCK_ROWS):
        points, c = prepare_rows(X[start : start + BLOCK_ROWS], radius, center)
        centred = _centred_centres(centers, c)
        yield points, nearest_candidates(points, centred), centred


def nearest_centre_blocks(
    X: Any, centers: np.ndarray, *, radius: float, center: np.ndarray | None = None
) -> Iterator[np.ndarray]:
    """Each row's nearest released centre (int32, lowest index on ties), a block at a time.

    Post-processing of the released centres: it costs no budget, but the labels describe
    individual rows, so only the data's owner may see them.
    """
    for _, labels, _ in _blocks(X, centers, radius, center):
        yield labels.astype(np.int32)


def exact_summary(
    X: Any, centers: np.ndarray, *, radius: float, center: np.ndarray | None = None
) -> ExactSummary:
    """Per-centre counts and the clipped loss sum on its grid, read block by block. The clip
    comes from the centres and the domain alone (the domain's centre as `prepare_rows` takes
    it: the origin when `center` is None)."""
    k = len(centers)
    scale = 2.0**LOSS_GRID_BITS
    c = np.zeros(np.shape(centers)[1]) if center is None else np.asarray(center, dtype=np.float64)
    bound = loss_bound(_centred_centres(centers, c), radius)
    counts = np.zeros(k, dtype=np.int64)
    total = 0
    for points, labels, centred in _blocks(X, centers, radius, center):
        counts += np.bincount(labels, minlength=k).astype(np.int64)
        diff = points - centred[labels]
        squared = np.einsum("ij,ij->i", diff, diff)
        units = np.rint(np.minimum(squared / bound, 1.0) * scale).astype(np.int64)
        total += int(np.minimum(units, 2**LOSS_GRID_BITS).sum())
    return ExactSummary(counts=counts, loss_units=total, bound=bound)


def loss_sensitivity() -> float:
    """l2 sensitivity of the loss sum in grid units, under add/remove and replace-one alike:
    every row's term is an integer in [0, 2^LOSS_GRID_BITS]."""
    return float(2**LOSS_GRID_BITS)


def release_summary(
    exact: ExactSummary,
    *,
    mu: float,
    relation: str,
    n_public: int,
    rng: np.random.Generator,
) -> Summary:
    """The two integer releases of the summaries, `mu`-GDP together, and their post-processing.

    Sizes: counts + N(0, (S sigma_s)^2) per centre with S = 1 (sqrt(2) under replace-one).
    Loss: loss_units + N(0, (2^G sigma_l)^2). (sigma_s, sigma_l) = summary_sigmas(mu). The loss
    is then loss~ = noisy units x B / 2^G / N~ with B = exact.bound (public), so its standard
    error is B sigma_l / N~.
    """
    sizes_sigma, loss_sigma = summary_sigmas(mu)
    count_sensitivity = math.sqrt(2.0) if relation == "replace-one" else 1.0
    sizes = noise.integer_release(
        exact.counts, sensitivity=count_sensitivity, sigma=sizes_sigma, rng=rng
    )
    loss_sum = noise.integer_release(
        np.array([exact.loss_units], dtype=np.int64),
        sensitivity=loss_sensitivity(),
        sigma=loss_sigma,
        rng=rng,
    )
    bound = float(exact.bound)
    count = max(int(n_public), 1)
    unit = bound / 2.0**LOSS_GRID_BITS
    loss = min(max(float(loss_sum[0]) * unit / count, 0.0), bound)
    sizes = np.maximum(sizes, 0)
    sizes.flags.writeable = False
    return Summary(
        sizes=sizes,
        loss=loss,
        loss_se=bound * loss_sigma / count,
        mu=mu,
        sizes_sigma=sizes_sigma,
        loss_sigma=loss_sigma,
    )


def cluster_with_summaries(
    run: Callable[..., ClusteringResult],
    X: np.ndarray,
    k: int,
    *,
    algorithm: str,
    radius: float,
    center: np.ndarray | None,
    epsilon: float | None,
    delta: float | None,
    mu: float | None,
    iterations: int | None,
    rng: np.random.Generator | None,
    n_public: int | None,
    relation: str,
    summary_fraction: float | None = None,
    **options: Any,
) -> ClusteringResult:
    """`run` (privclust.clustering.cluster) with summaries: the centres are computed with
    remaining_after(mu, summary_mu) and then the summaries are released with summary_mu, so the
    whole is mu-GDP (the planner, plan_run(summaries=True), prices exactly this).

    PE-means' default T scales with epsilon: it is fixed here from the job's epsilon before the
    centres run on a mu, so the run is the one planned.
    """
    from privclust.clustering.params import default_pe_iterations

    job_mu, job_epsilon, job_delta = resolve_privacy(epsilon, delta, mu)
    mu_summary = summary_mu(job_mu, summary_fraction)
    n_rows, n_cols = data_shape(X)
    # The method "auto" will run, from public facts as the planner sees them (a library call
    # without a released count stands in k for N~: the count is released inside `run`).
    count = n_rows if relation == "replace-one" else max(int(n_public or k), 1)
    chosen = resolve_algorithm(algorithm, n_cols, n_rows=count, k=k, mu=job_mu)
    if iterations is None and chosen in ("pe-means", "pe-lloyd"):
        iterations = default_pe_iterations(n_cols, job_epsilon)
    # With a public count the method is fixed here, from the job's whole mu as the planner
    # chose it: "auto" inside `run` would see only the centres' part of the mu.
    known_count = n_public is not None or relation == "replace-one"
    result = run(
        X,
        k,
        algorithm=chosen if known_count else algorithm,
        radius=radius,
        center=center,
        mu=centres_mu(job_mu, mu_summary),
        iterations=iterations,
        rng=rng,  # None keeps the run's own choices (its secure generator, cached packings)
        n_public=n_public,
        relation=relation,
        **options,
    )
    exact = exact_summary(X, result.centers, radius=radius, center=center)
    noise_rng = job_generator(rng)  # the caller's (tests) or a fresh ChaCha20 from OS entropy
    summary = release_summary(
        exact,
        mu=mu_summary,
        relation=result.relation,
        n_public=result.n_public,
        rng=noise_rng,
    )
    return dataclasses.replace(
        result,
        mu=job_mu,
        epsilon=job_epsilon,
        delta=job_delta,
        sizes=summary.sizes,
        loss=summary.loss,
        loss_se=summary.loss_se,
        summary_mu=summary.mu,
    )


def suggest_k(ks: Sequence[int], losses: Sequence[float], ses: Sequence[float]) -> int:
    """The elbow of a sweep, from its noisy losses alone (post-processing).

    With the ks in increasing order, the suggestion is the smallest k_i that no larger k_j
    improves on by a clear margin:

        L_j >= (1 - ELBOW_DROP) * L_i - ELBOW_SE_MULTIPLIER * sqrt(SE_i^2 + SE_j^2)  for all j > i

    i.e. no larger k lowers the loss by more than 20% once two standard errors of noise are
    allowed for. The largest k always qualifies, so there is always an answer.
    """
    if not (len(ks) == len(losses) == len(ses)) or len(ks) == 0:
        raise ValueError("ks, losses and ses must be non-empty and of equal length")
    order = sorted(range(len(ks)), key=lambda i: ks[i])
    for pos, i in enumerate(order):
        margin_ok = all(
            losses[j]
            >= (1.0 - ELBOW_DROP) * losses[i] - ELBOW_SE_MULTIPLIER * math.hypot(ses[i], ses[j])
            for j in order[pos + 1 :]
        )
        if margin_ok:
            return int(ks[i])
    raise AssertionError("unreachable: the largest k always qualifies")  # pragma: no cover


@dataclass(frozen=True)
class SweepResult:
    """A private sweep over k: one summarised run per k (`results`, in the order of `ks`), each
    `job_mu`-GDP, composing with the sweep's own noisy count (`count_mu`, library runs without a
    public count) to at most `mu`. `suggested_k` is suggest_k on the noisy losses."""

    ks: tuple[int, ...]
    results: tuple[ClusteringResult, ...]
    suggested_k: int
    mu: float
    job_mu: float
    n_public: int
    relation: str
    count_mu: float | None


def check_ks(ks: Sequence[object]) -> tuple[int, ...]:
    """Distinct integers k >= 1, in increasing order (at least two, at most 32)."""
    values = [check_integer("k", k, 1) for k in ks]
    if not 2 <= len(values) <= 32:
        raise ClusteringInputError("k", f"a sweep needs 2 to 32 values of k, got {len(values)}")
    if len(set(values)) != len(values):
        raise ClusteringInputError("k", "the values of k must be distinct")
    return tuple(sorted(values))


def sweep(
    X: np.ndarray,
    ks: Sequence[int],
    *,
    radius: float,
    center: np.ndarray | None = None,
    algorithm: str = "auto",
    epsilon: float | None = None,
    delta: float | None = None,
    mu: float | None = None,
    n_public: int | None = None,
    relation: str = "add-remove",
    rng: np.random.Generator | None = None,
    run: Callable[..., ClusteringResult] | None = None,
    **options: Any,
) -> SweepResult:
    """Summarised runs of `run` for every k in `ks`, mu split equally (mu / sqrt(m) each).

    Without a public count under add/remove neighbours the sweep first releases one noisy count
    with COUNT_MU_FRACTION of mu (shared by every run) and splits the rest. `run` is
    privclust.clustering.cluster unless given; `options` are its other keyword arguments. Each run
    spends SWEEP_SUMMARY_FRACTION of its mu on its summaries unless `options` name another
    `summary_fraction`.
    """
    from privclust.clustering.params import plan_run

    if run is None:
        from privclust.clustering.dispatch import cluster

        run = cluster

    values = check_ks(ks)
    options.setdefault("summary_fraction", SWEEP_SUMMARY_FRACTION)
    n_rows, n_cols = data_shape(X)
    total_mu, _, _ = resolve_privacy(epsilon, delta, mu)
    for k in values:  # every argument checked before any noise is drawn
        if relation == "replace-one":
            stand_in = n_rows  # public under replace-one
        else:  # N is private: the released N~, or k itself before the sweep releases one
            stand_in = k if n_public is None else max(int(n_public), 1)
        plan_run(
            stand_in,
            n_cols,
            k,
            algorithm=algorithm,
            mu=total_mu,
            relation=relation,
            summaries=True,
            **{
                name: options[name]
                for name in ("iterations", "variations", "summary_fraction")
                if name in options
            },
        )
    noise_rng = job_generator(rng)
    count_mu = None
    budget = total_mu
    if relation != "replace-one" and n_public is None:
        count_mu = noise.COUNT_MU_FRACTION * total_mu
        n_public = max(noise.release_count(n_rows, count_mu, noise_rng), max(values))
        budget = remaining_after(total_mu, count_mu)
    job_mu = equal_share(budget, len(values))
    results = tuple(
        run(
            X,
            k,
            algorithm=algorithm,
            radius=radius,
            center=center,
            mu=job_mu,
            n_public=n_public,
            relation=relation,
            rng=rng,
            summaries=True,
            **options,
        )
        for k in values
    )
    losses = [float(r.loss) for r in results if r.loss is not None]
    ses = [float(r.loss_se) for r in results if r.loss_se is not None]
    return SweepResult(
        ks=values,
        results=results,
        suggested_k=suggest_k(values, losses, ses),
        mu=total_mu,
        job_mu=job_mu,
        n_public=results[0].n_public,
        relation=results[0].relation,
        count_mu=count_mu,
    )
