"""Whether a run settled: the warnings that its centres were still moving, or that another run
may segment the rows differently, from released values and public facts only (post-processing,
no budget; docs/algorithms.md, "Warnings").

- `not-converged`: the last noisy Lloyd step moved some centre by more than that step's noise
  explains. After a converged step a centre moves by the difference of two noisy means, each
  with the noise std s_j of its release (from the plan's sigma, the step's public radius and
  the released count), so ||move_j||^2 / (2 s_j^2) is about chi-squared with d degrees of
  freedom; the warning fires when the largest of the k is above its 1 - NOT_CONVERGED_ALARM / k
  quantile (a converged run warns by chance about once in 100) and, where a noisy loss says
  how far rows sit from their centres, that centre moved by more than MOVE_SPREAD_FLOOR of
  that distance: on a large table the noise is so small that a step which moves a centre by
  0.1% of the rows' spread is beyond it, and such a move changes no segmentation. The centres
  were still moving: another run (or more budget) may end elsewhere.
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
from scipy.stats import chi2

from privclust.clustering.outputs.caveat import Caveat
from privclust.clustering.outputs.centre_error import Z90

# The chance that a converged run's last step warns `not-converged` by its noise alone.
NOT_CONVERGED_ALARM = 0.01
# Centres closer than this many root mean squared row-to-centre distances: `centres-overlap`.
OVERLAP_SPREADS = 1.0
# A last move below this share of the root mean squared row-to-centre distance is too small to
# change a segmentation, however far beyond its noise (`not-converged`).
MOVE_SPREAD_FLOOR = 0.01


def settled_move(n_cols: int, k: int) -> float:
    """The largest `last_move` (privclust.clustering.mechanisms.lloyd.last_move_ratio: a move
    over s_j sqrt(d)) that a converged step's noise explains: sqrt(2 q / d), q the chi-squared
    quantile with d degrees of freedom at 1 - NOT_CONVERGED_ALARM / k."""
    d = max(n_cols, 1)
    q = float(chi2.ppf(1.0 - NOT_CONVERGED_ALARM / max(k, 1), d))
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
    if last_move is None or not math.isfinite(last_move):
        return []
    limit = settled_move(n_cols, k)
    if last_move <= limit:
        return []
    if spread is not None and last_shift is not None and last_shift <= MOVE_SPREAD_FLOOR * spread:
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
    gaps = np.sqrt(((points[:, None, :] - points[None, :, :]) ** 2).sum(axis=2))
    gaps[np.diag_indices(len(points))] = np.inf
    i, j = np.unravel_index(int(np.argmin(gaps)), gaps.shape)
    if not gaps[i, j] < OVERLAP_SPREADS * spread:
        return []
    return [
        Caveat(
            "centres-overlap",
            f"centres {min(i, j)} and {max(i, j)} are {gaps[i, j]:.3g} apart, closer than the "
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
