"""A clustering method as the planner and the runner see it (`Method`: its plan and its
releases, its run), and the part of every plan that follows a method's own: the population,
the noise multiplier and the noise cap.

Each method is one module (privclust.clustering.methods) that builds one `Method`; the registry
(privclust.clustering.registry) maps each name to it. Methods import this module and the
mechanisms below it, never each other.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from privclust.clustering.choices import Algorithm, Relation
from privclust.clustering.data.release import Gaussian
from privclust.clustering.data.rows import Rows
from privclust.clustering.errors import ClusteringInputError, check_integer
from privclust.clustering.run.options import Options
from privclust.clustering.run.plan import (
    MIN_VARIATIONS,
    PlanBasis,
    Releases,
    RunPlan,
    default_variations,
)
from privclust.clustering.run.result import Outcome
from privclust.clustering.run.schedule import (
    LOSS,
    ROW_COUNT,
    SIZES,
    ScheduledRelease,
    filled,
    loss_sensitivity,
    scheduled,
    summary_sigmas,
)
from privclust.privacy.gdp import noise_multiplier
from privclust.privacy.noise import MAX_NOISE_STD, count_sigma


@dataclass(frozen=True)
class RunStart:
    """What every method's run starts from (privclust.clustering.run.runner.start_run): the
    centred, clipped rows (read only through passes: privclust.clustering.data.rows), the domain's
    centre and radius, the plan (with the public row count) and the job's generator, the only
    source of noise."""

    points: Rows
    center: np.ndarray
    radius: float
    plan: RunPlan
    rng: np.random.Generator


def as_given(options: Options) -> Options:
    """A method without arguments of its own to check before it starts."""
    return options


@dataclass(frozen=True)
class Method:
    """One clustering method, registered under `name`.

    - `plan(basis, options)`: its releases (T, each release's statistic, sensitivity and
      pricing, the progress total), checking its own parameters; public inputs only.
    - `prepare(options)`: its own arguments checked (and converted) before anything else.
    - `run(start, options)`: its centres (centred) from the started run.
    - `rows_dtype`: the working copy's dtype (float32 where only votes read the rows).
    - `evolves`: it runs a PE population, so it has variations L and a population size.
    - `variations_cap(d)`: a cap on its default L on d columns (pe-lloyd's; None: none), below
      the population's.
    """

    name: Algorithm
    plan: Callable[[PlanBasis, Options], Releases]
    run: Callable[[RunStart, Options], Outcome]
    prepare: Callable[[Options], Options] = as_given
    rows_dtype: type[np.floating[Any]] = np.float64
    evolves: bool = False
    variations_cap: Callable[[int], int | None] | None = None


def plan_method(method: Method, basis: PlanBasis, options: Options) -> RunPlan:
    """The whole plan of `method` on `basis`: its releases, then L and the population, the
    noise multiplier sigma = sqrt(releases) / mu (rounded up), the schedule of every release
    (`schedule_of`) and the noise cap."""
    releases = method.plan(basis, options)
    variations = _initial_variations(method, basis, options)
    releases_mu = basis.releases_mu
    sigma = noise_multiplier(releases_mu, releases.releases)
    if not math.sqrt(releases.releases) / sigma <= releases_mu:  # guaranteed by noise_multiplier
        raise ArithmeticError("noise multiplier does not meet the requested mu")
    run_plan = RunPlan(
        algorithm=method.name.value,
        n_rows=basis.n_rows,
        n_cols=basis.n_cols,
        k=basis.k,
        **dataclasses.asdict(basis.budget),  # the job's mu, and the epsilon and delta it came as
        sigma=sigma,
        releases=releases.releases,
        iterations=releases.iterations,
        variations=variations,
        population_size=(variations + 1) * basis.k if method.evolves else 0,
        projection_dim=releases.projection_dim,
        progress_total=releases.progress_total,
        second_start=releases.second_start,
        relation=Relation(options.relation).value,
        count_mu=basis.count_mu,
        summary_mu=basis.summary_mu,
        schedule=schedule_of(basis, releases, sigma),
        lloyd_steps=releases.lloyd_steps,
    )
    largest = max(entry.std for entry in run_plan.schedule)
    if not largest <= MAX_NOISE_STD:
        raise ClusteringInputError(
            "mu" if basis.epsilon is None else "epsilon",
            f"this privacy budget is too small for {method.name}: one of its releases would "
            f"need noise of standard deviation {largest:.3g}, above the limit of "
            f"{MAX_NOISE_STD:g}",
        )
    return run_plan


def _initial_variations(method: Method, basis: PlanBasis, options: Options) -> int:
    """L: the caller's `variations`, or max(N~/(5k), 4) lowered to the population's cap (and
    to the method's `variations_cap`); the population (L+1)*k must stay within
    `max_population`. 0 for a method without a population."""
    k, max_population = basis.k, basis.max_population
    if not method.evolves:
        return 0
    if options.variations is None:
        initial = default_variations(basis.n_rows, k, max_population)
        if (initial + 1) * k > max_population:
            raise ClusteringInputError(
                "k",
                f"k = {k} needs a population of at least {(initial + 1) * k} candidates "
                f"({MIN_VARIATIONS} variations per centre, plus the centre); the limit is "
                f"{max_population}, so k can be at most {max_population // (MIN_VARIATIONS + 1)} "
                "with the default variations",
            )
        cap = None if method.variations_cap is None else method.variations_cap(basis.n_cols)
        return initial if cap is None else min(initial, max(cap, MIN_VARIATIONS))
    initial = check_integer("variations", options.variations, 1)
    if (initial + 1) * k > max_population:
        raise ClusteringInputError(
            "variations",
            f"variations gives a population of {(initial + 1) * k} candidates; the "
            f"limit is {max_population} ((variations + 1) * k)",
        )
    return initial


def schedule_of(basis: PlanBasis, releases: Releases, sigma: float) -> tuple[ScheduledRelease, ...]:
    """Every release of a run, in order: its own noisy row count (sensitivity 1, mu
    `count_mu`) when it releases one, the method's releases at noise multiplier `sigma`, then
    the summaries' sizes and loss (privclust.clustering.outputs.summaries), each at the noise
    its door draws (privclust.clustering.run.schedule). Public inputs only, so that a job the
    noise could never serve (`noise.MAX_NOISE_STD`) is refused when it is planned, before
    anything is charged, not when it runs."""
    count: tuple[ScheduledRelease, ...] = ()
    if basis.count_mu is not None:
        count = (scheduled(ROW_COUNT, 1, Gaussian(1.0, count_sigma(basis.count_mu))),)
    summaries: tuple[ScheduledRelease, ...] = ()
    if basis.summary_mu is not None:
        sizes_sigma, loss_sigma = summary_sigmas(basis.summary_mu)
        summaries = (
            scheduled(SIZES, 1, Gaussian(basis.count_sensitivity, sizes_sigma)),
            scheduled(LOSS, 1, Gaussian(loss_sensitivity(), loss_sigma)),
        )
    return count + filled(releases.parts, sigma) + summaries
