"""The PE-means loop (docs/algorithms.md section 4): private evolution of candidate centres by
noisy vote histograms, shared by PE-means, HDPE-means (in its projection) and pe-lloyd."""

from __future__ import annotations

import numpy as np

from privclust.clustering.data.release import Gaussian
from privclust.clustering.data.rows import Rows
from privclust.clustering.evolution.histogram import adapt_variations, postprocess_votes
from privclust.clustering.evolution.nearest import GroupLayout
from privclust.clustering.evolution.packing import initial_population
from privclust.clustering.evolution.selection import select_centres
from privclust.clustering.evolution.variation import Variations
from privclust.clustering.evolution.vote import VoteCounts, one_blas_thread
from privclust.clustering.run.options import Progress
from privclust.clustering.run.plan import RunPlan
from privclust.clustering.run.result import Outcome
from privclust.privacy import noise


def evolve(
    points: Rows,
    plan: RunPlan,
    *,
    radius: float,
    rng: np.random.Generator,
    packing_rng: np.random.Generator | None,
    progress: Progress | None,
) -> Outcome:
    """The PE-means loop on centred rows: `plan.iterations` noisy nearest-candidate histograms,
    each an integer Gaussian release of sensitivity `plan.count_sensitivity` with noise
    multiplier `plan.sigma`; everything else is post-processing of those releases and of the
    public row count `plan.n_rows`. Returns the last selection (k centres) and the final L."""
    d = points.shape[1]
    k = plan.k
    population = initial_population((plan.variations + 1) * k, d, radius, packing_rng)
    current_l = plan.variations
    selection: np.ndarray | None = None
    layout: GroupLayout | None = None  # the sphere packing has no group structure
    recipe: Variations | None = None
    sensitivity = plan.count_sensitivity
    vote_noise = (Gaussian(sensitivity, plan.sigma),)
    # The variations are published post-processing; they take a fast generator keyed from rng
    # (noise.variation_generator), the noise stays on rng.
    variation_rng = noise.variation_generator(rng)
    with one_blas_thread():  # see there: idle BLAS threads would slow the next vote
        for t in range(1, plan.iterations + 1):
            (noisy,) = points.release(VoteCounts(population, layout, recipe), vote_noise, rng)
            processed = postprocess_votes(noisy, plan.n_rows)
            selection = select_centres(population, processed, k, selection, rng)
            current_l = adapt_variations(
                current_l, processed, sensitivity * plan.sigma, len(population)
            )
            if t < plan.iterations:
                recipe, population = Variations.draw(selection, current_l, radius, variation_rng)
                layout = GroupLayout(anchors=k, per_anchor=current_l)
            if progress is not None:
                progress(t, plan.progress_total)
    assert selection is not None  # iterations >= 1
    return Outcome(centres=selection, final_variations=current_l)
