"""When a noisy figure says nothing: the warnings a result or a sweep carries, from released
values and public facts only (post-processing, no budget).

Every rule reads a released figure next to the standard deviation of its noise, which is
public (it follows from the plan's sigma, the declared domain and N~):
- `loss-not-informative`: the noisy loss is within TWO_SE standard errors of zero, so it cannot
  be told from a perfect clustering;
- `size-below-noise`: a noisy size is below TWO_SE standard deviations of its noise, so that
  cluster may be empty;
- `domain-loose`: every released centre sits in a small part of the declared domain (in every
  column within LOOSE_FRACTION of its range), so the domain is far looser than the data
  seems to need, and every noisy figure pays for it (the noise scales with the domain). A
  centre whose noisy size is below noise is left out: its cluster may be empty and its
  position is then mostly noise, spread over the whole domain;
- `sweep-inconclusive`: no larger k of a sweep has a noisy loss below a smaller k's by more
  than noise alone explains (`ks_told_apart`), so the sweep cannot tell its ks apart and
  suggests none;
- `sweep-loss-rises`: a larger k has a noisy loss above a smaller k's by more than noise
  explains (`loss_rises`). The k-means loss of the best k centres never rises with k, so such
  losses measure the noise or a run that failed, not the data's structure: no k is suggested;
- `sweep-elbow-unclear`: the losses fall with k, but the elbow rule read with its noise
  allowance for the smaller k and against it gives different ks: the noise decides where the
  fall stops, so no k is suggested;
- `suggested-k-largest`: the suggestion is the largest k tried: the elbow may lie beyond it;
- `suggested-k-budget`: every suggestion reads noisy losses, so another budget (or another
  sweep) may suggest another k;
- `not-converged` and `centres-overlap`: the run may not have settled, or another run may
  segment the rows differently (privclust.clustering.outputs.convergence).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np
from scipy.special import ndtri

from privclust.clustering.choices import Relation
from privclust.clustering.outputs.caveat import Caveat
from privclust.clustering.outputs.convergence import convergence_warnings
from privclust.clustering.run.schedule import summary_sigmas

if TYPE_CHECKING:
    from privclust.clustering.run.result import ClusteringResult

# How many standard errors make a difference (about a 5% two-sided test for one figure).
TWO_SE = 2.0
# Released centres all within this fraction of every column's declared range: a loose domain.
LOOSE_FRACTION = 0.1
# `ks_told_apart`: the chance that noise alone makes some two losses of a sweep look different.
SWEEP_FALSE_ALARM = 0.05
# The elbow rule's noise allowance, in standard errors (privclust.clustering.sweeps).
ELBOW_SE = 2.0


def loss_warnings(loss: float | None, loss_se: float | None) -> list[Caveat]:
    if loss is None or loss_se is None or not loss <= TWO_SE * loss_se:
        return []
    return [
        Caveat(
            "loss-not-informative",
            f"the noisy loss ({loss:.4g}) is within {TWO_SE:g} standard errors ({loss_se:.3g} "
            "each) of zero: it cannot be told from a perfect clustering. A larger epsilon, "
            "more rows or tighter declared bounds lower the noise.",
        )
    ]


def size_warnings(
    sizes: Sequence[float] | np.ndarray | None, sizes_se: float | None
) -> list[Caveat]:
    if sizes is None or sizes_se is None:
        return []
    small = [j for j, size in enumerate(sizes) if size < TWO_SE * sizes_se]
    if not small:
        return []
    return [
        Caveat(
            "size-below-noise",
            f"the noisy sizes of centres {', '.join(map(str, small))} are below {TWO_SE:g} "
            f"standard deviations of their noise ({sizes_se:.3g}): those clusters may be empty.",
        )
    ]


def domain_warnings(
    centres: np.ndarray,
    lower: np.ndarray,
    upper: np.ndarray,
    sizes: Sequence[float] | np.ndarray | None = None,
    sizes_se: float | None = None,
) -> list[Caveat]:
    """`domain-loose` when, in every column with a positive declared range, the released
    centres span at most LOOSE_FRACTION of it (at least two centres; a single one says
    nothing). With noisy sizes, centres whose size is below noise are not counted."""
    points = np.asarray(centres, dtype=np.float64)
    if sizes is not None and sizes_se is not None:
        points = points[np.asarray(sizes, dtype=np.float64) >= TWO_SE * sizes_se]
    widths = np.asarray(upper, dtype=np.float64) - np.asarray(lower, dtype=np.float64)
    used = widths > 0
    if len(points) < 2 or not used.any():
        return []
    spans = (points.max(axis=0) - points.min(axis=0))[used] / widths[used]
    if not np.all(spans <= LOOSE_FRACTION):
        return []
    return [
        Caveat(
            "domain-loose",
            f"the released centres span at most {100 * float(spans.max()):.2g}% of any "
            "column's declared range: the declared domain looks far looser than the data, and "
            "every noisy figure's error grows with it. Tighter public bounds (declared, never "
            "read from the data) would give more accurate results for the same budget.",
        )
    ]


def pair_threshold(n_losses: int) -> float:
    """z for the m = n(n-1)/2 pairs of n losses: a two-sided test at SWEEP_FALSE_ALARM / m per
    pair (Bonferroni), so that with no real difference the chance that any pair passes is at
    most SWEEP_FALSE_ALARM (2.39 standard errors for 3 ks, 2.64 for 4, 2.81 for 5)."""
    pairs = max(n_losses * (n_losses - 1) // 2, 1)
    return float(-ndtri(SWEEP_FALSE_ALARM / (2 * pairs)))


def ks_told_apart(losses: Sequence[float], ses: Sequence[float]) -> bool:
    """Whether the loss of some larger k (a later entry: losses in increasing order of k) is
    below a smaller k's by more than `pair_threshold` standard errors of their difference: if
    the ks' true losses were all equal, noise alone would pass this with a chance of at most
    SWEEP_FALSE_ALARM."""
    z = pair_threshold(len(losses))
    return any(
        losses[i] - losses[j] > z * math.hypot(ses[i], ses[j])
        for i, j in itertools.combinations(range(len(losses)), 2)
    )


def loss_rises(losses: Sequence[float], ses: Sequence[float]) -> bool:
    """Whether the loss of some larger k (losses in increasing order of k) is above a smaller
    k's by more than `pair_threshold` standard errors of their difference: the best loss never
    rises with k, so this is the noise's (or a failed run's) doing, with a chance of at most
    SWEEP_FALSE_ALARM when the true losses are equal."""
    z = pair_threshold(len(losses))
    return any(
        losses[j] - losses[i] > z * math.hypot(ses[i], ses[j])
        for i, j in itertools.combinations(range(len(losses)), 2)
    )


def sweep_warnings(
    ks: Sequence[int], losses: Sequence[float], ses: Sequence[float], suggested: int | None
) -> list[Caveat]:
    """The notes of a finished sweep: why it suggests no k; or that its suggestion depends on
    the budget, and when it is its largest k."""
    order = sorted(range(len(ks)), key=lambda i: ks[i])
    by_k, ses_by_k = [losses[i] for i in order], [ses[i] for i in order]
    if suggested is None and loss_rises(by_k, ses_by_k):
        return [
            Caveat(
                "sweep-loss-rises",
                "a larger k has a higher noisy loss than a smaller one, by more than noise alone "
                f"explains ({pair_threshold(len(ks)):.2f} standard errors of their difference). "
                "The best loss never rises with k, so these losses measure the noise (or a run "
                "that failed), not the data: no k is suggested. A larger epsilon, more rows or "
                "tighter declared bounds lower the noise.",
            )
        ]
    if suggested is None and ks_told_apart(by_k, ses_by_k):
        return [
            Caveat(
                "sweep-elbow-unclear",
                "the noisy losses fall with k, but where the fall stops depends on their noise: "
                f"read with {ELBOW_SE:g} standard errors for the smaller k or against it, the "
                "elbow rule gives different ks, so no k is suggested. A larger epsilon, more "
                "rows or tighter declared bounds lower the noise; the losses and their errors "
                "are there to read.",
            )
        ]
    if suggested is None:
        spread = max(ses) if ses else 0.0
        return [
            Caveat(
                "sweep-inconclusive",
                "the noisy losses cannot tell the ks apart: no two differ by more than noise "
                f"alone explains ({pair_threshold(len(ks)):.2f} standard errors of their "
                f"difference; each loss's is up to {spread:.3g}), so no k is suggested. A "
                "larger epsilon, more rows or tighter declared bounds lower the noise.",
            )
        ]
    notes = [
        Caveat(
            "suggested-k-budget",
            f"the suggested k ({suggested}) is read from noisy losses: a sweep with another "
            "budget, or the same one again, may suggest another k. Where the noise is small "
            "next to the drops between ks it is stable.",
        )
    ]
    if len(ks) > 1 and suggested == max(ks):
        notes.append(
            Caveat(
                "suggested-k-largest",
                f"the suggested k ({suggested}) is the largest one tried: a larger k may lower "
                "the loss further.",
            )
        )
    return notes


def sizes_noise_std(summary_mu: float | None, relation: str) -> float | None:
    """The standard deviation of the noise on each released size of a run with summaries."""
    if summary_mu is None:
        return None
    sizes_sigma, _ = summary_sigmas(summary_mu)
    return sizes_sigma * Relation(relation).count_sensitivity


def figure_warnings(
    centres: np.ndarray,
    lower: np.ndarray,
    upper: np.ndarray,
    *,
    loss: float | None = None,
    loss_se: float | None = None,
    sizes: Sequence[float] | np.ndarray | None = None,
    sizes_se: float | None = None,
    units: np.ndarray | None = None,
    last_move: float | None = None,
    last_shift: float | None = None,
) -> list[Caveat]:
    """Every warning of one run's released figures: its loss, its sizes, its domain (the
    declared range of each column: a box's bounds, or c +- R for a ball), and whether it
    settled (`convergence_warnings`: `units` is one unit of the clustering space in each
    column's units, `last_move` and `last_shift` the result's)."""
    return (
        loss_warnings(loss, loss_se)
        + size_warnings(sizes, sizes_se)
        + domain_warnings(centres, lower, upper, sizes, sizes_se)
        + convergence_warnings(
            centres,
            units=units,
            loss=loss,
            loss_se=loss_se,
            last_move=last_move,
            last_shift=last_shift,
        )
    )


def run_warnings(result: ClusteringResult, lower: np.ndarray, upper: np.ndarray) -> list[Caveat]:
    """`figure_warnings` of a library run's result, with its sizes' noise (if it has sizes); a
    run on per-column bounds clusters with each column scaled to its range, a ball's in the
    columns' own units."""
    box = getattr(result, "box", None)
    units = np.ones(np.shape(result.centers)[1]) if box is None else box.widths
    return figure_warnings(
        result.centers,
        lower,
        upper,
        loss=result.loss,
        loss_se=result.loss_se,
        sizes=result.sizes,
        sizes_se=sizes_noise_std(result.summary_mu, result.relation),
        units=units,
        last_move=result.last_move,
        last_shift=result.last_shift,
    )
