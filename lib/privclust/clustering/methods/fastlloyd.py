"""FastLloyd (Diaa, Humphries and Kerschbaum): noisy Lloyd steps with radius-constrained,
relative centroid updates, on privclust's ball domain.

Only the central model is implemented: the paper's federated protocol (masked secure
aggregation between clients and a server) is out of scope, since a privclust job sees all of a
dataset's rows; what remains is its differentially private k-means mechanism.

The run (centred coordinates, every row of norm <= R):

- Initial centres: a sphere packing of k points in the ball (public randomness, no data).
- T iterations. In iteration t every row is labelled with its nearest current centre mu_j, and
  contributes v = clip(x - mu_j, r_t): its offset from that centre, shortened to the step radius
  r_t when longer. Per cluster the offsets are summed exactly on the grid r_t / 2^20 (int64)
  and the rows counted; the sums and the counts are released together as ONE integer Gaussian
  release (privclust.clustering.mechanisms.lloyd.joint_noise), and the centre moves to
  mu_j + noisy sum / noisy count, the move shortened to r_t and the result projected into the
  ball (post-processing).
- Step radii (the paper's "diagonal, then fraction" schedule with the ball's radius in place of
  the box's half diagonal): r_1 = R, and r_t = min(R, alpha R / k^(1/d)) for t >= 2, with
  alpha = `step_fraction` (default 2, the paper's). Offsets of norm <= r_t make the sum's l2
  sensitivity r_t (<= R) under add/remove neighbours, however large the cluster.
- Budget split between sums and counts: the paper's share 1 / (1 + sqrt(4d)) of each
  iteration's budget for the counts, as a sensitivity scaling inside the one release
  (privclust.clustering.mechanisms.lloyd). Every release of the run shares sigma = sqrt(T) / mu.
- T (the paper's rule, Su et al.'s error bound with its step radius): the largest T whose
  expected centroid error stays below 0.004, 0.016 N~^2 mu^2 / (k^3 eta^2 (1 + sqrt(4d))^2)
  with eta = r_2 / R, truncated to [2, 7]. Only public values enter: N~, d, k, mu.
- Beyond the paper (post-processing, `reseed_ratio`, on by default): between steps a centre
  whose noisy count is at least 4 times smaller than the largest one's is moved next to that
  crowded centre, so the next step splits it (`reseed_starving`). Lloyd's algorithm from a
  data-independent start otherwise stays in local optima where one centre holds two clusters.

The published code works on the box [-1, 1]^d; on privclust that is the ball of its half
diagonal, radius sqrt(d) (declared per-column bounds become that ball), and a row's offsets and
the noise then scale with sqrt(d) R instead of R. bench/RESULTS.md ("FastLloyd") measures both.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Unpack

import numpy as np

from privclust.clustering.choices import Algorithm
from privclust.clustering.errors import ClusteringInputError, check_below_one, check_positive
from privclust.clustering.evolution.packing import initial_population
from privclust.clustering.mechanisms.lloyd import (
    NoisyLloyd,
    count_multiplier,
    default_count_share,
    lloyd_steps_part,
    reseed_starving,
    step_radius,
)
from privclust.clustering.run.method import Method, RunStart
from privclust.clustering.run.options import (
    DEFAULT_STEP_FRACTION,
    Options,
    RunKeywords,
    options_for,
)
from privclust.clustering.run.plan import PlanBasis, Releases, planned_iterations
from privclust.clustering.run.result import ClusteringResult, Outcome
from privclust.clustering.run.runner import run_method

MIN_ITERATIONS = 2
MAX_ITERATIONS = 7
# Su et al.'s bound on the total squared centroid error of one iteration, as the paper uses it.
ERROR_BOUND = 0.004
# Wide enough for any sensible tuning, narrow enough that every step radius and grid factor
# stays a normal float for every admissible radius and k.
STEP_FRACTION_RANGE = (1e-6, 1e6)


def check_step_fraction(value: object) -> float:
    """`step_fraction` as a float in STEP_FRACTION_RANGE, or ClusteringInputError."""
    alpha = check_positive("step_fraction", value)
    low, high = STEP_FRACTION_RANGE
    if not low <= alpha <= high:
        raise ClusteringInputError(
            "step_fraction", f"step_fraction must be in [{low:g}, {high:g}], got {alpha!r}"
        )
    return alpha


def check_reseed_ratio(value: object) -> float:
    """`reseed_ratio` as a finite float > 1, or ClusteringInputError."""
    ratio = check_positive("reseed_ratio", value)
    if not ratio > 1.0:
        raise ClusteringInputError("reseed_ratio", f"reseed_ratio must exceed 1, got {ratio!r}")
    return ratio


def default_iterations(n_rows: int, n_cols: int, k: int, mu: float, step_fraction: float) -> int:
    """The paper's T: floor(0.016 N~^2 mu^2 / (k^3 eta^2 (1 + sqrt(4d))^2)) within [2, 7], with
    eta = r_2 / R, the step radius in units of the domain's radius."""
    eta = step_radius(2, 1.0, n_cols, k, step_fraction)
    # In logarithms: mu may be as large as the largest float, and mu^2 would overflow.
    log_bound = (
        math.log(4.0 * ERROR_BOUND)
        + 2.0 * (math.log(n_rows) + math.log(mu))
        - 3.0 * math.log(k)
        - 2.0 * math.log(eta)
        - 2.0 * math.log1p(math.sqrt(4.0 * n_cols))
    )
    if log_bound >= math.log(MAX_ITERATIONS):
        return MAX_ITERATIONS
    return max(math.floor(math.exp(log_bound)), MIN_ITERATIONS)


def plan(basis: PlanBasis, options: Options) -> Releases:
    """T Lloyd steps, each one joint release of the noisy offset sums and counts; T by the
    paper's rule from the mu the steps share (`default_iterations`)."""
    alpha = check_step_fraction(
        DEFAULT_STEP_FRACTION if options.step_fraction is None else options.step_fraction
    )
    share = options.count_share
    if share is not None:
        share = check_below_one("count_share", share)
    usable_mu = basis.releases_mu  # T is set by the mu the Lloyd steps share
    iterations = planned_iterations(
        options,
        lambda: default_iterations(basis.n_rows, basis.n_cols, basis.k, usable_mu, alpha),
    )
    return Releases(
        iterations=iterations,
        parts=(lloyd_steps_part(basis, basis.n_cols, iterations, share),),
        progress_total=iterations,
    )


def prepare(options: Options) -> Options:
    """`reseed_ratio` checked (None: never reseed) before the run starts."""
    ratio = options.reseed_ratio
    return dataclasses.replace(
        options, reseed_ratio=None if ratio is None else check_reseed_ratio(ratio)
    )


def run(start: RunStart, options: Options) -> Outcome:
    """T noisy Lloyd steps from a data-independent packing of k centres."""
    points, plan, radius = start.points, start.plan, start.radius
    n_cols = points.shape[1]
    alpha = check_step_fraction(options.step_fraction)
    share = (
        default_count_share(n_cols)
        if options.count_share is None
        else check_below_one("count_share", options.count_share)
    )
    lloyd = NoisyLloyd(points, plan, radius, count_multiplier(n_cols, share), start.rng)
    centres = initial_population(plan.k, n_cols, radius, options.rng)
    moved: tuple[float, float] | None = None
    for t in range(1, plan.iterations + 1):
        step = step_radius(t, radius, n_cols, plan.k, alpha)
        centres, noisy_counts, moved = lloyd.step(centres, step)
        if options.reseed_ratio is not None and t < plan.iterations:
            centres = reseed_starving(
                centres, noisy_counts, options.reseed_ratio, step, radius, start.rng
            )
        options.report(t, plan.progress_total)
    return Outcome(centres=centres, last_move=moved)


METHOD = Method(
    name=Algorithm.FASTLLOYD,
    plan=plan,
    run=run,
    prepare=prepare,
)


class FastLloydKeywords(RunKeywords, total=False):
    """fastlloyd's keywords: its step radii, the counts' share of mu, and reseeding."""

    step_fraction: float
    count_share: float | None
    reseed_ratio: float | None


def fastlloyd(X: np.ndarray, k: int, **keywords: Unpack[FastLloydKeywords]) -> ClusteringResult:
    """Differentially private k-means centres of X by FastLloyd (central model); mu-GDP.

    Rows are clipped into the ball of `radius` around `center` (the origin when None); privacy
    is (epsilon, delta) or mu, under add/remove neighbours by default, with `n_public` the
    dataset's released N~ (without it the run releases its own from a tenth of mu), or N
    public under `relation="replace-one"`, exactly as for pe_means. T defaults to the paper's
    rule (2..7, see `default_iterations`); `step_fraction` is the paper's alpha
    (r_t = min(R, alpha R / k^(1/d)) after the first step); `count_share` the share of each
    release's budget given to the counts (default 1 / (1 + sqrt(4d))); `reseed_ratio` the count
    ratio at which a starving centre is moved to split a crowded one (None: never, as in the
    paper). `progress(t, T)` is called after each iteration and anything it raises propagates.
    `rng` is for tests only: by default every random number comes from ChaCha20.
    """
    return run_method(METHOD, X, k, options_for(FastLloydKeywords, keywords))
