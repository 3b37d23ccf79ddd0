"""The run plan: everything a run will do that depends only on public inputs (its T, L, sigma and
releases), and the checks that come before any method is chosen.

Everything here depends only on public quantities (d, k, the caller's parameters and the
*public* row count: the noisy count N~ under add/remove neighbours, or the exact N when it was
declared public and neighbours replace one row), so a service can plan and price a job, and
reject bad parameters, before touching the data. The exact N of the rows is never an input.
A method adds its own part (privclust.clustering.run.method.plan_method).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from privclust.clustering.choices import RELATIONS, Relation
from privclust.clustering.errors import ClusteringInputError, check_integer, check_positive
from privclust.clustering.run.options import Budget, Budgeted, Options, budget_split, job_budget
from privclust.clustering.run.result import ClusteringResult, released_centres
from privclust.clustering.run.schedule import (
    LLOYD_STEP,
    VOTE_HISTOGRAM,
    Planned,
    ScheduledRelease,
    priced_releases,
)
from privclust.privacy.cost import release_cost
from privclust.privacy.gdp import remaining_after
from privclust.privacy.noise import MAX_NOISE_STD

# The smallest mu a plan's centres may share: below it, even one release of sensitivity 1 would
# need noise above MAX_NOISE_STD.
MIN_PLANNABLE_MU = 1.0 / MAX_NOISE_STD

# The default T grows with epsilon above 1 (the paper's rule); beyond this it stops growing, so a
# huge epsilon cannot plan a job of millions of iterations. The paper's largest setting
# (epsilon 4 at d = 64: 128 iterations) is well below it. An explicit `iterations` may go
# higher (the API allows up to 1000).
MAX_DEFAULT_ITERATIONS = 256
# The fewest variations L per centre a plan starts with; the evolution's adaptive rule never
# halves L below it (privclust.clustering.evolution.histogram.adapt_variations).
MIN_VARIATIONS = 4


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


def default_variations(n_rows: int, k: int, max_population: int) -> int:
    """L = max(floor(N / (5k)), 4), lowered so that (L+1)*k <= max_population (never below 4)."""
    heuristic = max(n_rows // (5 * k), MIN_VARIATIONS)
    capped = max(max_population // k - 1, MIN_VARIATIONS)
    return min(heuristic, capped)


def planned_iterations(options: Options, default: Callable[[], int]) -> int:
    """The caller's `iterations` (an integer >= 1), or the method's `default()`."""
    if options.iterations is None:
        return default()
    return check_integer("iterations", options.iterations, 1)


class Calibrated:
    """What a release's sensitivity depends on besides its statistic: the neighbours
    (`relation`, a plain value of a `Relation`)."""

    relation: str

    @property
    def count_sensitivity(self) -> float:
        """l2 sensitivity of a vector of counts (a vote histogram, per-cluster counts)."""
        return Relation(self.relation).count_sensitivity

    @property
    def sum_sensitivity_factor(self) -> float:
        """A sum of rows in a ball of radius R changes by R (add/remove) or 2R (replace-one)."""
        return Relation(self.relation).sum_sensitivity_factor


@dataclass(frozen=True)
class PlanBasis(Calibrated, Budgeted):
    """A plan's checked public inputs and the job's budget, before a method is chosen: the
    public row count, d and k, the neighbours; the job's budget (its mu, and its epsilon and
    delta when given); the part of mu the summaries spend (`summary_mu`), and what the
    centres may spend (`centres_mu`), of which `count_mu` goes to a noisy row count the run
    releases itself."""

    n_rows: int
    n_cols: int
    k: int
    max_population: int
    budget: Budget
    summary_mu: float | None
    centres_mu: float
    count_mu: float | None
    relation: str

    @property
    def releases_mu(self) -> float:
        """What the centres' Gaussian releases share: `centres_mu` less the run's own count."""
        if self.count_mu is None:
            return self.centres_mu
        return remaining_after(self.centres_mu, check_positive("count_mu", self.count_mu))


def vote_histograms(basis: Calibrated, iterations: int) -> Planned:
    """T PE-means iterations: one vote histogram each (count_sensitivity)."""
    return Planned(VOTE_HISTOGRAM, iterations, basis.count_sensitivity)


def plan_basis(
    n_rows: int, n_cols: int, k: int, options: Options, count_mu: float | None = None
) -> PlanBasis:
    """Check the arguments every plan shares, in this order, and split the job's mu.

    `n_rows` is the public row count (never the exact N under add/remove neighbours);
    `count_mu`, when given, is the part of the job's mu set aside for a noisy row count the run
    releases itself. With `options.summaries`, `summary_fraction` of mu (default
    SUMMARY_MU_FRACTION) goes to the private sizes and loss of
    privclust.clustering.outputs.summaries.
    """
    n_rows = check_integer("X", n_rows, 1)
    n_cols = check_integer("X", n_cols, 1)
    k = check_integer("k", k, 1)
    if options.relation not in RELATIONS:
        raise ClusteringInputError(
            "relation",
            f"relation must be one of {', '.join(RELATIONS)}, got {options.relation!r}",
        )
    if k > n_rows:
        raise ClusteringInputError(
            "k", f"k must be at most the dataset's public row count ({n_rows}), got {k}"
        )
    max_population = check_integer("max_population", options.max_population, 1)
    budget = job_budget(options)
    # what the centres' releases (and a count of their own) may use
    summary_mu, centres_mu = budget_split(budget.mu, options)
    _check_plannable(budget, centres_mu)
    relation = Relation(options.relation).value
    return PlanBasis(
        n_rows, n_cols, k, max_population, budget, summary_mu, centres_mu, count_mu, relation
    )


def _check_plannable(budget: Budget, centres_mu: float) -> None:
    """Refuse a budget too small to plan with: one release of sensitivity 1 needs noise of
    std at least 1/mu, and no noise above MAX_NOISE_STD can be drawn, so a mu below
    MIN_PLANNABLE_MU (or one that rounds to 0 once split) can never run."""
    if budget.mu >= MIN_PLANNABLE_MU and centres_mu >= MIN_PLANNABLE_MU:
        return
    raise ClusteringInputError(
        budget.field,
        f"the job's budget (mu={budget.mu:.3g}) is too small to plan with: every release would "
        f"need noise above {MAX_NOISE_STD:g}; a job needs a mu of at least "
        f"{MIN_PLANNABLE_MU:g} for its centres",
    )


@dataclass(frozen=True)
class Releases:
    """A method's part of a plan: its steps T (`iterations`), its releases in the order it
    makes them (`parts`, before sigma is known), the total its progress callbacks count to,
    and (HDPE-means, a projected pe-lloyd) the projection's dimension."""

    iterations: int
    parts: tuple[Planned, ...]
    progress_total: int
    projection_dim: int | None = None
    # pe-lloyd: the Lloyd steps of its second, split-merge start (0: none).
    second_start: int = 0

    @property
    def releases(self) -> int:
        """How many Gaussian releases of the plan's sigma its releases are priced as."""
        return priced_releases(self.parts)

    @property
    def lloyd_steps(self) -> int:
        """How many noisy Lloyd steps it takes before a second start (`lloyd_steps`, as a
        caller may give it): all of its Lloyd steps less the second start's."""
        return sum(p.times for p in self.parts if p.what == LLOYD_STEP) - self.second_start


# What a run's result says again of the plan it followed, under the same names (besides its
# cost, `release_cost`, and its public count, the plan's n_rows).
_SAID_AGAIN_BY_RESULT = (
    "algorithm",
    "iterations",
    "variations",
    "population_size",
    "projection_dim",
    "relation",
    "count_mu",
)


@dataclass(frozen=True)
class RunPlan(Calibrated):
    """Everything a run will do that depends only on public inputs.

    `n_rows` is the public row count the plan used (never the exact N under add/remove).
    `iterations` counts PE iterations (for HDPE-means, those in the projected space; for
    FastLloyd its Lloyd steps, each one joint release of noisy sums and counts);
    `releases` counts every Gaussian release (HDPE adds its noisy sums and counts as 2), and
    sqrt(releases)/sigma <= mu_releases <= mu; `count_mu` is the part of mu the run spent on its
    own noisy row count (library calls without a public count), else None, and
    sqrt(mu_releases^2 + count_mu^2) <= mu. Under `relation` "replace-one" every release is
    calibrated to its replace-one sensitivity (`count_sensitivity` sqrt(2) for a vote histogram
    or count vector, `sum_sensitivity_factor` 2 for a sum of rows). `progress_total` is the
    `total` passed to progress callbacks: the PE iterations, plus one final step for
    HDPE-means. `algorithm` and `relation` are plain values of an `Algorithm` and a `Relation`.

    `schedule` lists every release a run of the plan makes, in order
    (privclust.clustering.run.schedule): the run's own row count (with `count_mu`), the
    method's releases (their priced weights add up to `releases`), then the summaries' sizes
    and loss (with `summary_mu`); it composes to at most `mu` per row (the unit's mu is that
    times the contribution bound). `lloyd_steps` counts the noisy Lloyd steps among them
    (FastLloyd's T; pe-lloyd's steps after PE-means; 0 for the other methods). A plan made
    again from a stored job's figures (privclust.clustering.outputs.accuracy.plan_from) has
    neither.
    """

    algorithm: str
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
    relation: str = Relation.ADD_REMOVE.value
    count_mu: float | None = None
    # With summaries: the part of mu their two releases spend
    # (privclust.clustering.outputs.summaries);
    # `sigma` is then the centres' and sqrt(releases)/sigma is at most
    # remaining_after(mu, summary_mu) (less count_mu).
    summary_mu: float | None = None
    schedule: tuple[ScheduledRelease, ...] = ()
    # pe-lloyd: its Lloyd steps before a second start, and the Lloyd steps of its second,
    # split-merge start, 0 without one (privclust.clustering.mechanisms.candidates);
    # `progress_total` counts both.
    lloyd_steps: int = 0
    second_start: int = 0

    def scheduled(self, what: str) -> ScheduledRelease:
        """The first entry of the schedule that releases `what` (KeyError if none does)."""
        for entry in self.schedule:
            if entry.what == what:
                return entry
        raise KeyError(what)

    def epsilon_at(self, delta: float) -> float:
        """The epsilon the job is recorded at, at `delta`: the one it was given, or the
        smallest one its mu implies (privclust.clustering.run.options.accounting_epsilon)."""
        return Budget(self.mu, self.epsilon, self.delta).epsilon_at(delta)

    def result(
        self, centred: np.ndarray, center: np.ndarray, radius: float, final_variations: int
    ) -> ClusteringResult:
        """The run's outcome: `centred` centres released (`released_centres`: snapped to the
        grid R / 2^RELEASE_BITS, back in the original coordinates around `center`,
        read-only), and this plan."""
        return ClusteringResult(
            centers=released_centres(centred, center, radius),
            **release_cost(self),
            **{name: getattr(self, name) for name in _SAID_AGAIN_BY_RESULT},
            final_variations=final_variations,
            n_public=self.n_rows,
        )
