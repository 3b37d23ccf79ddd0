"""PE-means as the search stage of a run (PE-means itself, pe-lloyd before its Lloyd steps,
the projected stage of HDPE-means and pe-lloyd): the evolution on the run's rows or on a
projection of them, with the run's plan, domain and generator."""

from __future__ import annotations

from privclust.clustering.data.rows import Rows
from privclust.clustering.evolution.evolution import evolve
from privclust.clustering.run.method import RunStart
from privclust.clustering.run.options import Options
from privclust.clustering.run.result import Outcome


def search(rows: Rows, start: RunStart, options: Options) -> Outcome:
    """The PE-means loop on `rows` (the run's own or their projection): `start.plan`'s vote
    histograms with noise from the job's generator, the initial packing from `options.rng`
    (None: ChaCha20), progress reported after each iteration."""
    return evolve(
        rows,
        start.plan,
        radius=start.radius,
        rng=start.rng,
        packing_rng=options.rng,
        progress=options.progress,
    )
