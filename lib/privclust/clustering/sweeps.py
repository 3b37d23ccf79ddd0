"""A private sweep over k: one summarised run per k with the budget split equally between them,
and the elbow rule that suggests a k from their noisy losses (docs/algorithms.md section 12)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from privclust.clustering.choices import Algorithm, Relation
from privclust.clustering.data.limits import check_domain
from privclust.clustering.data.scaling import box_keywords
from privclust.clustering.dispatch import cluster, plan_run
from privclust.clustering.errors import ClusteringInputError, check_integer, data_shape
from privclust.clustering.outputs.uncertainty import (
    ELBOW_SE,
    Caveat,
    ks_told_apart,
    loss_rises,
    sweep_warnings,
)
from privclust.clustering.run.options import (
    SWEEP_SUMMARY_FRACTION,
    Budget,
    Budgeted,
    resolve_privacy,
)
from privclust.clustering.run.result import ClusteringResult
from privclust.clustering.run.runner import counted_rows, released_count
from privclust.privacy import noise
from privclust.privacy.gdp import equal_share, remaining_after

# The elbow rule (suggest_k): a larger k must lower the noisy loss by more than this fraction,
# plus ELBOW_SE_MULTIPLIER standard errors of the difference, to count as an improvement.
ELBOW_DROP = 0.2
ELBOW_SE_MULTIPLIER = ELBOW_SE
# The options of `cluster` a sweep checks against every k before it draws any noise.
PLANNED_OPTIONS = ("iterations", "variations", "summary_fraction")


def suggest_k(ks: Sequence[int], losses: Sequence[float], ses: Sequence[float]) -> int | None:
    """The elbow of a sweep (`elbow_k`), or None when its noisy losses cannot support one: when
    no larger k's loss is below a smaller k's by more than noise alone explains
    (privclust.clustering.outputs.uncertainty.ks_told_apart), when a larger k's is above a
    smaller k's by more than that (`loss_rises`: the best loss never rises with k, so those
    losses are the noise's), or when the noise decides where the elbow is (`elbow_k` with two
    standard errors for the smaller k and `elbow_k` with two against it differ by more than
    one: the noise deciding only between k and k + 1 still suggests k, which the sweep's
    `suggested-k-budget` warning says may move with the budget). Any other suggestion would
    then be the noise's."""
    if not (len(ks) == len(losses) == len(ses)) or len(ks) == 0:
        raise ValueError("ks, losses and ses must be non-empty and of equal length")
    order = sorted(range(len(ks)), key=lambda i: ks[i])
    ordered, ordered_ses = [losses[i] for i in order], [ses[i] for i in order]
    if loss_rises(ordered, ordered_ses) or not ks_told_apart(ordered, ordered_ses):
        return None
    elbow = elbow_k(ks, losses, ses)
    return elbow if abs(elbow_k(ks, losses, ses, against_noise=True) - elbow) <= 1 else None


def elbow_k(
    ks: Sequence[int],
    losses: Sequence[float],
    ses: Sequence[float],
    *,
    against_noise: bool = False,
) -> int:
    """The elbow of a sweep, from its noisy losses alone (post-processing).

    With the ks in increasing order, the suggestion is the smallest k_i that no larger k_j
    improves on by a clear margin:

        L_j >= (1 - ELBOW_DROP) * L_i - ELBOW_SE_MULTIPLIER * sqrt(SE_i^2 + SE_j^2)  for all j > i

    i.e. no larger k lowers the loss by more than 20% once two standard errors of noise are
    allowed for. `against_noise` turns the allowance round (+ instead of -): a k_i qualifies
    only if no larger k comes within two standard errors of a 20% drop, so noise cannot have
    hidden one, or if L_i is itself within two standard errors of zero (no larger k can then
    lower it by a margin its noise would show). The largest k always qualifies, so there is
    always an answer.
    """
    if not (len(ks) == len(losses) == len(ses)) or len(ks) == 0:
        raise ValueError("ks, losses and ses must be non-empty and of equal length")
    order = sorted(range(len(ks)), key=lambda i: ks[i])
    sign = 1.0 if against_noise else -1.0
    for pos, i in enumerate(order):
        if against_noise and losses[i] <= ELBOW_SE_MULTIPLIER * ses[i]:
            return int(ks[i])
        margin_ok = all(
            losses[j]
            >= (1.0 - ELBOW_DROP) * losses[i]
            + sign * ELBOW_SE_MULTIPLIER * math.hypot(ses[i], ses[j])
            for j in order[pos + 1 :]
        )
        if margin_ok:
            return int(ks[i])
    raise AssertionError("unreachable: the largest k always qualifies")  # pragma: no cover


@dataclass(frozen=True)
class SweepResult:
    """A private sweep over k: one summarised run per k (`results`, in the order of `ks`), each
    `job_mu`-GDP, composing with the sweep's own noisy count (`count_mu`, library runs without a
    public count) to at most `mu`. `suggested_k` is suggest_k on the noisy losses (None when
    they cannot tell the ks apart: `warnings` says so)."""

    ks: tuple[int, ...]
    results: tuple[ClusteringResult, ...]
    suggested_k: int | None
    mu: float
    job_mu: float
    n_public: int
    relation: str
    count_mu: float | None

    @property
    def warnings(self) -> list[Caveat]:
        """Why no k is suggested, or that the suggestion is the largest k
        (privclust.clustering.outputs.uncertainty.sweep_warnings)."""
        losses = [float(r.loss or 0.0) for r in self.results]
        ses = [float(r.loss_se or 0.0) for r in self.results]
        return sweep_warnings(self.ks, losses, ses, self.suggested_k)


@dataclass(frozen=True)
class SweepSplit(Budgeted):
    """A sweep's budget split: the whole sweep's budget (`budget`, resolved once: its `mu`),
    the part its own noisy row count spends (`count_mu`: a library sweep without a public
    count; None otherwise), and each run's equal share of the rest, `job_mu` (mu / sqrt(m)
    for m runs, rounded down)."""

    budget: Budget
    count_mu: float | None
    job_mu: float


def plan_sweep(
    runs: int,
    *,
    epsilon: float | None = None,
    delta: float | None = None,
    mu: float | None = None,
    own_count: bool = False,
) -> SweepSplit:
    """How a sweep of `runs` summarised runs splits its budget, (epsilon, delta) or mu: the
    library's sweep and the service's sweeps both split it here. With `own_count`,
    COUNT_MU_FRACTION of mu goes to the sweep's own noisy row count first, shared by every
    run."""
    budget = resolve_privacy(epsilon, delta, mu)
    count_mu = noise.COUNT_MU_FRACTION * budget.mu if own_count else None
    rest = budget.mu if count_mu is None else remaining_after(budget.mu, count_mu)
    return SweepSplit(budget=budget, count_mu=count_mu, job_mu=equal_share(rest, runs))


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
    radius: float | None = None,
    center: np.ndarray | None = None,
    lower: Sequence[float] | np.ndarray | None = None,
    upper: Sequence[float] | np.ndarray | None = None,
    algorithm: str = Algorithm.AUTO,
    epsilon: float | None = None,
    delta: float | None = None,
    mu: float | None = None,
    n_public: int | None = None,
    relation: str = Relation.ADD_REMOVE,
    rng: np.random.Generator | None = None,
    **options: Any,
) -> SweepResult:
    """Summarised runs of `cluster` for every k in `ks`, mu split equally (mu / sqrt(m) each).

    Without a public count under add/remove neighbours the sweep first releases one noisy count
    with COUNT_MU_FRACTION of mu (shared by every run) and splits the rest. `options` are
    `cluster`'s other keyword arguments; a run's summaries get SWEEP_SUMMARY_FRACTION of its mu
    unless they name another `summary_fraction`. Per-column bounds `lower` and `upper` instead
    of a ball run every k in the scaled space (privclust.clustering.data.scaling)."""
    values = check_ks(ks)
    domain: dict[str, Any] = {"radius": radius, "center": center}
    if lower is not None or upper is not None:
        domain = {"lower": lower, "upper": upper}
        # Checked now, before any noise: bounds, and no ball beside them.
        box_keywords({"radius": radius, "center": center}, lower, upper, data_shape(X)[1])
    else:
        check_domain(radius, center, data_shape(X)[1])
    options.setdefault("summary_fraction", SWEEP_SUMMARY_FRACTION)
    n_rows, n_cols = data_shape(X)
    own_count = relation != Relation.REPLACE_ONE and n_public is None
    split = plan_sweep(len(values), epsilon=epsilon, delta=delta, mu=mu, own_count=own_count)
    total_mu = split.mu
    for k in values:  # every argument checked before any noise is drawn
        plan_run(
            _stand_in_count(k, n_rows, n_public, relation),
            n_cols,
            k,
            algorithm=algorithm,
            mu=total_mu,
            relation=relation,
            summaries=True,
            **{name: options[name] for name in PLANNED_OPTIONS if name in options},
        )
    if split.count_mu is not None:
        n_public = released_count(
            counted_rows(X),
            max(values),
            split.count_mu,
            noise.job_generator(rng),
            options.get("check_k", False),
        )
    job_mu = split.job_mu
    results = tuple(
        cluster(
            X,
            k,
            algorithm=algorithm,
            mu=job_mu,
            n_public=n_public,
            relation=relation,
            rng=rng,
            summaries=True,
            **domain,
            **options,
        )
        for k in values
    )
    return _swept(values, results, total_mu, job_mu, split.count_mu)


def _stand_in_count(k: int, n_rows: int, n_public: int | None, relation: str) -> int:
    """The public row count a run for `k` is checked with before the sweep draws any noise: N
    under replace-one (public), else the released N~, or k itself before the sweep releases
    one (N is private)."""
    if relation == Relation.REPLACE_ONE:
        return n_rows
    return k if n_public is None else max(int(n_public), 1)


def _swept(
    ks: tuple[int, ...],
    results: tuple[ClusteringResult, ...],
    mu: float,
    job_mu: float,
    count_mu: float | None,
) -> SweepResult:
    """The sweep's result: its runs and the k their noisy losses suggest."""
    losses = [float(r.loss) for r in results if r.loss is not None]
    ses = [float(r.loss_se) for r in results if r.loss_se is not None]
    return SweepResult(
        ks=ks,
        results=results,
        suggested_k=suggest_k(ks, losses, ses),
        mu=mu,
        job_mu=job_mu,
        n_public=results[0].n_public,
        relation=results[0].relation,
        count_mu=count_mu,
    )
