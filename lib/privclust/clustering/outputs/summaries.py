"""Private summaries of released centres (cluster sizes, k-means loss), their share of a job's
budget, and the owner's labels (docs/algorithms.md section 12).

Everything here reads the rows in one pass, a block or partition at a time
(privclust.clustering.data.rows: `Table.streamed`, `Table.each`): a dataset may be a memory-mapped
matrix, or partitions in object storage, of millions of rows. The two summary releases are
integer releases, through the rows' one door (privclust.clustering.data.rows: `Rows.release`):

- the sizes: how many rows have each released centre as their nearest, a k-vector of counts
  (l2 sensitivity 1 under add/remove, sqrt(2) under replace-one);
- the loss sum: sum_i min(||x_i - c(x_i)||^2, B) on the grid B / 2^LOSS_GRID_BITS, where B =
  loss_bound(centres, R) is a public upper bound on the squared distance from any point of the
  declared ball to its nearest released centre (so the clip never binds on a row in the domain,
  and B <= (2R)^2). Each row contributes an integer in [0, 2^LOSS_GRID_BITS] (clamped after
  rounding), so one row changes the sum by at most 2^LOSS_GRID_BITS grid units under either
  relation, whatever B is.

The loss released is the noisy sum over N~ (the public planning count, never the exact N).
A run with summaries is composed in privclust.clustering.dispatch; a sweep over k in
privclust.clustering.sweeps.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from privclust.clustering.choices import Relation
from privclust.clustering.data.limits import check_ball, domain_centre
from privclust.clustering.data.release import Gaussian, central_release
from privclust.clustering.data.rows import Part, Reading, Rows, as_table
from privclust.clustering.data.scaling import Box, box_keywords
from privclust.clustering.errors import ClusteringInputError
from privclust.clustering.evolution.nearest import nearest_candidates
from privclust.clustering.run.schedule import (
    LOSS_GRID_BITS,
    loss_sensitivity,
    summary_sigmas,
)

# loss_bound: at most this many Frank-Wolfe steps on its convex relaxation (any iterate is a
# valid bound; with KMeans' centres on the Table I sets the result is within 2% of the largest
# distance a search over the sphere finds), and the grid, in units of R^2, that the bound is
# rounded up to (a short number, never below the relaxation's value).
LOSS_BOUND_STEPS = 200
LOSS_BOUND_GRID = 2.0**-10


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


def _reading(X: Any, radius: float, center: np.ndarray | None, box: Box | None) -> Reading:
    """How the summaries and the labels read the rows: as a job does (`prepare_rows`, with its
    box), in float64, so that a row's nearest centre is the one its job's summaries counted it
    for."""
    _, n_cols = as_table(X).shape
    check_ball(radius, center, n_cols)
    return Reading(radius=float(radius), center=center, box=box)


@dataclass(frozen=True, eq=False)
class NearestLabels:
    """Each row's nearest centre (int32, lowest index on ties) in a partition."""

    centred: np.ndarray

    def __call__(self, part: Part) -> np.ndarray:
        return nearest_candidates(part.points, self.centred).astype(np.int32)


def nearest_centre_blocks(
    X: Any,
    centers: np.ndarray,
    *,
    radius: float | None = None,
    center: np.ndarray | None = None,
    lower: Any = None,
    upper: Any = None,
) -> Iterator[np.ndarray]:
    """Each row's nearest released centre (int32, lowest index on ties), a block at a time.

    X is an array or a table (privclust.clustering.data.rows). The domain is a ball (`radius`,
    `center`) or per-column bounds (`lower`, `upper`; the centres in the columns' own units,
    compared in the scaled space where the job clustered). Post-processing of the released
    centres: it costs no budget, but the labels describe individual rows, so only the data's
    owner may see them.
    """
    box: Box | None = None
    table = as_table(X)
    if lower is not None or upper is not None:
        box, ball = box_keywords({"radius": radius, "center": center}, lower, upper, table.shape[1])
        radius, center = ball["radius"], ball["center"]
        centers = box.to_scaled(np.asarray(centers, dtype=np.float64))
    if radius is None:
        raise ClusteringInputError("radius", "declare a domain: radius, or lower and upper")
    reading = _reading(table, radius, center, box)
    c = domain_centre(center, table.shape[1], reading.radius)
    return table.each(reading, NearestLabels(_centred_centres(centers, c)))


@dataclass(frozen=True, eq=False)
class SummaryCounts:
    """A pass's statistic: how many rows have each centre as their nearest, and the sum of
    their squared distances clipped at `bound`, in grid units of bound / 2^LOSS_GRID_BITS."""

    centred: np.ndarray
    bound: float

    def __call__(self, part: Part) -> tuple[np.ndarray, ...]:
        k, scale = len(self.centred), 2.0**LOSS_GRID_BITS
        labels = nearest_candidates(part.points, self.centred)
        counts = np.bincount(labels, minlength=k).astype(np.int64)
        diff = part.points - self.centred[labels]
        squared = np.einsum("ij,ij->i", diff, diff)
        units = np.rint(np.minimum(squared / self.bound, 1.0) * scale).astype(np.int64)
        return counts, np.array([np.minimum(units, 2**LOSS_GRID_BITS).sum()], dtype=np.int64)


def _summary_pass(
    X: Any, centers: np.ndarray, radius: float, center: np.ndarray | None, box: Box | None
) -> tuple[Rows, SummaryCounts]:
    """The rows a summary reads (X streamed through its domain) and its statistic against the
    centres, whose clip comes from the centres and the domain alone."""
    table = as_table(X)
    reading = _reading(table, radius, center, box)
    c = domain_centre(center, table.shape[1], reading.radius)
    centred = _centred_centres(centers, c)
    return table.streamed(reading), SummaryCounts(centred, loss_bound(centred, radius))


def exact_summary(
    X: Any,
    centers: np.ndarray,
    *,
    radius: float,
    center: np.ndarray | None = None,
    box: Box | None = None,
) -> ExactSummary:
    """Per-centre counts and the clipped loss sum on its grid, in one pass over X (an array or
    a table, read partition by partition). The clip comes from the centres and the domain
    alone (the domain's centre as `prepare_rows` takes it: the origin when `center` is None).
    With a `box`, the rows are read into the scaled space and `centers`, `radius` and `center`
    are that space's."""
    rows, statistic = _summary_pass(X, centers, radius, center, box)
    counts, (loss_units,) = rows.total(statistic)
    return ExactSummary(counts=counts, loss_units=int(loss_units), bound=statistic.bound)


def summary_noises(mu: float, relation: str) -> tuple[Gaussian, Gaussian]:
    """The two integer releases of the summaries, `mu`-GDP together, in order.

    Sizes: counts + N(0, (S sigma_s)^2) per centre with S = 1 (sqrt(2) under replace-one).
    Loss: loss_units + N(0, (2^G sigma_l)^2). (sigma_s, sigma_l) = summary_sigmas(mu)."""
    sizes_sigma, loss_sigma = summary_sigmas(mu)
    return (
        Gaussian(Relation(relation).count_sensitivity, sizes_sigma),
        Gaussian(loss_sensitivity(), loss_sigma),
    )


def released_summary(
    X: Any,
    centers: np.ndarray,
    *,
    radius: float,
    center: np.ndarray | None,
    box: Box | None,
    mu: float,
    relation: str,
    n_public: int,
    rng: np.random.Generator,
) -> Summary:
    """The summaries of `centers` on X: one pass and its two releases together
    (`Rows.release`, `summary_noises`), then their post-processing (`summarised`). The
    domain is as `exact_summary` takes it."""
    noises = summary_noises(mu, relation)
    rows, statistic = _summary_pass(X, centers, radius, center, box)
    sizes, loss_sum = rows.release(statistic, noises, rng)
    return summarised(sizes, int(loss_sum[0]), statistic.bound, noises, mu, n_public)


def release_summary(
    exact: ExactSummary,
    *,
    mu: float,
    relation: str,
    n_public: int,
    rng: np.random.Generator,
) -> Summary:
    """The summaries' two releases (`summary_noises`) added centrally to an exact summary
    computed elsewhere (a run releases its own through its rows: `released_summary`), and
    their post-processing."""
    noises = summary_noises(mu, relation)
    totals = (exact.counts, np.array([exact.loss_units], dtype=np.int64))
    sizes, loss_sum = central_release(totals, noises, rng)
    return summarised(sizes, int(loss_sum[0]), exact.bound, noises, mu, n_public)


def summarised(
    sizes: np.ndarray,
    loss_sum: int,
    bound: float,
    noises: tuple[Gaussian, Gaussian],
    mu: float,
    n_public: int,
) -> Summary:
    """The released sizes and loss sum, post-processed: the loss is loss~ = noisy units x B /
    2^G / N~ with B = `bound` (public), so its standard error is B sigma_l / N~."""
    loss_sigma = noises[1].sigma
    bound = float(bound)
    count = max(int(n_public), 1)
    unit = bound / 2.0**LOSS_GRID_BITS
    loss = min(max(float(loss_sum) * unit / count, 0.0), bound)
    sizes = np.maximum(sizes, 0)
    sizes.flags.writeable = False
    return Summary(
        sizes=sizes,
        loss=loss,
        loss_se=bound * loss_sigma / count,
        mu=mu,
        sizes_sigma=noises[0].sigma,
        loss_sigma=loss_sigma,
    )
