"""What a caller asks of a run or a plan, as one frozen object (`Options`), with the defaults a
caller gets, and its privacy budget: resolved once (`resolved`), scaled to one row for a
privacy unit of up to m rows (`per_row_options`), and split between the summaries and the
centres (`budget_split`).

The public entry points (cluster, plan_run, sweep, pe_means, hdpe_means, fastlloyd, lsh_coreset,
pe_lloyd) keep their keyword signatures and build an `Options` once; the library passes it on
whole. Validation is the plan's (privclust.clustering.run.plan) and the methods', at the moments
that keep a run private: every argument before any noise is drawn.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import TYPE_CHECKING, Any, Required, TypedDict, TypeVar

import numpy as np

from privclust.clustering.choices import Algorithm, Relation
from privclust.clustering.errors import ClusteringInputError, check_integer, check_positive
from privclust.privacy.gdp import epsilon_from_mu_delta, mu_from_epsilon_delta, remaining_after

if TYPE_CHECKING:
    from privclust.clustering.data.scaling import Box

# progress(t, total): called after each step of a run; anything it raises stops the run.
Progress = Callable[[int, int], object]

DEFAULT_PROJECTION_DIM = 16
# Cap on the default population (L+1)*k. L = N/(5k) grows with N; the cap leaves every data set
# up to N ~ 20,000 unchanged and keeps a million-row job fast (bench/RESULTS.md, "population cap").
DEFAULT_MAX_POPULATION = 8192
# FastLloyd's alpha: step radii r_t = min(R, alpha R / k^(1/d)) after the first step (the
# paper's value).
DEFAULT_STEP_FRACTION = 2.0
# A centre whose noisy count is this many times smaller than another's is moved to split that
# one (lloyd.reseed_starving); measured in bench/RESULTS.md ("FastLloyd").
DEFAULT_RESEED_RATIO = 4.0
# k-means++ restarts of the LSH coreset's final weighted k-means.
DEFAULT_CORESET_RESTARTS = 10
# pe-lloyd's Lloyd-step clipping radius: per cluster, from the distances between the released
# centres (lloyd_chain.step_radii).
DEFAULT_STEP_RULE = "centres"


@dataclass(frozen=True)
class Budget:
    """A job's budget, resolved once (`resolve_privacy`): its mu, and the epsilon and delta it
    was given as (both None for a job given as mu). PE-means' default T grows with that
    epsilon; the ledger records `epsilon_at` a delta."""

    mu: float
    epsilon: float | None = None
    delta: float | None = None

    @property
    def field(self) -> str:
        """The request field the budget came in: a refusal of the budget names it."""
        return "mu" if self.epsilon is None else "epsilon"

    def epsilon_at(self, delta: float) -> float:
        """The epsilon the budget is recorded at, at `delta` (`accounting_epsilon`)."""
        return accounting_epsilon(self.mu, self.epsilon, delta)


class Budgeted:
    """A record that carries a job's resolved `budget` (a plan's basis, a sweep's split) and
    reads its mu, epsilon and delta from there, never from a second copy."""

    budget: Budget

    @property
    def mu(self) -> float:
        return self.budget.mu

    @property
    def epsilon(self) -> float | None:
        return self.budget.epsilon

    @property
    def delta(self) -> float | None:
        return self.budget.delta


@dataclass(frozen=True, eq=False)
class Options:
    """Everything a run or a plan is asked for besides the rows and k, as the caller gave it.

    The defaults are the public functions' defaults; None for a method's parameter means that
    method's default (see the method). `rng` is for tests and benchmarks only: without it every
    random number of a job comes from a ChaCha20 generator keyed from OS entropy.
    """

    algorithm: str = Algorithm.AUTO
    # The declared domain: the ball of `radius` around `center` (the origin when None). A plan
    # reads neither.
    radius: float | None = None
    center: np.ndarray | None = None
    # The budget: (epsilon, delta) or mu, exactly one, as the caller gave it; `budget` is it
    # resolved, once per job (`resolved`), and what every part of the job reads (`job_budget`).
    epsilon: float | None = None
    delta: float | None = None
    mu: float | None = None
    budget: Budget | None = None
    # The dataset's public row count N~ (None: the run releases its own) and the neighbours.
    n_public: int | None = None
    relation: str = Relation.ADD_REMOVE
    # T (PE iterations, Lloyd steps or tree levels), L and the population's cap.
    iterations: int | None = None
    variations: int | None = None
    max_population: int = DEFAULT_MAX_POPULATION
    # HDPE-means: the projection's dimension p; HDPE-means and the LSH coreset: how many
    # releases their noisy sums are priced as.
    projection_dim: int | None = DEFAULT_PROJECTION_DIM
    sum_weight: int | None = None
    # The LSH coreset's tree.
    bits_per_level: int | None = None
    min_count: int | None = None
    branch_count: int | None = None
    restarts: int = DEFAULT_CORESET_RESTARTS
    # FastLloyd (reseed_ratio None: never reseed).
    step_fraction: float | None = DEFAULT_STEP_FRACTION
    count_share: float | None = None
    reseed_ratio: float | None = DEFAULT_RESEED_RATIO
    # pe-lloyd's Lloyd steps.
    lloyd_steps: int | None = None
    lloyd_share: float | None = None
    step_rule: str = DEFAULT_STEP_RULE
    # pe-lloyd's second, split-merge start: its Lloyd steps (None: the default rule, 0: none).
    second_start: int | None = None
    # The centres' private sizes and loss (privclust.clustering.outputs.summaries), paid out of mu.
    summaries: bool = False
    summary_fraction: float | None = None
    rng: np.random.Generator | None = None
    progress: Progress | None = None
    # A box domain (privclust.clustering.data.scaling.Box): the rows are clipped into it and mapped
    # into the scaled space, where `radius` and `center` are the ball around the unit box.
    box: Box | None = None
    # A run that releases its own row count refuses a k above it (the CLI's and the estimator's
    # runs, as the service refuses a k above a dataset's released count); without it the plan
    # uses max(N~, k).
    check_k: bool = False
    # The privacy unit's contribution bound m: neighbours differ by one unit's rows (at most m),
    # so every release runs at the per-row mu / m (`per_row_options`). 1: one row.
    contribution_bound: int = 1

    def report(self, done: int, total: int) -> None:
        """Tell the caller's `progress`, when there is one, that `done` of a run's `total`
        steps are done."""
        if self.progress is not None:
            self.progress(done, total)


class BudgetChoiceError(ClusteringInputError):
    """Not exactly one of (epsilon, delta) and mu was given: a caller with its own field names
    (the service) maps this one refusal to its own message."""


def check_budget_choice(epsilon: float | None, delta: float | None, mu: float | None) -> None:
    """The one check that a job's budget is given exactly one way: (epsilon, delta) or mu.

    Raises BudgetChoiceError for both or neither, ClusteringInputError for a delta without an
    epsilon or an epsilon without a delta."""
    if mu is not None:
        if epsilon is not None or delta is not None:
            raise BudgetChoiceError("mu", "give either (epsilon, delta) or mu, not both")
        return
    if epsilon is None:
        if delta is not None:
            raise ClusteringInputError("epsilon", "delta was given without epsilon")
        raise BudgetChoiceError("epsilon", "give either (epsilon, delta) or mu")
    if delta is None:
        raise ClusteringInputError("delta", "epsilon needs a delta (or give mu instead)")


def resolve_privacy(epsilon: float | None, delta: float | None, mu: float | None) -> Budget:
    """The `Budget` of a job from exactly one of (epsilon, delta) or mu
    (`check_budget_choice`).

    mu for (epsilon, delta) is the largest mu-GDP guarantee implying (epsilon, delta)-DP, rounded
    down by privclust.privacy.gdp; invalid epsilon/delta raise its PrivacyParameterError. A job
    given as mu keeps epsilon None here: PE-means' default T grows with a given epsilon only
    (`accounting_epsilon` is the one a ledger records)."""
    check_budget_choice(epsilon, delta, mu)
    if mu is not None:
        return Budget(check_positive("mu", mu))
    assert epsilon is not None and delta is not None  # check_budget_choice
    return Budget(mu_from_epsilon_delta(epsilon, delta), float(epsilon), float(delta))


def job_budget(options: Options) -> Budget:
    """The job's budget: the one it was resolved to (`resolved`), or, for a run that was not
    (a method's own function), its caller's budget resolved now, the one time it is read."""
    if options.budget is not None:
        return options.budget
    return resolve_privacy(options.epsilon, options.delta, options.mu)


def resolved(options: Options) -> Options:
    """`options` with its budget resolved, so that no later part of the job resolves it again."""
    if options.budget is not None:
        return options
    return dataclasses.replace(options, budget=job_budget(options))


def with_budget(options: Options, budget: Budget) -> Options:
    """`options` for a part of the job that spends `budget` (the centres' share, what a count
    leaves), the caller's own figures cleared so that only `budget` can be read."""
    return dataclasses.replace(options, epsilon=None, delta=None, mu=budget.mu, budget=budget)


def accounting_epsilon(mu: float, epsilon: float | None, delta: float) -> float:
    """The epsilon a job's budget is recorded at, at `delta`: the one it was given, or, for a
    job given as mu, the smallest epsilon mu-GDP implies (rounded up by privclust.privacy.gdp).
    Accounting only: a run's plan keeps the epsilon it was given (`resolve_privacy`)."""
    return float(epsilon) if epsilon is not None else epsilon_from_mu_delta(mu, delta)


# --- The summaries' share -------------------------------------------------------------------

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


def budget_split(mu: float, options: Options) -> tuple[float | None, float]:
    """(summary_mu, centres_mu) of a job of `mu`: with `options.summaries`, `summary_fraction`
    of it (default SUMMARY_MU_FRACTION) for the private sizes and loss and what that leaves for
    the centres (`remaining_after`); without, (None, mu). The one split of a job's budget: its
    plan and its run read it here."""
    if not options.summaries:
        return None, mu
    fraction = options.summary_fraction
    share = SUMMARY_MU_FRACTION if fraction is None else float(fraction)
    if not (math.isfinite(share) and 0.0 < share < 1.0):
        raise ClusteringInputError(
            "summary_fraction", f"summary_fraction must be in (0, 1), got {share!r}"
        )
    mu_summary = share * mu
    return mu_summary, remaining_after(mu, mu_summary)


# --- The privacy unit -----------------------------------------------------------------------
#
# A run is calibrated for neighbours that differ by one unit's rows (a person, a customer), each
# unit contributing at most m rows (its contribution bound). Every release of every method is a
# Gaussian mechanism whose l2 sensitivity to one row is some D (a vote histogram: 1; a sum of
# rows in a ball of radius R: R; the noisy count: 1). One unit's m rows move it by at most m * D
# (triangle inequality over the m rows), and the noise is drawn with std sigma * D for a plan of
# mu: so the same noise with every sensitivity multiplied by m is a plan of mu / m.
# Equivalently, GDP's group privacy: a mechanism that is mu-GDP for one row is exactly
# (m * mu)-GDP for a group of m rows (Dong, Roth and Su 2022, Theorem 2.14). Either way the whole
# job is calibrated in ONE place: a job of unit-level mu runs every release at the per-row mu / m
# (rounded down, `per_row_mu`), and charges mu; docs/algorithms.md works this out release by
# release. So the plan's and the result's `mu` (and epsilon, delta) are the unit-level figures
# the ledger charges; `sigma`, `summary_mu` and `count_mu` describe the noise actually drawn,
# per row.

# The largest contribution bound a dataset may declare: beyond it the noise of a run would be
# m times that of a row-level one, too large to release anything useful.
MAX_CONTRIBUTION_BOUND = 10_000

_Charged = TypeVar("_Charged")


def check_contribution_bound(bound: object, field: str = "contribution_bound") -> int:
    """A contribution bound m: an integer, 1 <= m <= MAX_CONTRIBUTION_BOUND."""
    m = check_integer(field, bound, 1)
    if m > MAX_CONTRIBUTION_BOUND:
        raise ClusteringInputError(field, f"{field} must be at most {MAX_CONTRIBUTION_BOUND}")
    return m


def per_row_mu(unit_mu: float, bound: int) -> float:
    """The per-row mu that makes every release unit_mu-GDP for a unit of `bound` rows:
    unit_mu / bound, rounded down so that bound * per_row_mu <= unit_mu holds exactly."""
    m = check_contribution_bound(bound)
    if not (math.isfinite(unit_mu) and unit_mu > 0.0):
        raise ClusteringInputError("mu", f"mu must be finite and > 0, got {unit_mu!r}")
    row_mu = unit_mu / m
    while Fraction(row_mu) * m > Fraction(unit_mu):
        row_mu = math.nextafter(row_mu, 0.0)
    return row_mu


def per_row_options(options: Options) -> Options:
    """`options` with its budget as the per-row mu of its contribution bound (unchanged for a
    bound of 1, the row-level guarantee); the unit's budget is resolved once, here or before."""
    m = check_contribution_bound(options.contribution_bound)
    if m == 1:
        return options
    row = Budget(per_row_mu(job_budget(options).mu, m))
    return dataclasses.replace(with_budget(options, row), contribution_bound=1)


def as_charged(charged: _Charged, options: Options) -> _Charged:
    """A plan or result of `per_row_options(options)` with the job's unit-level budget: what
    the ledger charges and the API shows as the job's mu, epsilon and delta. `options` are
    the job's, resolved (`resolved`) before its per-row options were made."""
    if check_contribution_bound(options.contribution_bound) == 1:
        return charged
    unit = job_budget(options)
    return dataclasses.replace(charged, mu=unit.mu, epsilon=unit.epsilon, delta=unit.delta)  # type: ignore[type-var]


class RunKeywords(TypedDict, total=False):
    """The keywords every method's public function takes (their meaning: `Options`)."""

    radius: Required[float]
    center: np.ndarray | None
    epsilon: float | None
    delta: float | None
    mu: float | None
    iterations: int | None
    n_public: int | None
    relation: str
    rng: np.random.Generator | None
    progress: Progress | None
    check_k: bool


class EvolutionKeywords(RunKeywords, total=False):
    """PE-means's keywords: the population's L and its cap."""

    variations: int | None
    max_population: int


def options_for(accepted: type, keywords: Mapping[str, Any]) -> Options:
    """The `Options` of a public function's keywords, refusing what its signature would: a
    keyword it does not take, or a required one left out (TypeError)."""
    known = accepted.__required_keys__ | accepted.__optional_keys__  # type: ignore[attr-defined]
    for name in keywords:
        if name not in known:
            raise TypeError(f"got an unexpected keyword argument {name!r}")
    for name in accepted.__required_keys__:  # type: ignore[attr-defined]
        if name not in keywords:
            raise TypeError(f"missing a required keyword argument: {name!r}")
    return Options(**keywords)
