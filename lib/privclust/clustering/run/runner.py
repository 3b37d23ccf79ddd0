"""The run every method shares: its arguments checked, the rows read into the domain, the job's
generator, the plan with the public row count, the method's own run, and the release of its
centres; in the order that keeps it private (no noise is drawn before every argument is
validated)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import numpy as np

from privclust.clustering.choices import Relation
from privclust.clustering.data.limits import check_ball, domain_centre
from privclust.clustering.data.release import Gaussian
from privclust.clustering.data.rows import Reading, RowCount, Rows, Table, as_table
from privclust.clustering.errors import (
    ClusteringInputError,
    check_integer,
    check_positive,
)
from privclust.clustering.run.method import Method, RunStart, plan_method
from privclust.clustering.run.options import Options, resolved
from privclust.clustering.run.plan import RunPlan, plan_basis
from privclust.clustering.run.result import ClusteringResult
from privclust.privacy import noise


def run_method(method: Method, X: np.ndarray | Table, k: int, options: Options) -> ClusteringResult:
    """`method` on the rows X: its own arguments checked (`method.prepare`), the run started
    (`start_run`), its centres found (`method.run`) and released on the grid of the plan."""
    options = method.prepare(options)
    start = start_run(method, X, k, options)
    outcome = method.run(start, options)
    result = start.plan.result(
        outcome.centres, start.center, start.radius, outcome.final_variations
    )
    if outcome.last_move is None:
        return result
    ratio, shift = outcome.last_move
    return dataclasses.replace(result, last_move=ratio, last_shift=shift)


def start_run(method: Method, X: np.ndarray | Table, k: int, options: Options) -> RunStart:
    """The common start of a run, in the order that keeps it private: validate X and the
    domain and read the rows as the run passes over them (`Table.rows`: clipped and centred
    by `prepare_rows`, as `method.rows_dtype`: float32 halves the copy where only votes read
    it), take the job's generator (`noise.job_generator`), then plan with the public row count
    (`plan_for_rows`: no noise is drawn before every argument is validated)."""
    table = as_table(X)
    n_cols = table.shape[1]
    check_ball(options.radius, options.center, n_cols)
    reading = Reading(
        radius=check_positive("radius", options.radius),
        center=options.center,
        dtype=np.dtype(method.rows_dtype).name,
        box=options.box,
    )
    points = table.rows(reading)
    c = domain_centre(options.center, n_cols, reading.radius)
    noise_rng = noise.job_generator(options.rng)
    options = resolved(options)  # a method's own function: its budget, once for both plans
    plan = plan_for_rows(
        points,
        k=k,
        n_public=options.n_public,
        relation=options.relation,
        rng=noise_rng,
        check_k=options.check_k,
        plan=lambda count, count_mu: plan_method(
            method, plan_basis(count, n_cols, k, options, count_mu), options
        ),
    )
    return RunStart(points=points, center=c, radius=reading.radius, plan=plan, rng=noise_rng)


def plan_for_rows(
    rows: Rows,
    *,
    k: int,
    n_public: int | None,
    relation: str,
    rng: np.random.Generator,
    plan: Callable[[int, float | None], RunPlan],
    check_k: bool = False,
) -> RunPlan:
    """The plan of a library run on `rows` (N of them), choosing the public row count it may
    use.

    `plan(count, count_mu)` plans with every other argument bound.
    - `relation="replace-one"`: N is public; the plan uses it exactly (`n_public` must be None
      or N).
    - add/remove with `n_public` (the dataset's released N~): the plan uses max(N~, 1).
    - add/remove without one: the run first releases its own N~ = N + round(N(0, 1/mu_c^2)),
      with mu_c = COUNT_MU_FRACTION of the job's mu, and plans with max(N~, k) (a k above N~ is
      not an error here, since every argument was already validated before that release; the
      clamp is post-processing), or, with `check_k`, refuses a k above N~ (`released_count`)
      as the service refuses a k above a dataset's n_rows_dp. The plan records mu_c as
      `count_mu`.
    Every argument is validated (with a stand-in count) before any noise is drawn.
    """
    n_rows = rows.shape[0]
    if relation == Relation.REPLACE_ONE:
        if n_public is not None and int(n_public) != n_rows:
            raise ClusteringInputError(
                "n_public", "under replace-one neighbours the public count is the exact N"
            )
        return plan(n_rows, None)
    if n_public is not None:
        return plan(max(check_integer("n_public", n_public, -(2**62)), 1), None)
    count_mu = noise.COUNT_MU_FRACTION * plan(max(int(k), 1), None).mu
    return plan(released_count(rows, int(k), count_mu, rng, check_k), count_mu)


def released_count(
    rows: Rows, k: int, count_mu: float, rng: np.random.Generator, check_k: bool
) -> int:
    """A run's own noisy row count N~ = N + round(N(0, 1/count_mu^2)), released through the
    rows' door (a `RowCount` pass, sensitivity 1) from `rng`: max(N~, k), or with `check_k` N~
    floored at 0 (as the service stores it), a k above it refused (ClusteringInputError naming
    k; only this count was released, and the refusal is a post-processing of it)."""
    noises = (Gaussian(1.0, noise.count_sigma(count_mu)),)
    (released,) = rows.release(RowCount(), noises, rng)
    n_tilde = max(int(released[0]), 0)
    if not check_k:
        return max(n_tilde, k)
    if k > n_tilde:
        raise ClusteringInputError(
            "k",
            f"k={k} is above the noisy row count released for this run (n_rows_dp={n_tilde}); "
            "a tenth of the budget was spent on that count, nothing else was released",
        )
    return n_tilde


# A count reads how many rows there are, no value of any: any reading of them serves.
_COUNTING = Reading(radius=1.0, center=None)


def counted_rows(X: np.ndarray | Table) -> Rows:
    """X's rows as a count before a run reads them (a sweep's, "auto"'s): one streamed pass."""
    return as_table(X).streamed(_COUNTING)
