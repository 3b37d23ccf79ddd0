"""A second start for pe-lloyd's Lloyd steps, and the choice between the two by noisy losses.

Noisy Lloyd steps settle in the basin they start in. On a large table two basins may both be
stable: on nycflights13's flights (k = 4) one is k-means' own (short and long haul, each split
into morning and evening) and the other gives the long-haul flights one centre and the
short-haul ones three, at 1.03x the loss; no Lloyd step leaves it, and no released value of a
single chain tells the two apart. The classical way out is a split-merge move (as in
split-and-merge k-means): merge the two centres whose merge costs least and put the freed
centre into the cluster that holds the most loss.

Where the budget allows (`second_start_steps`: public facts only, fixed in the plan):
1. after the first chain's Lloyd steps, ONE release of each cluster's clipped loss sum
   (`ClusterLosses`, priced as `weight` releases like a Lloyd step);
2. the second start (`split_merge`, post-processing of released centres, counts and losses and
   the job's generator): the two centres with the smallest Ward cost n_i n_j / (n_i + n_j)
   ||c_i - c_j||^2 (noisy counts) become their count-weighted mean, and the cluster with the
   largest noisy loss gets two centres, on either side of its centre in a random direction;
3. `second_start_steps` noisy Lloyd steps from it, then one release of its clusters' losses;
4. the second chain is the run's answer if its noisy total loss is below the first's by more
   than SWITCH_Z standard deviations of their noises' difference, else the first (post-
   processing).

Every release is in the plan (privclust.clustering.methods.pe_lloyd.plan_lloyd_releases), so
the ledger's charge is exact whichever chain wins; the code path reads public facts only.

Both releases clip a row's squared distance at the same public B (`loss_clip`: the largest gap
between the first chain's centres, squared): each row adds an integer in [0, 2^LOSS_GRID_BITS]
on the grid B / 2^LOSS_GRID_BITS to its nearest centre's sum, so one row moves the k-vector by
at most 2^LOSS_GRID_BITS (add/remove; sqrt(2) times that under replace-one, where a row may
leave one cluster's sum and join another's). A row farther than sqrt(B) from every centre
counts B: both chains are compared on the same robust loss, whose noise is on the scale of the
clusters rather than of the domain.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from privclust.clustering.choices import Relation
from privclust.clustering.data.domain import project_into_ball
from privclust.clustering.data.release import Gaussian
from privclust.clustering.data.rows import Part, Rows
from privclust.clustering.errors import ClusteringInputError, check_integer
from privclust.clustering.evolution.nearest import nearest_candidates, nearest_other_distances
from privclust.clustering.run.plan import Calibrated, RunPlan
from privclust.clustering.run.schedule import CLUSTER_LOSSES, LOSS_GRID_BITS, Planned

# The second start is tried from this many clusters on (a split-merge move needs a pair to
# merge besides the cluster it splits) ...
SECOND_START_MIN_K = 3
# ... where the job's mu times the public rows per cluster, mu N~ / k, is at least this: there
# the first chain has its full 10 steps (privclust.clustering.mechanisms.lloyd.
# default_lloyd_steps) and the noisy per-row loss a std of about sqrt(releases) B / (mu N~),
# below 1e-3 B / k (flights: mu N~ / k is 10,000 to 150,000 at epsilon 0.5 to 10, and its two
# basins differ by 0.03 of the loss, about 5e-3 B per row).
SECOND_START_ROWS_MU = 1000.0
# The second chain's Lloyd steps: the split cluster's two centres separate within two or three
# steps (each move is capped at the step radius), the rest refine.
SECOND_START_STEPS = 10
SECOND_START_MAX_STEPS = 10
# The split's two centres sit this many of the split cluster's per-column rms spreads from
# its centre: the means of a Gaussian's two halves are 0.8 standard deviations from its mean.
SPLIT_SPREADS = 0.8
# The smallest loss clip, in units of R (two released centres may coincide).
MIN_CLIP_FRACTION = 1e-3
# The second chain wins only by this many standard deviations of the two losses' noise.
SWITCH_Z = 2.0


def second_start_steps(n_rows: int, k: int, mu: float, given: int | None = None) -> int:
    """The second chain's Lloyd steps (0: no second start), from public facts only: `given`
    (a job keeps what it was planned with) when not None, else SECOND_START_STEPS from
    SECOND_START_MIN_K clusters and SECOND_START_ROWS_MU of mu N~ / k on; never below
    SECOND_START_MIN_K clusters."""
    if k < SECOND_START_MIN_K:
        return 0
    if given is not None:
        steps = check_integer("second_start", given, 0)
        if steps > SECOND_START_MAX_STEPS:
            raise ClusteringInputError(
                "second_start", f"second_start must be at most {SECOND_START_MAX_STEPS}"
            )
        return steps
    return SECOND_START_STEPS if mu * n_rows / k >= SECOND_START_ROWS_MU else 0


@dataclass(frozen=True, eq=False)
class ClusterLosses:
    """A pass's statistic: every row labelled by its nearest centre, its squared distance to it
    clipped at `bound` on the grid bound / 2^LOSS_GRID_BITS, summed per centre."""

    centres: np.ndarray
    bound: float

    def __call__(self, part: Part) -> tuple[np.ndarray, ...]:
        k, scale = len(self.centres), 2.0**LOSS_GRID_BITS
        labels = nearest_candidates(part.points, self.centres)
        diff = part.points - self.centres[labels]
        squared = np.einsum("ij,ij->i", diff, diff)
        units = np.rint(np.minimum(squared / self.bound, 1.0) * scale).astype(np.int64)
        np.minimum(units, 2**LOSS_GRID_BITS, out=units)
        sums = np.zeros(k, dtype=np.int64)
        np.add.at(sums, labels, units)  # integers: exact in any order of the partitions
        return (sums,)


def losses_sensitivity(plan: Calibrated) -> float:
    """The l2 sensitivity of a `ClusterLosses` release: 2^LOSS_GRID_BITS, sqrt(2) times it
    under replace-one (a row may leave one cluster's sum and join another's)."""
    sensitivity = float(2**LOSS_GRID_BITS)
    if plan.relation == Relation.REPLACE_ONE:
        sensitivity *= math.sqrt(2.0)
    return sensitivity


def losses_part(plan: Calibrated, weight: int) -> Planned:
    """One chain's `ClusterLosses` release in a plan's schedule, priced as `weight` releases."""
    return Planned(CLUSTER_LOSSES, 1, losses_sensitivity(plan), weight)


def losses_noise(plan: RunPlan, weight: int) -> Gaussian:
    """The noise of a `ClusterLosses` release: `losses_sensitivity`, the plan's sigma, priced
    as `weight` releases."""
    return Gaussian(losses_sensitivity(plan), plan.sigma, weight)


def loss_clip(centres: np.ndarray, radius: float) -> float:
    """The clip of both chains' losses, from the first chain's released centres: the square of
    the largest distance from a centre to its nearest other one, within [(R/1000)^2, R^2]. A
    row farther than that from its nearest centre lies beyond every gap between clusters; the
    clip keeps the loss's noise on the scale of the clusters rather than of the domain (on
    flights 0.14 instead of R^2 = 1.25)."""
    gaps = nearest_other_distances(np.asarray(centres, dtype=np.float64))
    largest = float(np.max(gaps)) if gaps.size else float(radius)
    return min(max(largest, MIN_CLIP_FRACTION * radius), float(radius)) ** 2


def released_losses(
    points: Rows,
    centres: np.ndarray,
    bound: float,
    plan: RunPlan,
    weight: int,
    rng: np.random.Generator,
) -> np.ndarray:
    """Each cluster's noisy loss sum clipped at `bound` per row, in the run's squared units
    (one release)."""
    (noisy,) = points.release(ClusterLosses(centres, bound), (losses_noise(plan, weight),), rng)
    return noisy.astype(np.float64) * (bound * 2.0**-LOSS_GRID_BITS)


def second_is_better(
    first: np.ndarray, second: np.ndarray, bound: float, plan: RunPlan, weight: int
) -> bool:
    """Whether the second chain's noisy total loss is below the first's by more than
    SWITCH_Z standard deviations of the difference of their noises (sqrt(2k) per-cluster stds,
    public): where the two are level, the first chain (from PE-means' own start) stays, and
    noise alone switches to a worse second chain at most 2.3% of the time."""
    noise = losses_noise(plan, weight)
    std = noise.scaled_sensitivity * noise.sigma * bound * 2.0**-LOSS_GRID_BITS
    margin = SWITCH_Z * std * math.sqrt(2.0 * len(first))
    return float(second.sum()) < float(first.sum()) - margin


def split_merge(
    centres: np.ndarray,
    counts: np.ndarray,
    losses: np.ndarray,
    radius: float,
    rng: np.random.Generator,
) -> np.ndarray:
    """The second start: the pair of the smallest Ward cost (noisy counts floored at 1) merged
    into its count-weighted mean, and the freed centre and the one of the cluster with the
    largest noisy loss put on either side of that centre, in a random direction, SPLIT_SPREADS
    times its per-column rms spread sqrt(loss / (n d)) away. Post-processing of released values
    and the job's generator."""
    k, d = centres.shape
    n = np.maximum(np.asarray(counts, dtype=np.float64), 1.0)
    split = int(np.argmax(losses))
    best, pair = math.inf, (0, 1)
    for i in range(k):
        for j in range(i + 1, k):
            if split in (i, j):
                continue
            gap = centres[i] - centres[j]
            cost = n[i] * n[j] / (n[i] + n[j]) * float(gap @ gap)
            if cost < best:
                best, pair = cost, (i, j)
    i, j = pair
    out = centres.copy()
    out[i] = (n[i] * centres[i] + n[j] * centres[j]) / (n[i] + n[j])
    spread = math.sqrt(max(float(losses[split]), 0.0) / (n[split] * d))
    direction = rng.standard_normal(d)
    # A standard normal vector of norm 0 has probability 0; the floor only avoids 0/0.
    offset = direction * (SPLIT_SPREADS * spread / max(float(np.linalg.norm(direction)), 1e-300))
    out[j] = centres[split] + offset
    out[split] = centres[split] - offset
    return project_into_ball(out, radius)
