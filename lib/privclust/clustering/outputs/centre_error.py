"""The centre error: per column, a band that should contain, about 9 times in 10, the distance
from a released centre to where a non-private k-means puts it; the error the method leaves, not
only its noise (docs/algorithms.md, "Centre error").

A released centre differs from a non-private one for two reasons, and the band adds both (in
quadrature, each at its 90% level):
- the noise of the method's last release of that centre: `centre_std` of
  privclust.clustering.outputs.accuracy, of which a band of Z90 = 1.645 standard deviations
  holds 90% of draws;
- the segmentation: k-means' objective is flat wherever clusters overlap, so a private run and
  a non-private one settle on partitions of the same rows that differ near their borders, and
  their centres differ by a share of the clusters' own spread (on well-separated clusters less,
  as the bench shows). The spread is the root mean squared distance per column from a row to its
  centre, sqrt(loss / d):
  - with a released loss (a result with summaries) it is read from that loss, taken Z90 of its
    standard errors high (the noise may have lowered it; floored at 0), and scaled by the
    square root of the share of rows the released centres leave contested (`contested_share`):
    the share of a cluster past the border with its nearest neighbour, over that share when
    the two coincide, with each cluster normal and all of its spread (the radius
    rho = spread sqrt(d) the loss gives) along the line between them: 2 Phi(-D / (2 rho)),
    D the two nearest released centres' distance. The squared shift of a centre adds up over
    the rows that may change sides, so the band's share of the spread goes as the square root
    of their share: 1 where centres coincide, 0.79 at D = rho, 0.56 at D = 2 rho. It
    reads the nearest pair (the most overlap) and, for a normal cluster of that loss, the
    worst direction (the most overlap at that distance), not the per-column spread: the
    per-column reading, exp(-(D/2s)^2/2) with s the spread per column, shrank the band on
    penguins, breast cancer and diamonds to where it held 37-82% of the errors, because a run
    settled in another basin (two segments merged, one split) looks separated too. Without
    the centres (a caller that gives none) the whole spread is kept: the wider band;
  - before the run (the estimate, public facts only), or without summaries, from the domain: the
    spread of k clusters that fill it evenly, each a cube of side (volume / k)^(1/d), whose
    per-column standard deviation is side / sqrt(12). Data that fill a small part of the domain
    spread less, so this band is wider than the result's; the `domain-loose` warning says when.
Every figure is computed in the space the job clusters in (the scaled space for per-column
bounds, the columns' own units for a ball) and then put in each column's units and as a
fraction of its declared range. The measurements behind it: bench/real_tables.py and
bench/RESULTS.md, "Centre error on real tables" and "The centre-error band read from the
centres' separation".
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy.spatial import cKDTree

# The two-sided 90% point of a standard normal: |noise| <= Z90 std nine times in ten.
Z90 = 1.6448536269514722
# The standard deviation of a uniform variable over an interval of length 1.
UNIFORM_STD = 1.0 / math.sqrt(12.0)


@dataclass(frozen=True)
class CentreError:
    """The band per column, in the column's units and as a fraction of its declared range, and
    where its spread came from: `loss` (a released loss) or `domain` (public facts only)."""

    centre_error: tuple[float, ...]
    centre_error_fraction: tuple[float, ...]
    spread_from: str

    @property
    def worst_fraction(self) -> float:
        return max(self.centre_error_fraction, default=0.0)


def domain_spread(log_volume: float, n_cols: int, k: int) -> float:
    """The per-column spread of k clusters that fill a domain of volume exp(`log_volume`) (in
    the clustering space) evenly: (volume / k)^(1/d) / sqrt(12)."""
    return math.exp((log_volume - math.log(max(k, 1))) / max(n_cols, 1)) * UNIFORM_STD


def loss_spread(loss: float, loss_se: float | None, n_cols: int) -> float:
    """The per-column spread a released loss (a mean squared distance in the clustering space)
    allows: sqrt((loss + Z90 se) / d), floored at 0. NaN or infinity never passes."""
    high = loss + Z90 * (loss_se or 0.0)
    if not math.isfinite(high):
        raise ArithmeticError("a released loss must be finite")
    return math.sqrt(max(high, 0.0) / max(n_cols, 1))


def nearest_pair(points: np.ndarray) -> tuple[int, int, float]:
    """The two nearest of two or more points (rows) and their distance: (i, j, distance) with
    i < j. A k-d tree's nearest neighbours, never the k x k x d array of every difference,
    which a result's k up to 10,000 would make gigabytes on every read."""
    distances, neighbours = cKDTree(points).query(points, k=2)
    i = int(np.argmin(distances[:, 1]))
    j = int(neighbours[i, 1])
    return min(i, j), max(i, j), float(distances[i, 1])


def contested_share(centres: np.ndarray, spread: float) -> float:
    """The share of a cluster's rows that lie past the border with its nearest neighbour, over
    that share when the two centres coincide (1/2): 2 Phi(-D / (2 rho)), D the smallest distance
    between two released centres and rho = spread sqrt(d) the clusters' radius, everything in
    the clustering space. It takes each cluster normal with all of its spread along the line to
    that neighbour: more overlap than a normal cluster of that loss with its spread in any
    other direction (bench/real_tables.py measures what real tables do). 1 with a single centre
    or no spread; NaN or infinity never passes."""
    points = np.asarray(centres, dtype=np.float64)
    if not np.isfinite(points).all() or not math.isfinite(spread):
        raise ArithmeticError("released centres and their spread must be finite")
    if points.ndim != 2 or len(points) < 2 or spread <= 0.0:
        return 1.0
    _, _, nearest = nearest_pair(points)
    radius = spread * math.sqrt(points.shape[1])
    return math.erfc(nearest / (2.0 * radius) / math.sqrt(2.0))


def centre_error(
    noise_std: np.ndarray, spread: float, units: np.ndarray, ranges: np.ndarray, spread_from: str
) -> CentreError:
    """The band from a centre's noise std per column and the spread (both in the clustering
    space), put in each column's units (`units`: one unit of that space in the column's) and
    over its declared range."""
    band = np.hypot(Z90 * np.asarray(noise_std, dtype=np.float64), spread)
    in_units = band * units
    fractions = np.where(ranges > 0, in_units / np.where(ranges > 0, ranges, 1.0), 0.0)
    return CentreError(
        centre_error=tuple(float(v) for v in in_units),
        centre_error_fraction=tuple(float(v) for v in fractions),
        spread_from=spread_from,
    )
