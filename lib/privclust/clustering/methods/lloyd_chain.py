"""A chain of noisy Lloyd steps in the full space (pe-lloyd's refinement): each step's radii
from the current centres, its release through the rows' door, and how far its last step moved
the centres against that step's noise."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from privclust.clustering.mechanisms.lloyd import (
    NoisyLloyd,
    count_multiplier,
    default_count_share,
)
from privclust.clustering.run.method import RunStart
from privclust.clustering.run.options import Progress


@dataclass(frozen=True)
class ChainEnd:
    """Where a chain ended: its centres, its last step's noisy counts and its last move
    against the noise (`last_move_ratio`; None after no step)."""

    centres: np.ndarray
    counts: np.ndarray
    moved: tuple[float, float] | None


class LloydChain:
    """Noisy Lloyd steps of one run, each priced as `weight` releases, with step radii
    `radii(centres)` (public: a function of released centres)."""

    def __init__(
        self,
        start: RunStart,
        progress: Progress | None,
        weight: int,
        radii: Callable[[np.ndarray], float | np.ndarray],
    ) -> None:
        n_cols = start.points.shape[1]
        self.start, self.progress, self.radii = start, progress, radii
        multiplier = count_multiplier(n_cols, default_count_share(n_cols))
        self.lloyd = NoisyLloyd(
            start.points, start.plan, start.radius, multiplier, start.rng, weight
        )

    def steps(self, centres: np.ndarray, count: int, done: int) -> ChainEnd:
        """`count` steps from `centres`; progress reported from `done` on."""
        plan = self.start.plan
        counts = np.zeros(len(centres))
        moved: tuple[float, float] | None = None
        for i in range(1, count + 1):
            centres, counts, moved = self.lloyd.step(centres, self.radii(centres))
            if self.progress is not None:
                self.progress(done + i, plan.progress_total)
        return ChainEnd(centres, counts, moved)
