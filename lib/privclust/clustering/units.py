"""The privacy unit: a run calibrated for neighbours that differ by one unit's rows (a person, a
customer), each unit contributing at most m rows (its contribution bound).

Every release of every method is a Gaussian mechanism whose l2 sensitivity to one row is some
D (a vote histogram: 1; a sum of rows in a ball of radius R: R; the noisy count: 1). One unit's
m rows move it by at most m * D (triangle inequality over the m rows), and the noise is drawn
with std sigma * D for a plan of mu: so the same noise with every sensitivity multiplied by m is
a plan of mu / m. Equivalently, GDP's group privacy: a mechanism that is mu-GDP for one row is
exactly (m * mu)-GDP for a group of m rows (Dong, Roth and Su 2022, Theorem 2.14). Either way the
whole job is calibrated in ONE place: a job of unit-level mu runs every release at the per-row
mu / m (rounded down), and charges mu. docs/algorithms.md works this out release by release.

So the plan's and the result's `mu` (and epsilon, delta) are the unit-level figures the ledger
charges; `sigma`, `summary_mu` and `count_mu` describe the noise actually drawn, per row.
"""

from __future__ import annotations

import dataclasses
import math
from fractions import Fraction
from typing import TypeVar

from privclust.clustering.errors import ClusteringInputError, check_integer
from privclust.clustering.run.options import Budget, Options, job_budget, with_budget

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
