"""The noisy Lloyd step of FastLloyd (Diaa, Humphries and Kerschbaum), shared by FastLloyd and
pe-lloyd: label every row with its nearest centre, release the clipped offset sums and the
counts as ONE integer Gaussian release, move each centre by its noisy mean offset.

The budget split between sums and counts: the paper gives the counts a share
1 / (1 + sqrt(4d)) of each iteration's budget (in squared-mu terms) and the sums the rest. Here
that split is a sensitivity scaling inside one release: the counts are multiplied by an integer
M and appended to the sums, so a row moves the joint vector by at most sqrt(S^2 + M^2) (S = the
sum's sensitivity in grid units) and one noise multiplier sigma covers both;
M = S * sqrt(share / (1 - share)) gives the counts exactly the requested share (up to rounding
M to an integer).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from privclust.clustering.choices import Relation
from privclust.clustering.data.domain import project_into_ball
from privclust.clustering.data.release import Gaussian
from privclust.clustering.data.rows import Part, Rows
from privclust.clustering.evolution.nearest import nearest_candidates
from privclust.clustering.mechanisms.grid import GRID_BITS, grid_sensitivity, relative_grid_sums
from privclust.clustering.run.plan import Calibrated, RunPlan
from privclust.clustering.run.schedule import LLOYD_STEP, Planned

# The count multiplier M stays within [1, 2^31]; see `grid.relative_grid_sums` for why no sum of
# the joint vector can overflow int64.
MAX_COUNT_MULTIPLIER = 2**31

# The default Lloyd steps of a run that starts from PE-means' centres (pe-lloyd):
DEFAULT_LLOYD_STEPS = 1
# PE-means' default T grows with epsilon (privclust.clustering.run.plan.default_pe_iterations)
# up to ITERATIONS_CAP times its base floor(4 sqrt(d)); a run planned at that cap (epsilon >= 2
# by default) takes LLOYD_STEPS_AT_CAP noisy Lloyd steps instead of one. Each PE iteration
# scores every row against k L variations, a Lloyd step is one pass: on flights (327,346 x 5)
# at epsilon 10 the uncapped T = 80 took 11.6x KMeans(n_init=10)'s time; T = 16 and 4 steps
# 1.1-3.7x, with a loss 1.003-1.007x KMeans' (bench/RESULTS.md, "Centre error on real
# tables").
ITERATIONS_CAP = 2
LLOYD_STEPS_AT_CAP = 4
# More steps where the job's mu times the public rows per cluster allows (`default_lloyd_steps`):
# one per ROWS_MU_PER_STEP of mu N~ / k, at most MAX_REFINE_STEPS (pe-lloyd's own cap).
ROWS_MU_PER_STEP = 100.0
MAX_REFINE_STEPS = 10


def iterations_cap(n_cols: int) -> int:
    """PE-means' largest default T on d columns: ITERATIONS_CAP floor(4 sqrt(d))."""
    return ITERATIONS_CAP * math.isqrt(16 * n_cols)


def default_lloyd_steps(pe_iterations: int, n_cols: int, n_rows: int, k: int, mu: float) -> int:
    """The default number of Lloyd steps after T PE iterations on d columns, from public facts
    only (fixed in the plan before any noise): LLOYD_STEPS_AT_CAP from the capped T on,
    DEFAULT_LLOYD_STEPS below it, and more where the job's mu times the public rows per
    cluster, mu N~ / k, allows: one step per ROWS_MU_PER_STEP of it, up to MAX_REFINE_STEPS.

    A step's noise on a centre falls as mu N~ / k grows, and where it is small a single step
    (or four) leaves the centres moving by tens to hundreds of times that noise
    (`last_move_ratio`): on diamonds (53,940 x 7, k = 6) and flights (327,346 x 5, k = 4)
    mu N~ / k is 1,200 to 150,000 at epsilon 0.5 to 10, and with 10 steps flights' runs at
    epsilon 0.5 and 1 ended at 1.002-1.007x KMeans' loss instead of 1.030-1.035x, unless they
    settled in a second basin (1.034x) that Lloyd's steps do not leave (bench/RESULTS.md,
    "Warnings that a run may differ"); on the smaller tables (mu N~ / k <= 700) nothing
    changes."""
    base = LLOYD_STEPS_AT_CAP if pe_iterations >= iterations_cap(n_cols) else DEFAULT_LLOYD_STEPS
    refine = int(min(mu * n_rows / max(k, 1) / ROWS_MU_PER_STEP, MAX_REFINE_STEPS))
    return max(base, refine)


def step_radius(t: int, radius: float, n_cols: int, k: int, step_fraction: float) -> float:
    """r_t: R in the first iteration, then min(R, alpha R / k^(1/d))."""
    if t <= 1:
        return radius
    return min(radius, step_fraction * radius * math.exp(-math.log(k) / n_cols))


def default_count_share(n_cols: int) -> float:
    """The paper's share of each iteration's budget for the counts: 1 / (1 + sqrt(4d))."""
    return 1.0 / (1.0 + math.sqrt(4.0 * n_cols))


def count_multiplier(n_cols: int, count_share: float) -> int:
    """M, the integer the counts are scaled by so that they receive `count_share` of each
    release: M^2 / (S^2 + M^2) = share with S = grid_sensitivity(d)."""
    ideal = grid_sensitivity(n_cols) * math.sqrt(count_share / (1.0 - count_share))
    return int(min(max(round(ideal), 1), MAX_COUNT_MULTIPLIER))


def joint_sensitivity(plan: Calibrated, n_cols: int, multiplier: int) -> float:
    """l2 sensitivity of [grid sums of the offsets (k x d), M * counts (k)] in grid units.

    Add/remove: one row moves one cluster's sum by <= S and its count by 1, so
    sqrt(S^2 + M^2). Replace-one: within one cluster the sum moves by <= 2S and the counts not
    at all; across two clusters each sum by <= S and two counts by 1: sqrt(2 (S^2 + M^2)).
    """
    s = grid_sensitivity(n_cols)
    joint = math.hypot(s, float(multiplier))
    if plan.relation == Relation.REPLACE_ONE:
        return max(2.0 * s, math.sqrt(2.0) * joint)
    return joint


def lloyd_steps_part(
    plan: Calibrated, n_cols: int, steps: int, count_share: float | None = None, weight: int = 1
) -> Planned:
    """`steps` noisy Lloyd steps, each one joint release (`joint_sensitivity`, the counts given
    `count_share`, default 1 / (1 + sqrt(4d))) priced as `weight` releases."""
    share = default_count_share(n_cols) if count_share is None else count_share
    joint = joint_sensitivity(plan, n_cols, count_multiplier(n_cols, share))
    return Planned(LLOYD_STEP, steps, joint, weight)


def joint_noise(plan: RunPlan, n_cols: int, multiplier: int, weight: int = 1) -> Gaussian:
    """The noise of one joint release of [sums, M * counts]: noise multiplier plan.sigma on the
    joint sensitivity divided by sqrt(weight).

    The sums get noise of std sqrt(S^2 + M^2) sigma / sqrt(weight) per coordinate and the
    counts, after the division by M, that over M: the paper's split, as one
    (sqrt(weight)/sigma)-GDP release, priced as `weight` releases of the plan's sigma (FastLloyd
    uses weight 1; pe-lloyd gives its Lloyd steps a larger share this way)."""
    return Gaussian(joint_sensitivity(plan, n_cols, multiplier), plan.sigma, weight)


def split_joint(noisy: np.ndarray, k: int, multiplier: int) -> tuple[np.ndarray, np.ndarray]:
    """(noisy sums in grid units, noisy counts) from a released joint vector, as floats
    (post-processing)."""
    d = (len(noisy) - k) // k
    noisy_sums = noisy[: k * d].reshape(k, d).astype(np.float64)
    noisy_counts = noisy[k * d :].astype(np.float64) / multiplier
    return noisy_sums, noisy_counts


def moved_centres(
    centres: np.ndarray,
    noisy_sums: np.ndarray,
    noisy_counts: np.ndarray,
    step: float | np.ndarray,
    radius: float,
) -> np.ndarray:
    """mu + noisy offset sum / max(noisy count, 1), the move shortened to `step` (a mean of
    offsets of norm <= step moves no further) and the centre projected into the ball."""
    radii = np.broadcast_to(np.asarray(step, dtype=np.float64), noisy_counts.shape)
    moves = noisy_sums * (radii * 2.0**-GRID_BITS / np.maximum(noisy_counts, 1.0))[:, None]
    lengths = np.sqrt(np.einsum("ij,ij->i", moves, moves))
    moves *= (radii / np.maximum(lengths, radii))[:, None]
    return project_into_ball(centres + moves, radius)


@dataclass(frozen=True, eq=False)
class LloydSums:
    """A pass's statistic: every row labelled by its nearest centre, then each cluster's exact
    sums of clipped offsets and its count (`relative_grid_sums`)."""

    centres: np.ndarray
    step: float | np.ndarray

    def __call__(self, part: Part) -> tuple[np.ndarray, ...]:
        labels = nearest_candidates(part.points, self.centres)
        return relative_grid_sums(part.points, self.centres, labels, self.step)


@dataclass(frozen=True, eq=False)
class JointLloydSums:
    """A Lloyd step's released statistic: `sums`' sums and counts as the one joint vector
    [sums, M * counts] (a linear map of them, so the partitions' sum is the whole's)."""

    sums: LloydSums
    multiplier: int

    def __call__(self, part: Part) -> tuple[np.ndarray, ...]:
        sums, counts = self.sums(part)
        return (np.concatenate([sums.ravel(), counts * np.int64(self.multiplier)]),)


@dataclass(frozen=True, eq=False)
class NoisyLloyd:
    """A run's noisy Lloyd steps on its rows, with the plan's noise: the counts scaled by
    `multiplier`, each step priced as `weight` releases (`joint_noise`)."""

    points: Rows
    plan: RunPlan
    radius: float
    multiplier: int
    rng: np.random.Generator
    weight: int = 1

    def step(
        self, centres: np.ndarray, step: float | np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, tuple[float, float]]:
        """One noisy Lloyd step from `centres` (centred coordinates): label every row with its
        nearest centre, release the offset sums clipped to `step` and the counts as one joint
        vector (every cluster is released, empty or not) and move each centre by the noisy
        mean offset (`moved_centres`). Returns (the new centres, the noisy counts, how far the
        step moved them against its noise: `last_move_ratio`)."""
        k, d = centres.shape
        noise = joint_noise(self.plan, d, self.multiplier, self.weight)
        statistic = JointLloydSums(LloydSums(centres, step), self.multiplier)
        (noisy,) = self.points.release(statistic, (noise,), self.rng)
        noisy_sums, counts = split_joint(noisy, k, self.multiplier)
        moved = moved_centres(centres, noisy_sums, counts, step, self.radius)
        return moved, counts, last_move_ratio(centres, moved, counts, step, noise)


def last_move_ratio(
    before: np.ndarray,
    after: np.ndarray,
    noisy_counts: np.ndarray,
    step: float | np.ndarray,
    noise: Gaussian,
) -> tuple[float, float]:
    """How far a Lloyd step moved the centres, from released values only: (the largest over
    the centres of ||move_j|| / (s_j sqrt(d)), the root mean squared move of a row's centre).

    s_j is the noise std per coordinate of centre j's noisy mean offset (the joint release's
    std in grid units, times r_j 2^-GRID_BITS, over max(noisy count_j, 1)). The ratio is about
    1 when the step moved a centre by its own noise alone; a converged run's step moves each
    centre by the difference of two such noises (about sqrt(2)); much more means the centres
    were still moving. The root mean squared move, sqrt(sum_j n~_j ||move_j||^2 / sum_j n~_j)
    (noisy counts floored at 0), is what the step lowered the loss per row by, had its means
    been exact (a step to the means of fixed clusters lowers the loss by sum_j n_j ||move_j||^2):
    privclust.clustering.outputs.convergence compares it with the loss."""
    k, d = after.shape
    radii = np.broadcast_to(np.asarray(step, dtype=np.float64), (k,))
    std = noise.scaled_sensitivity * noise.sigma * radii * 2.0**-GRID_BITS
    counts = np.asarray(noisy_counts, dtype=np.float64)
    std = std / np.maximum(counts, 1.0)
    squared = np.einsum("ij,ij->i", after - before, after - before)
    ratios = np.sqrt(squared) / (std * math.sqrt(d))
    weights = np.maximum(counts, 0.0)
    shift = math.sqrt(float(weights @ squared) / max(float(weights.sum()), 1.0))
    return float(ratios[int(np.argmax(ratios))]), shift


def reseed_starving(
    centres: np.ndarray,
    noisy_counts: np.ndarray,
    ratio: float,
    step: float,
    radius: float,
    rng: np.random.Generator,
) -> np.ndarray:
    """Move starving centres next to crowded ones so that the next step splits the crowd.

    Pairs the smallest noisy count with the largest, the second smallest with the second
    largest, and so on, while the larger is at least `ratio` times max(smaller, 1): the small
    cluster's centre is put at mu_big + u and the big one's at mu_big - u, with u a random
    direction of length 1e-3 r_t, so the next labelling cuts the crowded cluster in two by a
    random hyperplane through its centre. (Lloyd's algorithm cannot leave a local optimum where
    one centre holds two clusters and another holds none or half of one; an empty centre only
    drifts with noise.) It reads nothing but released counts, public centres and the job's
    generator: post-processing.
    """
    steps = np.full(len(centres), float(step))
    return reseed_beside(centres, noisy_counts, ratio, steps, radius, rng)[0]


def reseed_beside(
    centres: np.ndarray,
    noisy_counts: np.ndarray,
    ratio: float,
    steps: np.ndarray,
    radius: float,
    rng: np.random.Generator,
) -> tuple[np.ndarray, np.ndarray]:
    """`reseed_starving` with a step radius per cluster: each pair's offset is 1e-3 of the
    crowded centre's radius, and the moved centre takes that radius too (the pair shares the
    crowded cluster). Returns (the centres, their step radii): post-processing, as there."""
    k, d = centres.shape
    order = np.argsort(noisy_counts, kind="stable")
    out = centres.copy()
    radii = np.array(steps, dtype=np.float64)
    for i in range(k // 2):
        small, big = order[i], order[k - 1 - i]
        if not noisy_counts[big] >= ratio * max(float(noisy_counts[small]), 1.0):
            break
        direction = rng.standard_normal(d)
        length = float(np.linalg.norm(direction))
        # A standard normal vector of norm 0 has probability 0; the floor only avoids 0/0.
        offset = direction * (1e-3 * radii[big] / max(length, 1e-300))
        out[small] = centres[big] + offset
        out[big] = centres[big] - offset
        radii[small] = radii[big]
    return project_into_ball(out, radius), radii
