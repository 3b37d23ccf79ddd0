"""The library's two entry points over every method: `plan_run` prices and validates a job from
public inputs, `cluster` runs one. Both resolve the algorithm ("auto" by privclust.clustering.auto)
and reach the method through the registry; `cluster` also composes a run with its private
summaries (privclust.clustering.outputs.summaries)."""

from __future__ import annotations

import dataclasses
from typing import Any, Unpack

import numpy as np

from privclust.clustering.auto import resolve_algorithm
from privclust.clustering.choices import Algorithm, Relation
from privclust.clustering.data.limits import check_domain
from privclust.clustering.data.rows import Table
from privclust.clustering.data.scaling import box_keywords
from privclust.clustering.errors import (
    ClusteringInputError,
    check_integer,
    check_positive,
    data_shape,
)
from privclust.clustering.outputs.summaries import released_summary
from privclust.clustering.registry import METHODS
from privclust.clustering.run.method import Method, plan_method
from privclust.clustering.run.options import (
    DEFAULT_MAX_POPULATION,
    DEFAULT_PROJECTION_DIM,
    Budget,
    EvolutionKeywords,
    Options,
    as_charged,
    budget_split,
    job_budget,
    options_for,
    per_row_options,
    resolved,
    with_budget,
)
from privclust.clustering.run.plan import RunPlan, plan_basis
from privclust.clustering.run.result import (
    ClusteringResult,
    ScaledClusteringResult,
    in_original_units,
    into_box,
)
from privclust.clustering.run.runner import counted_rows, released_count, run_method
from privclust.privacy import noise
from privclust.privacy.gdp import remaining_after

# What `cluster` runs on: an N x d array (a read-only memmap is fine) or a table of stored
# partitions that an engine passes over (privclust.clustering.data.rows).
Rowset = np.ndarray | Table


def plan_run(
    n_rows: int,
    n_cols: int,
    k: int,
    *,
    algorithm: str = Algorithm.AUTO,
    epsilon: float | None = None,
    delta: float | None = None,
    mu: float | None = None,
    iterations: int | None = None,
    variations: int | None = None,
    projection_dim: int | None = DEFAULT_PROJECTION_DIM,
    max_population: int = DEFAULT_MAX_POPULATION,
    relation: str = Relation.ADD_REMOVE,
    count_mu: float | None = None,
    bits_per_level: int | None = None,
    sum_weight: int | None = None,
    step_fraction: float | None = None,
    count_share: float | None = None,
    summaries: bool = False,
    summary_fraction: float | None = None,
    lloyd_steps: int | None = None,
    lloyd_share: float | None = None,
    second_start: int | None = None,
    contribution_bound: int = 1,
) -> RunPlan:
    """Validate the non-data arguments of a run and fix its T, L, sigma and release count.

    `n_rows` is the public row count: the dataset's noisy count N~ (add/remove neighbours, the
    default) or the exact N only when it is public (`relation="replace-one"`). `count_mu`, when
    given, is a part of the job's mu set aside for a noisy row count the run releases itself;
    the Gaussian releases then share what is left. `summaries` sets `summary_fraction` of mu
    (default SUMMARY_MU_FRACTION) aside for the private sizes and loss. The other arguments are
    the methods' (privclust.clustering.methods: each `plan` reads its own and says what
    `iterations` counts for it; `variations`, `max_population`: PE-means's L and its cap).
    `contribution_bound` m calibrates every release for neighbours that differ by one unit of
    up to m rows (`per_row_options`): the plan's mu is the unit's, sigma per row mu/m's.
    """
    options = Options(
        algorithm=algorithm,
        epsilon=epsilon,
        delta=delta,
        mu=mu,
        iterations=iterations,
        variations=variations,
        projection_dim=projection_dim,
        max_population=max_population,
        relation=relation,
        bits_per_level=bits_per_level,
        sum_weight=sum_weight,
        step_fraction=step_fraction,
        count_share=count_share,
        summaries=summaries,
        summary_fraction=summary_fraction,
        lloyd_steps=lloyd_steps,
        lloyd_share=lloyd_share,
        second_start=second_start,
        contribution_bound=contribution_bound,
    )
    return plan_options(n_rows, n_cols, k, options, count_mu)


def plan_options(
    n_rows: int, n_cols: int, k: int, options: Options, count_mu: float | None = None
) -> RunPlan:
    """`plan_run` with its arguments as one Options: the checks every plan shares and the
    job's budget (resolved once, `plan_basis`, or before, for a contribution bound), the method
    (resolved from the public row count and the job's mu), then the method's plan."""
    if options.contribution_bound != 1:
        options = resolved(options)  # the unit's budget: the plan's mu, its releases per row
    per_row = per_row_options(options)
    basis = plan_basis(n_rows, n_cols, k, per_row, count_mu)
    chosen = resolve_algorithm(
        options.algorithm, basis.n_cols, n_rows=basis.n_rows, k=basis.k, mu=basis.mu
    )
    return as_charged(plan_method(METHODS[chosen], basis, per_row), options)


class ClusterKeywords(EvolutionKeywords, total=False):
    """cluster's keywords: every method's, the algorithm, HDPE-means's projection and the
    private summaries."""

    algorithm: str
    projection_dim: int
    summaries: bool
    summary_fraction: float | None
    lloyd_steps: int | None
    second_start: int | None
    contribution_bound: int


def cluster(X: Rowset, k: int, **keywords: Unpack[ClusterKeywords]) -> ClusteringResult:
    """Run the chosen algorithm; "auto" picks one from d, the public row count, k and the
    job's mu (privclust.clustering.auto.choose_algorithm) and the result names the one that ran.

    `projection_dim` only matters for HDPE-means; "lsh-coreset" runs with its default tree
    parameters (`iterations` = tree levels). `n_public` is the dataset's public row count
    (its released N~; the exact N only with `relation="replace-one"`). "auto" without a public
    count (a library call under add/remove neighbours) first releases N~ from a tenth of the
    job's mu, exactly as every method does on its own, and runs the chosen method with that
    N~ and the rest of the mu. See pe_means and hdpe_means for the rest. `summaries=True` also
    releases the centres' private sizes and loss (privclust.clustering.outputs.summaries), paid out
    of the same mu: `summary_fraction` of it (default SUMMARY_MU_FRACTION); without summaries it
    must be None. Per-column bounds `lower` and `upper` instead of a radius and centre cluster in
    the scaled space (privclust.clustering.data.scaling.cluster_box). X is an array, or a table of
    stored partitions (privclust.clustering.data.rows: on a Dask cluster with
    privclust.distributed), which gives the same result from the same generator.
    """
    if "lower" in keywords or "upper" in keywords:
        rest = dict(keywords)
        lower, upper = rest.pop("lower", None), rest.pop("upper", None)
        return cluster_box(X, k, lower=lower, upper=upper, **rest)
    return cluster_options(X, k, options_for(ClusterKeywords, keywords))


def cluster_box(
    X: Rowset, k: int, *, lower: object, upper: object, **keywords: Any
) -> ScaledClusteringResult:
    """`cluster` on a box domain: the rows clipped into the box and clustered in the scaled
    space (each column on [0, 1] by its declared bounds: privclust.clustering.data.scaling), the
    centres returned in the columns' own units. `keywords` are `cluster`'s, without radius and
    center."""
    _, n_cols = data_shape(X)
    box, scaled = box_keywords(dict(keywords), lower, upper, n_cols)
    options = dataclasses.replace(options_for(ClusterKeywords, scaled), box=box)
    return in_original_units(cluster_options(X, k, options), box)


def cluster_options(X: Rowset, k: int, options: Options) -> ClusteringResult:
    """`cluster` with its arguments as one Options, as one plan run once: the job's budget
    resolved (once: every part reads it), the per-row budget of a contribution bound m
    (`per_row_options`), the summaries' share set aside; then the centres
    (`_centres`) from what is left, then, with summaries, their sizes and loss
    (`_summarised`). The result says the job's budget."""
    if not options.summaries and options.summary_fraction is not None:
        raise ClusteringInputError("summary_fraction", "summary_fraction needs summaries=True")
    n_rows, n_cols = data_shape(X)
    check_domain(options.radius, options.center, n_cols)  # before any noise, the count's too
    job = resolved(options)
    run = per_row_options(job)
    budget = job_budget(run)
    mu_summary, mu_centres = budget_split(budget.mu, run)
    if mu_summary is not None:  # the centres get what the summaries leave, at the same T
        centres = Budget(mu_centres, budget.epsilon, budget.delta)
        run = dataclasses.replace(with_budget(run, centres), summaries=False, summary_fraction=None)
    result = _centres(X, k, n_rows, n_cols, run)
    if mu_summary is not None:
        result = _summarised(X, result, job, mu_summary)
    unit = job_budget(job)
    return dataclasses.replace(result, mu=unit.mu, epsilon=unit.epsilon, delta=unit.delta)


def _centres(X: Rowset, k: int, n_rows: int, n_cols: int, run: Options) -> ClusteringResult:
    """The centres, from the budget `run` carries: the method the caller named, or the one
    "auto" chooses from the public count (a library call under add/remove neighbours without
    one first releases its own: `_auto_with_own_count`)."""
    replace_one = run.relation == Relation.REPLACE_ONE
    if run.algorithm != Algorithm.AUTO or replace_one or run.n_public is not None:
        count = n_rows if replace_one else max(int(run.n_public or 1), 1)
        mu = job_budget(run).mu
        chosen = resolve_algorithm(run.algorithm, n_cols, n_rows=count, k=k, mu=mu)
        return into_box(_run(METHODS[chosen], X, k, run), run.box)
    return into_box(_auto_with_own_count(X, k, n_cols, run), run.box)


def _run(method: Method, X: Rowset, k: int, options: Options) -> ClusteringResult:
    """`method` on X. `max_population` caps a PE population: a method without one runs with
    the default, as its own function would."""
    if not method.evolves:
        options = dataclasses.replace(options, max_population=DEFAULT_MAX_POPULATION)
    return run_method(method, X, k, options)


def _auto_with_own_count(X: Rowset, k: int, n_cols: int, run: Options) -> ClusteringResult:
    """ "auto" under add/remove neighbours without a public count needs N~ before it can choose:
    validate everything with a stand-in count (no noise drawn yet), release N~ as
    runner.plan_for_rows would, then run the choice on what is left of the mu (at the T the
    whole budget plans: its epsilon goes along)."""
    k = check_integer("k", k, 1)
    plan_options(k, n_cols, k, run)  # every argument checked with a stand-in count
    budget = job_budget(run)
    count_mu = noise.COUNT_MU_FRACTION * budget.mu
    rng = noise.job_generator(run.rng)
    n_tilde = released_count(counted_rows(X), k, count_mu, rng, run.check_k)
    method = METHODS[resolve_algorithm(Algorithm.AUTO, n_cols, n_rows=n_tilde, k=k, mu=budget.mu)]
    rest = dataclasses.replace(budget, mu=remaining_after(budget.mu, count_mu))
    result = _run(method, X, k, dataclasses.replace(with_budget(run, rest), n_public=n_tilde))
    return dataclasses.replace(result, count_mu=count_mu)


def _summarised(
    X: Rowset, result: ClusteringResult, job: Options, mu_summary: float
) -> ClusteringResult:
    """`result` with its private sizes and loss released from `mu_summary` (on the job's
    generator: the caller's, or a fresh ChaCha20 from OS entropy), so that the whole is the
    job's mu (plan_run(summaries=True) prices exactly this)."""
    radius = check_positive("radius", job.radius)  # checked by the run already
    summary = released_summary(
        X,
        result.centers,
        radius=radius,
        center=job.center,
        box=job.box,
        mu=mu_summary,
        relation=result.relation,
        n_public=result.n_public,
        rng=noise.job_generator(job.rng),
    )
    return dataclasses.replace(
        result,
        sizes=summary.sizes,
        loss=summary.loss,
        loss_se=summary.loss_se,
        summary_mu=summary.mu,
    )
