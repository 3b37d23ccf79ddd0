"""pe-lloyd's chains of noisy Lloyd steps in the full space: how many steps there are and what
each is priced as (`plan_lloyd_releases`), each step's clipping radii from the current centres
(`step_radii`), and the chain itself: its releases through the rows' door, optionally after
moving starving centres beside crowded ones, and how far its last step moved the centres
against that step's noise."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from privclust.clustering.choices import Algorithm
from privclust.clustering.errors import check_below_one, check_integer
from privclust.clustering.evolution.nearest import nearest_other_distances
from privclust.clustering.mechanisms.lloyd import (
    DEFAULT_LLOYD_STEPS,
    NoisyLloyd,
    count_multiplier,
    default_count_share,
    reseed_beside,
    step_radius,
)
from privclust.clustering.run.method import RunStart
from privclust.clustering.run.options import DEFAULT_STEP_FRACTION, DEFAULT_STEP_RULE, Progress

# The clipping radius of a Lloyd step: FastLloyd's own (the rule is named after the method), or
# one per cluster from the released centres (the default).
FASTLLOYD_STEP_RULE = Algorithm.FASTLLOYD.value
STEP_RULES = (FASTLLOYD_STEP_RULE, DEFAULT_STEP_RULE)
# The smallest per-cluster step radius, in units of R (two released centres may coincide).
MIN_STEP_FRACTION = 1e-3
DEFAULT_LLOYD_SHARE = 0.1
MAX_LLOYD_STEPS = 10
# A Lloyd step priced as more releases than this would be a tiny share of nothing useful; the
# cap keeps the release count (stored with the job) a modest integer.
MAX_LLOYD_WEIGHT = 100_000


def lloyd_weight(pe_iterations: int, steps: int, share: float) -> int:
    """w, the number of releases each Lloyd step is priced as, so that the steps get about
    `share` of mu^2: steps w / (T + steps w) ~ share."""
    ideal = share * pe_iterations / ((1.0 - share) * steps)
    return int(min(max(round(ideal), 1), MAX_LLOYD_WEIGHT))


def step_radii(centres: np.ndarray, radius: float, k: int, rule: str) -> float | np.ndarray:
    """The Lloyd step's clipping radius: FastLloyd's min(R, 2R / k^(1/d)) (FASTLLOYD_STEP_RULE),
    or per cluster half the distance from its centre to the nearest other centre, within
    [MIN_STEP_FRACTION R, FastLloyd's radius] (DEFAULT_STEP_RULE). Both read only public values (the
    centres are released PE-means output), so the step's sensitivity is data-independent."""
    d = centres.shape[1]
    fixed = step_radius(2, radius, d, k, DEFAULT_STEP_FRACTION)
    if rule == FASTLLOYD_STEP_RULE or len(centres) < 2:
        return fixed
    gaps = nearest_other_distances(np.asarray(centres, dtype=np.float64))
    return np.clip(gaps / 2.0, MIN_STEP_FRACTION * radius, fixed)


def plan_lloyd_releases(
    pe_iterations: int,
    lloyd_steps: int | None,
    lloyd_share: float | None,
    default_steps: int = DEFAULT_LLOYD_STEPS,
    second_steps: int = 0,
) -> tuple[int, int, int, int]:
    """(steps, weight, releases, progress_total) of a pe-lloyd run with T PE iterations:
    T vote histograms plus `steps` Lloyd steps (`default_steps` unless given) priced as
    `weight` releases each; with a second start (privclust.clustering.mechanisms.candidates),
    its `second_steps` Lloyd steps and the two chains' loss releases, `weight` releases each,
    too. Progress is reported after every PE iteration and every Lloyd step."""
    steps = check_integer(
        "lloyd_steps",
        default_steps if lloyd_steps is None else lloyd_steps,
        1,
        MAX_LLOYD_STEPS,
    )
    share = check_below_one(
        "lloyd_share", DEFAULT_LLOYD_SHARE if lloyd_share is None else lloyd_share
    )
    lloyd = steps + second_steps + (2 if second_steps else 0)
    weight = lloyd_weight(pe_iterations, steps + second_steps, share)
    return steps, weight, pe_iterations + lloyd * weight, pe_iterations + steps + second_steps


@dataclass(frozen=True)
class ChainEnd:
    """Where a chain ended: its centres, its last step's noisy counts and its last move
    against the noise (`last_move_ratio`; None after no step)."""

    centres: np.ndarray
    counts: np.ndarray
    moved: tuple[float, float] | None


class LloydChain:
    """Noisy Lloyd steps of one run, each priced as `weight` releases, with the step radii of
    `rule` (`step_radii`: public, a function of released centres); with a `reseed_ratio`,
    before each step the starving centres are moved beside crowded ones by the latest released
    counts (`lloyd.reseed_beside`: post-processing)."""

    def __init__(
        self,
        start: RunStart,
        report: Progress,
        weight: int,
        rule: str,
        reseed_ratio: float | None = None,
    ) -> None:
        n_cols = start.points.shape[1]
        self.start, self.report, self.rule = start, report, rule
        self.reseed_ratio = reseed_ratio
        multiplier = count_multiplier(n_cols, default_count_share(n_cols))
        self.lloyd = NoisyLloyd(
            start.points, start.plan, start.radius, multiplier, start.rng, weight
        )

    def steps(
        self, centres: np.ndarray, count: int, done: int, counts: np.ndarray | None = None
    ) -> ChainEnd:
        """`count` steps from `centres` (whose released noisy `counts`, when known, the first
        reseeding reads); progress reported from `done` on."""
        start = self.start
        counts = np.zeros(len(centres)) if counts is None else counts
        moved: tuple[float, float] | None = None
        for i in range(1, count + 1):
            radii = step_radii(centres, start.radius, start.plan.k, self.rule)
            if self.reseed_ratio is not None:
                centres, radii = reseed_beside(
                    centres,
                    counts,
                    self.reseed_ratio,
                    np.broadcast_to(radii, start.plan.k),
                    start.radius,
                    start.rng,
                )
            centres, counts, moved = self.lloyd.step(centres, radii)
            self.report(done + i, start.plan.progress_total)
        return ChainEnd(centres, counts, moved)
