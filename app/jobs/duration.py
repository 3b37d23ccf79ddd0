"""How long a job will run, from public facts only: the method its plan runs, k, d, the public
row count (the released noisy count, or N when declared public), the plan's iterations, its
population and projection, its Lloyd steps, and the engine. Nothing read from the rows.

A job's work is counted per row: a PE-means iteration searches its population for each row's
nearest candidate (a cost of the log of the population), a Lloyd step compares each row with
the k centres (FastLloyd's in d dimensions), an LSH-coreset level hashes each row's d
coordinates. Its run time is a per-method fixed cost plus a per-method cost of each unit of
work, both calibrated on the machine that serves (bench/duration.py measures them and prints
`COSTS`), with the factor that held the calibration's times around the prediction as the
range. It is a CPU time (an idle machine's run time); a busy machine stretches it. The time a
job waits in the queue is not in it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from privclust.clustering import Algorithm


@dataclass(frozen=True)
class Cost:
    """seconds = fixed + per_unit * work units; `spread`: the factor that held every
    calibration run's time around its prediction (the range is [seconds / spread, seconds *
    spread])."""

    fixed: float
    per_unit: float
    spread: float


# Calibrated by `bench/duration.py calibrate` (CPU time in process, one BLAS thread, as a worker
# runs with PRIVCLUST_WORKER_THREADS=1; pe-lloyd on make_blobs tables of 4,000 to 200,000 rows,
# d 3 to 40, epsilon 1 and 10; the other methods 4,000 to 60,000 rows, d 3 and 10, epsilon 1).
# Re-run it on the machine the workers run on and paste its output.
COSTS: dict[str, Cost] = {
    Algorithm.PE_MEANS: Cost(fixed=0.0132, per_unit=1.08e-07, spread=1.6),
    Algorithm.HDPE_MEANS: Cost(fixed=0.0, per_unit=1.34e-07, spread=1.8),
    Algorithm.PE_LLOYD: Cost(fixed=0.0276, per_unit=4.48e-08, spread=2.6),
    Algorithm.FASTLLOYD: Cost(fixed=0.0092, per_unit=7.27e-09, spread=2.4),
    Algorithm.LSH_CORESET: Cost(fixed=0.007, per_unit=1.89e-08, spread=15.2),
}
# A Dask cluster adds a round trip per pass over the rows, not calibrated here: on Dask the
# range is widened by this factor.
DASK_SPREAD = 3.0


@dataclass(frozen=True)
class PlanFacts:
    """The public facts of a job's plan that its run time depends on."""

    algorithm: str
    n_rows: int
    n_cols: int
    k: int
    iterations: int
    population_size: int
    projection_dim: int | None
    # The plan's noisy Lloyd steps (privclust's RunPlan.lloyd_steps): pe-lloyd's after PE-means.
    lloyd_steps: int


@dataclass(frozen=True)
class Duration:
    seconds: float
    low: float
    high: float
    engine: str


def work_units(facts: PlanFacts) -> float:
    """The plan's work, in units whose cost the calibration measures."""
    n, d, k = facts.n_rows, facts.n_cols, facts.k
    if facts.algorithm == Algorithm.FASTLLOYD:  # every row against every centre, each step
        return float(n * d * k * facts.iterations)
    if facts.algorithm == Algorithm.LSH_CORESET:  # every row hashed, each level
        return float(n * d * facts.iterations)
    # A PE-means vote: each row's nearest candidate, found by a search (a KD-tree, or
    # candidates grouped around anchors) whose cost per row grows with the log of the
    # population; measured, it does not grow with d (bench/duration.py). HDPE-means ends with
    # one step in the full space, pe-lloyd with its Lloyd steps: each row against the k centres.
    vote = facts.iterations * math.log2(max(facts.population_size, 2))
    if facts.algorithm == Algorithm.PE_MEANS:
        return float(n * vote)
    steps = 1 if facts.algorithm == Algorithm.HDPE_MEANS else facts.lloyd_steps
    return float(n * (vote + steps * k))


def expected_duration(facts: PlanFacts, engine: str) -> Duration:
    cost = COSTS[facts.algorithm]
    seconds = cost.fixed + cost.per_unit * work_units(facts)
    spread = cost.spread * (DASK_SPREAD if engine == "dask" else 1.0)
    return Duration(seconds=seconds, low=seconds / spread, high=seconds * spread, engine=engine)
