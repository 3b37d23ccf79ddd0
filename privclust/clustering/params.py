"""Validation of clustering arguments and the run plan: algorithm, T, L, sigma, releases.

Everything here depends only on public quantities (d, k, the caller's parameters and the
*public* row count: the noisy count N~ under add/remove neighbours, or the exact N when it was
declared public and neighbours replace one row), so a service can plan and price a job, and
reject bad parameters, before touching the data. The exact N of the rows is never an input.
"""

from __future__ import annotations

import math
import mmap
import numbers
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from privclust.clustering.auto import choose_algorithm
from privclust.clustering.errors import ClusteringInputError
from privclust.clustering.histogram import MIN_VARIATIONS
from privclust.clustering.result import Algorithm, ClusteringResult
from privclust.privacy.gdp import mu_from_epsilon_delta, noise_multiplier, remaining_after
from privclust.privacy.noise import (
    COUNT_MU_FRACTION,
    MAX_NOISE_STD,
    noise_std,
    release_count,
    secure_generator,
)

Relation = Literal["add-remove", "replace-one"]
RELATIONS: tuple[str, ...] = ("add-remove", "replace-one")
# Released centres are rounded, in centred coordinates, to multiples of R / 2^RELEASE_BITS
# (a relative precision of 2.3e-10 of the radius): no released digit is finer than that.
RELEASE_BITS = 32

AlgorithmChoice = Literal["auto", "pe-means", "hdpe-means", "fastlloyd", "lsh-coreset", "pe-lloyd"]
ALGORITHMS: tuple[str, ...] = (
    "auto",
    "pe-means",
    "hdpe-means",
    "fastlloyd",
    "lsh-coreset",
    "pe-lloyd",
)
DEFAULT_PROJECTION_DIM = 16
# HDPE-means's final noisy sums are priced, by default, as many releases as its PE iterations:
# half of the releases' mu^2 goes to the d-dimensional sums, whose noise otherwise dominates
# the loss (bench/RESULTS.md, "HDPE-means: the loss"). The published split is 1.
MAX_HDPE_SUM_WEIGHT = 10_000
# Cap on the default population (L+1)*k. L = N/(5k) grows with N; the cap leaves every data set
# up to N ~ 20,000 unchanged and keeps a million-row job fast (bench/RESULTS.md, "population cap").
DEFAULT_MAX_POPULATION = 8192
# The default T grows with epsilon above 1 (the paper's rule); beyond this it stops growing, so a
# huge epsilon cannot plan a job of millions of iterations. The paper's largest setting
# (epsilon 4 at d = 64: 128 iterations) is well below it. An explicit `iterations` may go
# higher (the API allows up to 1000).
MAX_DEFAULT_ITERATIONS = 256


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
    down by privclust.privacy.gdp; invalid epsilon/delta raise its PrivacyParameterError.
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


def resolve_algorithm(algorithm: str, n_cols: int, *, n_rows: int, k: int, mu: float) -> Algorithm:
    """The concrete algorithm for a choice: "auto" is `choose_algorithm(n_rows, n_cols, k, mu)`
    (privclust.clustering.auto) with the public row count and the job's mu; any other choice is
    itself."""
    if algorithm not in ALGORITHMS:
        raise ClusteringInputError(
            "algorithm", f"algorithm must be one of {', '.join(ALGORITHMS)}, got {algorithm!r}"
        )
    if algorithm == "auto":
        return choose_algorithm(n_rows, n_cols, k, mu)
    if algorithm in ("lsh-coreset", "fastlloyd"):
        return "lsh-coreset" if algorithm == "lsh-coreset" else "fastlloyd"
    if algorithm == "pe-lloyd":
        return "pe-lloyd"
    return "hdpe-means" if algorithm == "hdpe-means" else "pe-means"


def default_pe_iterations(n_cols: int, epsilon: float | None) -> int:
    """T = floor(4 sqrt(d)); T = floor(eps * floor(4 sqrt(d))) when eps > 1; at least 1, and
    at most MAX_DEFAULT_ITERATIONS.

    With only mu given there is no epsilon to scale by, so T = floor(4 sqrt(d)).
    """
    base = math.isqrt(16 * n_cols)  # exactly floor(4 * sqrt(d))
    if epsilon is not None and epsilon > 1.0:
        scaled = epsilon * base  # a float; may be huge (or inf) for an absurd epsilon
        base = MAX_DEFAULT_ITERATIONS if scaled >= MAX_DEFAULT_ITERATIONS else math.floor(scaled)
    return min(max(base, 1), MAX_DEFAULT_ITERATIONS)


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

    `n_rows` is the public row count the plan used (never the exact N under add/remove).
    `iterations` counts PE iterations (for HDPE-means, those in the projected space; for
    FastLloyd its Lloyd steps, each one joint release of noisy sums and counts);
    `releases` counts every Gaussian release (HDPE adds its noisy sums and counts as 2), and
    sqrt(releases)/sigma <= mu_releases <= mu; `count_mu` is the part of mu the run spent on its
    own noisy row count (library calls without a public count), else None, and
    sqrt(mu_releases^2 + count_mu^2) <= mu. Under `relation` "replace-one" every release is
    calibrated to its replace-one sensitivity (`sensitivity_scale` = sqrt(2) for a vote
    histogram or count vector, 2 for a sum of rows). `progress_total` is the `total` passed to
    progress callbacks: the PE iterations, plus one final step for HDPE-means.
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
    relation: Relation = "add-remove"
    count_mu: float | None = None
    # With summaries: the part of mu their two releases spend (privclust.clustering.summaries);
    # `sigma` is then the centres' and sqrt(releases)/sigma is at most
    # remaining_after(mu, summary_mu) (less count_mu).
    summary_mu: float | None = None

    @property
    def count_sensitivity(self) -> float:
        """l2 sensitivity of a vector of counts (a vote histogram, per-cluster counts)."""
        return math.sqrt(2.0) if self.relation == "replace-one" else 1.0

    @property
    def sum_sensitivity_factor(self) -> float:
        """A sum of rows in a ball of radius R changes by R (add/remove) or 2R (replace-one)."""
        return 2.0 if self.relation == "replace-one" else 1.0

    def result(
        self, centred: np.ndarray, center: np.ndarray, radius: float, final_variations: int
    ) -> ClusteringResult:
        """The run's outcome: `centred` centres snapped to the release grid R / 2^RELEASE_BITS,
        moved back to the original coordinates around `center` (read-only), and this plan.

        Snapping truncates towards the domain centre, so a centre inside the ball stays inside.
        """
        step = float(radius) * 2.0**-RELEASE_BITS
        centres = np.trunc(np.asarray(centred, dtype=np.float64) / step) * step + center
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
            n_public=self.n_rows,
            relation=self.relation,
            count_mu=self.count_mu,
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
    relation: str = "add-remove",
    count_mu: float | None = None,
    bits_per_level: int | None = None,
    sum_weight: int | None = None,
    step_fraction: float | None = None,
    count_share: float | None = None,
    summaries: bool = False,
    summary_fraction: float | None = None,
    lloyd_steps: int | None = None,
    lloyd_share: float | None = None,
) -> RunPlan:
    """Validate the non-data arguments of a run and fix its T, L, sigma and release count.

    `n_rows` is the public row count: the dataset's noisy count N~ (add/remove neighbours, the
    default) or the exact N only when it is public (`relation="replace-one"`). `count_mu`, when
    given, is a part of the job's mu set aside for a noisy row count the run releases itself;
    the Gaussian releases then share what is left. `iterations` overrides the default T (for
    HDPE-means: the PE iterations, default floor(4 sqrt(p)) - 2); `variations` overrides the
    initial L and must keep the population (L+1)*k within `max_population`. `projection_dim` is
    used by HDPE-means only (1 <= p <= max(d, 16)); for HDPE-means `sum_weight` prices its
    final noisy sums as that many releases (default: its PE iterations). For "lsh-coreset",
    `iterations` is the number of tree levels and `bits_per_level`/`sum_weight` are its own
    parameters (see privclust.clustering.lsh_coreset); `step_fraction` and `count_share` are
    FastLloyd's (privclust.clustering.fastlloyd). Neither has variations or a population.
    "pe-lloyd" plans PE-means's T and L as "pe-means" does, plus `lloyd_steps` Lloyd steps with
    `lloyd_share` of mu^2 (privclust.clustering.pe_lloyd).
    `summaries` sets `summary_fraction` of mu (default SUMMARY_MU_FRACTION) aside for the
    private sizes and loss of privclust.clustering.summaries; the centres share the rest.
    """
    n_rows = check_integer("X", n_rows, 1)
    n_cols = check_integer("X", n_cols, 1)
    k = check_integer("k", k, 1)
    if relation not in RELATIONS:
        raise ClusteringInputError(
            "relation", f"relation must be one of {', '.join(RELATIONS)}, got {relation!r}"
        )
    if k > n_rows:
        raise ClusteringInputError(
            "k", f"k must be at most the dataset's public row count ({n_rows}), got {k}"
        )
    max_population = check_integer("max_population", max_population, 1)
    job_mu, job_epsilon, job_delta = resolve_privacy(epsilon, delta, mu)
    summary_mu: float | None = None
    centres_budget = job_mu  # what the centres' releases (and a count of their own) may use
    if summaries:
        from privclust.clustering import summaries as summary_math  # lazy: it imports this module

        summary_mu = summary_math.summary_mu(job_mu, summary_fraction)
        centres_budget = summary_math.centres_mu(job_mu, summary_mu)
    resolved = resolve_algorithm(algorithm, n_cols, n_rows=n_rows, k=k, mu=job_mu)

    p: int | None = None
    if resolved == "fastlloyd":
        from privclust.clustering.fastlloyd import (  # lazy: that module imports this one
            DEFAULT_STEP_FRACTION,
            check_count_share,
            check_step_fraction,
            default_iterations,
        )

        alpha = check_step_fraction(
            DEFAULT_STEP_FRACTION if step_fraction is None else step_fraction
        )
        if count_share is not None:
            check_count_share(count_share)
        usable_mu = centres_budget
        if count_mu is not None:  # T is set by the mu the Lloyd steps share
            usable_mu = remaining_after(centres_budget, check_positive("count_mu", count_mu))
        pe_iterations = (
            default_iterations(n_rows, n_cols, k, usable_mu, alpha)
            if iterations is None
            else check_integer("iterations", iterations, 1)
        )
        # One joint release of the noisy offset sums and counts per Lloyd step.
        releases = progress_total = pe_iterations
    elif resolved == "hdpe-means":
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
        weight = check_integer("sum_weight", pe_iterations if sum_weight is None else sum_weight, 1)
        if weight > MAX_HDPE_SUM_WEIGHT:
            raise ClusteringInputError(
                "sum_weight", f"sum_weight must be at most {MAX_HDPE_SUM_WEIGHT}, got {weight}"
            )
        releases = pe_iterations + 1 + weight
        progress_total = pe_iterations + 1
    elif resolved == "lsh-coreset":
        from privclust.clustering.lsh_coreset import plan_lsh_releases  # it imports this module

        pe_iterations, releases, progress_total = plan_lsh_releases(
            iterations, bits_per_level, sum_weight
        )
    elif resolved == "pe-lloyd":
        from privclust.clustering.pe_lloyd import plan_lloyd_releases  # it imports this module

        pe_iterations = (
            default_pe_iterations(n_cols, job_epsilon)
            if iterations is None
            else check_integer("iterations", iterations, 1)
        )
        _, _, releases, progress_total = plan_lloyd_releases(
            pe_iterations, lloyd_steps, lloyd_share
        )
    else:
        pe_iterations = (
            default_pe_iterations(n_cols, job_epsilon)
            if iterations is None
            else check_integer("iterations", iterations, 1)
        )
        releases = pe_iterations
        progress_total = pe_iterations

    if resolved in ("lsh-coreset", "fastlloyd"):
        initial_l = 0
    elif variations is None:
        initial_l = default_variations(n_rows, k, max_population)
        if (initial_l + 1) * k > max_population:
            raise ClusteringInputError(
                "k",
                f"k = {k} needs a population of at least {(initial_l + 1) * k} candidates "
                f"({MIN_VARIATIONS} variations per centre, plus the centre); the limit is "
                f"{max_population}, so k can be at most {max_population // (MIN_VARIATIONS + 1)} "
                "with the default variations",
            )
    else:
        initial_l = check_integer("variations", variations, 1)
        if (initial_l + 1) * k > max_population:
            raise ClusteringInputError(
                "variations",
                f"variations gives a population of {(initial_l + 1) * k} candidates; the "
                f"limit is {max_population} ((variations + 1) * k)",
            )

    releases_mu = centres_budget
    if count_mu is not None:
        releases_mu = remaining_after(centres_budget, check_positive("count_mu", count_mu))
    sigma = noise_multiplier(releases_mu, releases)
    if not math.sqrt(releases) / sigma <= releases_mu:  # guaranteed by noise_multiplier
        raise ArithmeticError("noise multiplier does not meet the requested mu")
    run_plan = RunPlan(
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
        population_size=0 if resolved in ("lsh-coreset", "fastlloyd") else (initial_l + 1) * k,
        projection_dim=p,
        progress_total=progress_total,
        relation="replace-one" if relation == "replace-one" else "add-remove",
        count_mu=count_mu,
        summary_mu=summary_mu,
    )
    largest = largest_noise_std(run_plan, count_share)
    if not largest <= MAX_NOISE_STD:
        raise ClusteringInputError(
            "mu" if mu is not None else "epsilon",
            f"this privacy budget is too small for {resolved}: one of its releases would need "
            f"noise of standard deviation {largest:.3g}, above the limit of {MAX_NOISE_STD:g}",
        )
    return run_plan


def largest_noise_std(plan: RunPlan, count_share: float | None = None) -> float:
    """An upper bound on the noise std of every release a run of `plan` draws (public inputs
    only), so that a job the noise could never serve (`noise.MAX_NOISE_STD`) is refused when
    it is planned, before anything is charged, not when it runs. Each release's std is its
    sensitivity x sigma; the noisy sums' sensitivities are divided by sqrt(weight) >= 1 in the
    runs, which this bound leaves out."""
    # lazy: these modules import this one
    from privclust.clustering.fastlloyd import (
        count_multiplier,
        default_count_share,
        joint_sensitivity,
    )
    from privclust.clustering.hdpe import grid_sensitivity
    from privclust.clustering.summaries import loss_sensitivity, summary_sigmas

    d = plan.n_cols
    sensitivity = plan.count_sensitivity  # vote histograms, counts, tree levels
    if plan.algorithm in ("hdpe-means", "lsh-coreset"):
        sums = plan.sum_sensitivity_factor * grid_sensitivity(d)
        sensitivity = max(sensitivity, sums)
    if plan.algorithm in ("fastlloyd", "pe-lloyd"):
        share = default_count_share(d) if count_share is None else count_share
        joint = joint_sensitivity(plan, d, count_multiplier(d, share))
        sensitivity = max(sensitivity, joint)
    # As the releases compute them (noise_std rounds each product up).
    largest = noise_std(sensitivity, plan.sigma)
    if plan.count_mu is not None:  # the run's own noisy row count
        largest = max(largest, noise_multiplier(plan.count_mu, 1))
    if plan.summary_mu is not None:
        sizes_sigma, loss_sigma = summary_sigmas(plan.summary_mu)
        largest = max(
            largest,
            noise_std(plan.count_sensitivity, sizes_sigma),
            noise_std(loss_sensitivity(), loss_sigma),
        )
    return largest


def plan_for_rows(
    n_rows: int,
    *,
    k: int,
    n_public: int | None,
    relation: str,
    rng: np.random.Generator,
    plan: Callable[[int, float | None], RunPlan],
) -> RunPlan:
    """The plan of a library run on N rows, choosing the public row count it may use.

    `plan(count, count_mu)` is plan_run with every other argument bound.
    - `relation="replace-one"`: N is public; the plan uses it exactly (`n_public` must be None
      or N).
    - add/remove with `n_public` (the dataset's released N~): the plan uses max(N~, 1).
    - add/remove without one: the run first releases its own N~ = N + round(N(0, 1/mu_c^2)),
      with mu_c = COUNT_MU_FRACTION of the job's mu, and plans with max(N~, k) (a k above N~ is
      not an error here, since every argument was already validated before that release; the
      clamp is post-processing). The plan records mu_c as `count_mu`.
    Every argument is validated (with a stand-in count) before any noise is drawn.
    """
    if relation == "replace-one":
        if n_public is not None and int(n_public) != n_rows:
            raise ClusteringInputError(
                "n_public", "under replace-one neighbours the public count is the exact N"
            )
        return plan(n_rows, None)
    if n_public is not None:
        return plan(max(check_integer("n_public", n_public, -(2**62)), 1), None)
    count_mu = COUNT_MU_FRACTION * plan(max(int(k), 1), None).mu
    return plan(max(release_count(n_rows, count_mu, rng), int(k)), count_mu)


@dataclass(frozen=True)
class RunStart:
    """What every method starts from: the centred, clipped rows, the domain centre, the plan
    (with the public count) and the job's generator."""

    points: np.ndarray
    center: np.ndarray
    plan: RunPlan
    rng: np.random.Generator


def start_run(
    X: np.ndarray,
    k: int,
    *,
    radius: float,
    center: np.ndarray | None,
    n_public: int | None,
    relation: str,
    rng: np.random.Generator | None,
    dtype: type[np.floating[Any]] = np.float64,
    **plan_options: Any,
) -> RunStart:
    """The common start of a run, in the order that keeps it private: validate X and the
    domain and clip the rows (`prepare_rows`), take the job's generator (`job_generator`), then
    plan with the public row count (`plan_for_rows`: no noise is drawn before every argument is
    validated). `plan_options` are plan_run's keyword arguments (algorithm, epsilon, ...);
    `dtype` is that of the working copy of the rows (float32 halves it where only votes read it)."""
    n_rows, n_cols = data_shape(X)
    points, c = prepare_rows(X, radius, center, dtype=dtype)
    noise_rng = job_generator(rng)
    plan = plan_for_rows(
        n_rows,
        k=k,
        n_public=n_public,
        relation=relation,
        rng=noise_rng,
        plan=lambda count, count_mu: plan_run(
            count, n_cols, k, relation=relation, count_mu=count_mu, **plan_options
        ),
    )
    return RunStart(points=points, center=c, plan=plan, rng=noise_rng)


def job_generator(rng: np.random.Generator | None) -> np.random.Generator:
    """The caller's generator (tests and benchmarks only), else a ChaCha20 one from OS entropy."""
    return rng if rng is not None else secure_generator()


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


_SHRINK = 1.0 - 4.0 * float(np.finfo(np.float64).eps)
# A float32 working copy is used only for radii in this range (a public choice): beyond it a
# clipped row could overflow float32 (max 3.4e38) or lose its digits below float32's normal
# range (1.2e-38), while the declared domain allows radii from 1e-100 to 1e100.
FLOAT32_RADII = (1e-30, 1e30)


def clip_into_ball(block: np.ndarray, c: np.ndarray, radius: float) -> bool:
    """Clip the rows of `block` (original coordinates, any finite values) into the ball, in place:
    x <- c + (x - c) * min(1, R / ||x - c||), a hair inside the sphere. Whether any row changed.

    Total: the difference is formed at half scale (x/2 - c/2 cannot overflow), and a row found
    outside is divided by its largest coordinate before its norm is taken, so nothing overflows
    or vanishes for any finite row, centre and radius; rows inside are not touched at all.
    """
    with np.errstate(over="ignore"):  # a far-out row's scaled norm may be inf: still outside
        half = block * 0.5 - c * 0.5
        scaled = half / (radius * 0.5)
        outside = np.sqrt(np.einsum("ij,ij->i", scaled, scaled)) > 1.0
    if not outside.any():
        return False
    u = half[outside]
    u /= np.abs(u).max(axis=1)[:, None]
    factor = radius / np.sqrt(np.einsum("ij,ij->i", u, u)) * _SHRINK
    block[outside] = u * factor[:, None] + c
    return True


def prepare_rows(
    X: object,
    radius: float,
    center: object | None,
    *,
    dtype: type[np.floating[Any]] = np.float64,
) -> tuple[np.ndarray, np.ndarray]:
    """(rows centred on c and clipped into the ball of radius R, c): the rows as `dtype`
    (clipped in float64 first; float64 whatever `dtype` when R is outside FLOAT32_RADII, so
    that no row in the domain overflows or underflows), c as float64.

    X is read in blocks and never written (it may be a read-only memmap); the result is the one
    N x d working copy. Rows farther than R from c are clipped radially onto the sphere
    (`clip_into_ball`, which cannot overflow), then centred, a hair inside so that rounding can
    never leave a norm above R (the sensitivity of HDPE's noisy sums). The only data-dependent
    error is a non-finite value, which an ingested dataset never has.
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
    if not (np.isfinite(c - radius).all() and np.isfinite(c + radius).all()):
        raise ClusteringInputError("center", "center +- radius must be finite")
    if not FLOAT32_RADII[0] <= radius <= FLOAT32_RADII[1]:
        dtype = np.float64
    out = np.empty((n_rows, n_cols), dtype=dtype)
    block_rows = max(1, (1 << 20) // n_cols)
    for start in range(0, n_rows, block_rows):
        block = np.array(source[start : start + block_rows], dtype=np.float64)
        release_pages(source, start, start + block_rows)
        if not np.isfinite(block).all():
            row, col = np.argwhere(~np.isfinite(block))[0]
            raise ClusteringInputError(
                "X", f"X has a non-finite value at row {start + row}, column {col}"
            )
        clip_into_ball(block, c, radius)
        block -= c  # finite: every row is now within R of c, and c +- R is finite
        # Centring rounds at the scale of |c|: put any row it left a hair outside back in.
        scaled = block / radius
        norms = np.sqrt(np.einsum("ij,ij->i", scaled, scaled)) * radius
        outside = norms > radius
        if outside.any():
            block[outside] *= (radius / norms[outside] * _SHRINK)[:, None]
        out[start : start + block_rows] = block
    return out, c


def release_pages(source: np.ndarray, start: int, stop: int) -> None:
    """Drop rows start..stop of a memory-mapped `source` from this process's resident set.

    Reading a memory-mapped dataset maps its pages into the process, where they count as
    resident until unmapped; a job reads each row once into its working copy, so dropping the
    pages behind it keeps the peak resident size near the working copy alone (the kernel keeps
    them in its page cache). A no-op for anything that is not a read-only file mapping."""
    if not isinstance(source, np.memmap) or source.flags.writeable:
        return
    mapping = getattr(source, "_mmap", None)
    if mapping is None or not hasattr(mapping, "madvise") or not source.flags.c_contiguous:
        return
    row_bytes = source.strides[0]
    base = np.frombuffer(mapping, dtype=np.uint8).ctypes.data
    first = source.ctypes.data - base + start * row_bytes
    last = source.ctypes.data - base + min(stop, source.shape[0]) * row_bytes
    page = mmap.PAGESIZE
    first = (first + page - 1) // page * page  # whole pages only: never a neighbour's row
    last = last // page * page
    if last > first:
        mapping.madvise(mmap.MADV_DONTNEED, first, last - first)
