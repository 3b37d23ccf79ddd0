"""Accuracy before spending: how far a job's released centres are expected to be from the exact
centres, and the standard error of its private loss, from public facts only (the plan's
releases and noise, the declared domain, N~, d and k), and the smallest budget that meets a
target (docs/algorithms.md, "Expected accuracy").

`centre_std` is the standard deviation, per column, of the noise on a released centre of a
cluster of N~/k rows, read from the method's last release of that centre:
- pe-lloyd and FastLloyd end with a noisy Lloyd step: the centre moves by a noisy sum of
  offsets clipped to a step radius r over a noisy count, so its noise per coordinate is
  r J sigma / sqrt(w) / n, J the joint release's sensitivity in units of r (sums and counts)
  and w the step's weight. FastLloyd's r is public (its last step radius); pe-lloyd's is half
  the gap from a centre to its nearest neighbour, known only after the run: the model takes the
  gap of k centres spread evenly over the domain, (volume / k)^(1/d).
- HDPE-means ends with noisy sums of sensitivity R priced as w releases: R sigma / sqrt(w) / n.
- PE-means and the LSH coreset release no per-cluster mean: their figure is the same noisy
  mean's R sigma / n times a factor calibrated on synthetic mixed-unit tables
  (bench/accuracy.py), reported as basis "calibrated".
Every figure is in the space the job clusters in (the columns' own units for a ball, the scaled
space for per-column bounds) and is then put in each column's units and as a fraction of its
declared range. It describes noise only: `centre_error` adds the error the method leaves (a
segmentation that differs from a non-private one's: privclust.clustering.outputs.centre_error),
before the run from public facts (`expected_accuracy`) and after it from released values
(`result_accuracy`).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from privclust.clustering.choices import Algorithm, Relation
from privclust.clustering.data.scaling import Box
from privclust.clustering.errors import ClusteringInputError
from privclust.clustering.mechanisms.grid import GRID_BITS, grid_sensitivity
from privclust.clustering.mechanisms.lloyd import (
    count_multiplier,
    default_count_share,
    joint_sensitivity,
    step_radius,
)
from privclust.clustering.mechanisms.projection import sum_weight_before_lloyd
from privclust.clustering.outputs.centre_error import (
    CentreError,
    centre_error,
    contested_share,
    domain_spread,
    loss_spread,
)
from privclust.clustering.run.options import DEFAULT_STEP_FRACTION
from privclust.clustering.run.plan import RunPlan
from privclust.clustering.run.result import ClusteringResult
from privclust.clustering.run.schedule import summary_sigmas

# The measured ratio of the observed centre error to R sigma / n for the methods without a
# final noisy mean (bench/RESULTS.md, "Expected accuracy": mixed-unit tables, epsilon 0.5-4).
CALIBRATED_FACTOR = {Algorithm.PE_MEANS.value: 1.6, Algorithm.LSH_CORESET.value: 2.4}
# The search of `smallest_epsilon`: epsilon from EPSILON_RANGE[0] to EPSILON_RANGE[1].
EPSILON_RANGE = (1e-3, 1e3)
_SCAN_POINTS = 49
_BISECTIONS = 40
# pe-lloyd's smallest step radius, in units of R
# (privclust.clustering.methods.lloyd_chain.MIN_STEP_FRACTION).
_MIN_STEP_FRACTION = 1e-3


@dataclass(frozen=True, eq=False)
class Space:
    """The space a job clusters in, as the accuracy model needs it: its ball's radius, the log
    of the domain's volume there, and per column the size of one unit of that space in the
    column's own units and the column's declared range."""

    radius: float
    log_volume: float
    units: np.ndarray
    ranges: np.ndarray

    @classmethod
    def ball(cls, radius: float, n_cols: int) -> Space:
        """A ball dataset clusters in its own units; a column's range is the diameter 2R."""
        log_unit_ball = 0.5 * n_cols * math.log(math.pi) - math.lgamma(0.5 * n_cols + 1.0)
        return cls(
            radius=float(radius),
            log_volume=log_unit_ball + n_cols * math.log(radius),
            units=np.ones(n_cols),
            ranges=np.full(n_cols, 2.0 * float(radius)),
        )

    @classmethod
    def box(cls, box: Box) -> Space:
        """A box dataset clusters in the unit box (volume 1); a unit there is a column's range."""
        return cls(radius=box.radius, log_volume=0.0, units=box.widths, ranges=box.widths)


@dataclass(frozen=True)
class Accuracy:
    """The expected accuracy of a planned job (see the module's docstring): `centre_std` the
    noise's share alone, `centre_error` the band that holds the error the method leaves too
    (privclust.clustering.outputs.centre_error). `loss_se` and `sizes_se` only with
    summaries: the loss's standard error taking its clip B at R^2 (the released centres fix B
    between R^2 and 4R^2; typically 1-1.7 R^2), in the space the loss is measured in, and the
    noise std of each noisy size."""

    centre_std: tuple[float, ...]
    centre_std_fraction: tuple[float, ...]
    loss_se: float | None
    sizes_se: float | None
    basis: str
    centre_error: tuple[float, ...] = ()
    centre_error_fraction: tuple[float, ...] = ()
    spread_from: str = "domain"

    @property
    def worst_fraction(self) -> float:
        return max(self.centre_std_fraction, default=0.0)


def centre_noise(plan: RunPlan, space: Space) -> tuple[float, str]:
    """(the per-coordinate noise std of a released centre in the clustering space, basis)."""
    R, d, k = space.radius, plan.n_cols, plan.k
    n = max(plan.n_rows / k, 1.0)
    if plan.algorithm == Algorithm.HDPE_MEANS:
        weight = max(plan.releases - plan.iterations - 1, 1)
        factor = (
            grid_sensitivity(d) * 2.0**-GRID_BITS * Relation(plan.relation).sum_sensitivity_factor
        )
        return R * factor * plan.sigma / math.sqrt(weight) / n, "final-mean-release"
    if plan.algorithm in (Algorithm.PE_LLOYD, Algorithm.FASTLLOYD):
        joint = joint_sensitivity(plan, d, count_multiplier(d, default_count_share(d)))
        joint *= 2.0**-GRID_BITS
        if plan.algorithm == Algorithm.FASTLLOYD:
            step, weight = step_radius(plan.iterations, R, d, k, DEFAULT_STEP_FRACTION), 1
        else:
            largest = step_radius(2, R, d, k, DEFAULT_STEP_FRACTION)
            gap = math.exp((space.log_volume - math.log(k)) / d)
            step = min(max(gap / 2.0, _MIN_STEP_FRACTION * R), largest)
            weight = plan.releases - plan.iterations
            if plan.projection_dim is not None:  # its projected stage's counts and sums first
                weight -= 1 + sum_weight_before_lloyd(plan.iterations)
            else:  # its Lloyd steps (and a second start's, and its two loss releases) alike
                steps = plan.progress_total - plan.iterations
                weight //= steps + (2 if plan.second_start else 0)
            weight = max(weight, 1)
        return step * joint * plan.sigma / math.sqrt(weight) / n, "final-mean-release"
    factor = CALIBRATED_FACTOR.get(plan.algorithm, max(CALIBRATED_FACTOR.values()))
    return factor * R * plan.sigma / n, "calibrated"


def expected_accuracy(plan: RunPlan, space: Space) -> Accuracy:
    """The accuracy of `plan` on a domain described by `space` (public inputs only)."""
    std, basis = centre_noise(plan, space)
    loss_se = sizes_se = None
    if plan.summary_mu is not None:
        sizes_sigma, loss_sigma = summary_sigmas(plan.summary_mu)
        loss_se = space.radius**2 * loss_sigma / max(plan.n_rows, 1)
        sizes_se = sizes_sigma * Relation(plan.relation).count_sensitivity
    noise = np.full(plan.n_cols, std)
    ranges = space.ranges
    fractions = np.where(ranges > 0, noise * space.units / np.where(ranges > 0, ranges, 1.0), 0.0)
    spread = domain_spread(space.log_volume, plan.n_cols, plan.k)
    band = centre_error(noise, spread, space.units, ranges, "domain")
    return Accuracy(
        centre_std=tuple(float(v) for v in noise * space.units),
        centre_std_fraction=tuple(float(v) for v in fractions),
        loss_se=loss_se,
        sizes_se=sizes_se,
        basis=basis,
        centre_error=band.centre_error,
        centre_error_fraction=band.centre_error_fraction,
        spread_from=band.spread_from,
    )


def plan_from(
    source: object, *, n_rows: int, n_cols: int, relation: str, projection_dim: int | None
) -> RunPlan:
    """The public plan a run followed, from what it released (`source`: a result or a stored
    job with its algorithm, k or centres, mu, epsilon, delta, sigma, releases, iterations and
    summary_mu) and the public facts given, for the accuracy model."""
    read = source.__getattribute__
    return RunPlan(
        algorithm=read("algorithm"),
        n_rows=n_rows,
        n_cols=n_cols,
        k=int(read("k")) if hasattr(source, "k") else len(read("centers")),
        mu=read("mu"),
        epsilon=read("epsilon"),
        delta=read("delta"),
        sigma=read("sigma"),
        releases=read("releases"),
        iterations=read("iterations"),
        variations=0,
        population_size=0,
        projection_dim=projection_dim,
        progress_total=0,
        relation=relation,
        summary_mu=read("summary_mu"),
    )


def released_accuracy(
    planned: Accuracy,
    space: Space,
    loss: float | None,
    loss_se: float | None,
    centres: np.ndarray | None = None,
) -> Accuracy:
    """A result's accuracy from its released values: the planned noise, and the segmentation's
    spread read from the released loss (in the clustering space) when there is one, scaled by
    the square root of the share of rows the released `centres` (in the columns' units) leave
    contested (privclust.clustering.outputs.centre_error.contested_share; without them, all of
    it: the wider band); without a loss, the estimate's band from public facts."""
    if loss is None:
        return planned
    n_cols = len(space.units)
    units = np.where(space.units > 0, space.units, 1.0)
    noise = np.asarray(planned.centre_std, dtype=np.float64) / units
    spread = loss_spread(loss, loss_se, n_cols)
    if centres is not None:
        share = contested_share(np.asarray(centres, dtype=np.float64) / units, spread)
        spread *= math.sqrt(share)
    band: CentreError = centre_error(noise, spread, space.units, space.ranges, "loss")
    return dataclasses.replace(
        planned,
        loss_se=loss_se,
        centre_error=band.centre_error,
        centre_error_fraction=band.centre_error_fraction,
        spread_from=band.spread_from,
    )


def result_accuracy(result: ClusteringResult, space: Space) -> Accuracy:
    """`released_accuracy` of a library run's result on a domain described by `space`."""
    plan = plan_from(
        result,
        n_rows=result.n_public,
        n_cols=np.shape(result.centers)[1],
        relation=result.relation,
        projection_dim=result.projection_dim,
    )
    planned = expected_accuracy(plan, space)
    return released_accuracy(
        planned, space, result.loss, result.loss_se, np.asarray(result.centers)
    )


def smallest_epsilon(
    target: float, plan_at: Callable[[float], RunPlan], space: Space
) -> tuple[float, RunPlan]:
    """The smallest epsilon (to about 1e-9 relative) whose plan's expected accuracy meets
    `target` (the largest centre_std_fraction at most `target`), and that plan.

    `plan_at(epsilon)` plans the job at that epsilon (its other parameters fixed); a budget too
    small to plan with counts as not meeting the target. Searched over EPSILON_RANGE: a scan in
    logarithms for the first epsilon that meets it, then bisection below it. Raises
    ClusteringInputError("target_centre_std_fraction") when no epsilon in the range meets it.
    """
    if not (math.isfinite(target) and 0.0 < target < 1.0):
        raise ClusteringInputError(
            "target_centre_std_fraction", f"the target must be in (0, 1), got {target!r}"
        )

    def meets(epsilon: float) -> RunPlan | None:
        try:
            plan = plan_at(epsilon)
        except (ClusteringInputError, ArithmeticError):
            return None
        return plan if expected_accuracy(plan, space).worst_fraction <= target else None

    grid = np.geomspace(*EPSILON_RANGE, _SCAN_POINTS)
    below = None
    for epsilon in grid:
        found = meets(float(epsilon))
        if found is not None:
            break
        below = float(epsilon)
    else:
        raise ClusteringInputError(
            "target_centre_std_fraction",
            f"no epsilon up to {EPSILON_RANGE[1]:g} gives a centre_std_fraction of at most "
            f"{target:g} for this job; ask for a looser target, or declare tighter bounds",
        )
    best, best_plan = float(epsilon), found
    if below is not None:
        lo = below
        for _ in range(_BISECTIONS):
            mid = math.sqrt(lo * best)
            plan = meets(mid)
            if plan is None:
                lo = mid
            else:
                best, best_plan = mid, plan
    # A short number a person can type, if it still meets the target (3 significant digits,
    # rounded up).
    scale = 10.0 ** (math.floor(math.log10(best)) - 2)
    short = float(f"{math.ceil(best / scale * (1 - 1e-12)) * scale:.3g}")
    plan = meets(short) if best <= short < best * 1.01 else None
    return (short, plan) if plan is not None else (best, best_plan)
