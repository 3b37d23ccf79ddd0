"""pe-lloyd above PROJECT_ABOVE_DIM columns (privclust.clustering.methods.pe_lloyd): HDPE-means'
projected stage (privclust.clustering.mechanisms.projection), then Lloyd steps in the full
space, each after moving starving centres beside crowded ones by the latest released counts:
its releases and its run."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from privclust.clustering.mechanisms.lloyd import lloyd_steps_part
from privclust.clustering.mechanisms.projection import (
    default_projected_iterations,
    evolve_in_projection,
    planned_projection_dim,
    projected_parts,
    sum_weight_before_lloyd,
)
from privclust.clustering.methods.lloyd_chain import LloydChain, plan_lloyd_releases
from privclust.clustering.run.method import RunStart
from privclust.clustering.run.options import Options
from privclust.clustering.run.plan import PlanBasis, Releases, planned_iterations
from privclust.clustering.run.result import Outcome

# The Lloyd steps' default share of mu^2, and the ratio of released counts from which a
# starving centre is moved beside a crowded one before a step (the runs with these defaults:
# bench/RESULTS.md, "auto at every dimension").
PROJECTED_LLOYD_SHARE = 0.3
PROJECTED_RESEED_RATIO = 3.0


@dataclass(frozen=True)
class ProjectedSplit:
    """The releases of a projected run: T vote histograms, the counts (one release) and the
    sums (`sum_weight` releases), then `steps` Lloyd steps of `weight` releases each."""

    steps: int
    sum_weight: int
    weight: int
    releases: int
    progress_total: int


def plan_projected_releases(
    iterations: int, lloyd_steps: int | None, lloyd_share: float | None
) -> ProjectedSplit:
    """The split of a projected run with T PE iterations: the stage's T + 1 + sum weight
    releases, then Lloyd steps with `lloyd_share` (default PROJECTED_LLOYD_SHARE) of mu^2;
    progress after every PE iteration, the noisy means and every Lloyd step."""
    sum_weight = sum_weight_before_lloyd(iterations)
    stage = iterations + 1 + sum_weight
    share = PROJECTED_LLOYD_SHARE if lloyd_share is None else lloyd_share
    steps, weight, releases, _ = plan_lloyd_releases(stage, lloyd_steps, share)
    return ProjectedSplit(steps, sum_weight, weight, releases, iterations + 1 + steps)


def plan_projected(basis: PlanBasis, options: Options) -> Releases:
    """The projected stage's releases (T vote histograms in the projection, the counts and the
    sums), then the Lloyd steps (plan_projected_releases)."""
    p = planned_projection_dim(basis, options)
    iterations = planned_iterations(options, lambda: default_projected_iterations(p))
    split = plan_projected_releases(iterations, options.lloyd_steps, options.lloyd_share)
    steps = lloyd_steps_part(basis, basis.n_cols, split.steps, weight=split.weight)
    return Releases(
        iterations=iterations,
        parts=(*projected_parts(basis, iterations, split.sum_weight), steps),
        progress_total=split.progress_total,
        projection_dim=p,
    )


def run_projected(start: RunStart, options: Options) -> Outcome:
    """PE-means in the projection and the clusters' noisy means (`evolve_in_projection`), then
    the Lloyd steps, each after moving starving centres beside crowded ones by the latest
    released counts (`LloydChain` with PROJECTED_RESEED_RATIO)."""
    plan = start.plan
    split = plan_projected_releases(plan.iterations, options.lloyd_steps, options.lloyd_share)
    if split.releases != plan.releases:  # the plan and the run must price the same releases
        raise ArithmeticError("pe-lloyd release count does not match its plan")
    means = evolve_in_projection(start, options, split.sum_weight)
    options.report(plan.iterations + 1, plan.progress_total)
    chain = LloydChain(
        start, options.report, split.weight, options.step_rule, PROJECTED_RESEED_RATIO
    )
    counts = means.counts.astype(np.float64)
    end = chain.steps(means.centres, split.steps, plan.iterations + 1, counts)
    return Outcome(end.centres, means.final_variations, end.moved)
