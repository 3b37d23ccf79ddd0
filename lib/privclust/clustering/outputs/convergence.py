"""Whether a run settled: the warnings that its centres were still moving, or that another run
may segment the rows differently, from released values and public facts only (post-processing,
no budget; docs/algorithms.md, "Warnings").

- `not-converged`: the last noisy Lloyd step moved the centres by more than that step's noise
  explains AND by enough to matter for the loss. (1) After a converged step a centre moves by
  the difference of two noisy means, each with the noise std s_j of its release (from the
  plan's sigma, the step's public radius and the released count), so ||move_j||^2 / (2 s_j^2)
  is about chi-squared with d degrees of freedom; the first test passes when the largest of the
  k is above its 1 - NOT_CONVERGED_ALARM / k quantile, which noise alone does for at most
  NOT_CONVERGED_ALARM (1%) of converged runs. (2) A step to the means of fixed clusters lowers
  the loss per row by the mean squared move of a row's centre (`last_shift` squared); while
  Lloyd's steps converge at a linear rate rho, the decreases still to come add up to rho /
  (1 - rho) times the last, at most 9 times it for rho <= 0.9. The second test passes when
  the last decrease is above MOVE_LOSS_SHARE = 0.2% of the loss (the noisy loss taken Z90
  standard errors high), so that what is left could exceed 2%: the difference at which two
  runs' segmentations count as different in bench/real_tables.py. A drift below it changes the
  loss by less than that however far beyond its noise (large tables, whose steps' noise is
  tiny, drift so for many steps). Neither threshold was read off the benchmark's runs; both
  only ever lower the 1% rate of (1).
- `centres-overlap`: two released centres are closer than the root mean squared distance from
  a row to its centre (from the noisy loss, taken Z90 standard errors high). The clusters then
  overlap, k-means' objective is flat between them, and another run may draw the border
  elsewhere or merge the two.

The measurement behind both (pairs of runs whose losses differ by more than 2% of KMeans',
against settings where every run agrees): bench/real_tables.py and bench/RESULTS.md,
"Warnings that a run may differ".
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from scipy.special import gammaincinv

from privclust.clustering.outputs.caveat import Caveat
from privclust.clustering.outputs.centre_error import Z90, nearest_pair

# The chance that a converged run's last step warns `not-converged` by its noise alone.
NOT_CONVERGED_ALARM = 0.01
# Centres closer than this many root mean squared row-to-centre distances: `centres-overlap`.
OVERLAP_SPREADS = 1.0
# A last step whose moves lowered the loss by at most this share of it is settled enough, however
# far beyond its noise (`not-converged`; the module's docstring derives it).
MOVE_LOSS_SHARE = 0.002


def settled_move(n_cols: int, k: int) -> float:
    """The largest `last_move` (privclust.clustering.mechanisms.lloyd.last_move_ratio: a move
    over s_j sqrt(d)) that a converged step's noise explains: sqrt(2 q / d), q the chi-squared
    quantile with d degrees of freedom at 1 - NOT_CONVERGED_ALARM / k."""
    d = max(n_cols, 1)
    # The chi-squared quantile as scipy.stats computes it (2 P^-1(d/2, p)), without importing
    # scipy.stats, which costs every process that starts the service half a second.
    q = 2.0 * float(gammaincinv(d / 2.0, 1.0 - NOT_CONVERGED_ALARM / max(k, 1)))
    return math.sqrt(2.0 * q / d)


def rows_spread(loss: float | None, loss_se: float | None) -> float | None:
    """The root mean squared distance from a row to its centre that a released loss allows,
    taken Z90 standard errors high: sqrt(loss + Z90 se), floored at 0; None without a loss."""
    if loss is None:
        return None
    return math.sqrt(max(loss + Z90 * (loss_se or 0.0), 0.0))


def moving_warnings(
    last_move: float | None, last_shift: float | None, spread: float | None, n_cols: int, k: int
) -> list[Caveat]:
    """`not-converged` when the last step's largest move over its noise (`last_move`) is above
    `settled_move` and, where a noisy loss gives the rows' squared spread, the mean squared move
    of a row's centre (`last_shift` squared) is above MOVE_LOSS_SHARE of it."""
    if last_move is None or not math.isfinite(last_move):
        return []
    limit = settled_move(n_cols, k)
    if last_move <= limit:
        return []
    if (
        spread is not None
        and last_shift is not None
        and last_shift**2 <= MOVE_LOSS_SHARE * spread**2
    ):
        return []
    return [
        Caveat(
            "not-converged",
            f"the last noisy Lloyd step moved a centre {last_move:.3g} times as far as that "
            f"step's noise (more than the {limit:.3g} that noise alone explains): the centres "
            "were still moving, so another run may end with other centres and another "
            "segmentation. A larger epsilon (which buys more Lloyd steps and less noise), fewer "
            "clusters or tighter declared bounds help; compare two runs before relying on one.",
        )
    ]


def overlap_warnings(
    centres: np.ndarray,
    units: np.ndarray | None,
    loss: float | None,
    loss_se: float | None,
) -> list[Caveat]:
    """`centres-overlap` from the released centres (in the columns' units; `units`: one unit of
    the clustering space in each column's units) and the released loss (in that space)."""
    spread = rows_spread(loss, loss_se)
    if units is None or spread is None or len(centres) < 2:
        return []
    scale = np.where(np.asarray(units, dtype=np.float64) > 0, units, 1.0)
    points = np.asarray(centres, dtype=np.float64) / scale
    if not np.isfinite(points).all():  # no distance to read (as a NaN gap never warned)
        return []
    i, j, gap = nearest_pair(points)
    if not gap < OVERLAP_SPREADS * spread:
        return []
    return [
        Caveat(
            "centres-overlap",
            f"centres {i} and {j} are {gap:.3g} apart, closer than the "
            f"typical distance from a row to its centre ({spread:.3g}, from the noisy loss; "
            "both in the clustering space): their clusters overlap, so another run may draw "
            "the border between them elsewhere or merge them. Try a smaller k, or compare two "
            "runs before relying on the segmentation.",
        )
    ]


def convergence_warnings(
    centres: np.ndarray | Sequence[Sequence[float]],
    *,
    units: np.ndarray | None = None,
    loss: float | None = None,
    loss_se: float | None = None,
    last_move: float | None = None,
    last_shift: float | None = None,
) -> list[Caveat]:
    """`not-converged` and `centres-overlap` of one run's released values (`last_move` and
    `last_shift` as a result has them)."""
    points = np.asarray(centres, dtype=np.float64)
    k, d = points.shape
    spread = rows_spread(loss, loss_se)
    return moving_warnings(last_move, last_shift, spread, d, k) + overlap_warnings(
        points, units, loss, loss_se
    )
