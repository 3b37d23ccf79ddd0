"""pe-lloyd: PE-means to find the basins, then FastLloyd-style noisy Lloyd steps from its centres.

PE-means selects centres among candidates, so its loss stays somewhat above the k-means optimum
even when the budget is large (its centres are Levy variations scored by noisy votes, never
exact means). A Lloyd step from centres already in the right basins needs little budget: the
noise on a cluster's mean shrinks with the cluster's size. So the run spends most of the job's
mu on PE-means and a share of it on `lloyd_steps` noisy Lloyd steps:

- PE-means exactly as `pe_means` (same T, L, population), its T vote histograms released with
  noise multiplier sigma.
- Then each Lloyd step (privclust.clustering.lloyd.lloyd_step): every row labelled with its
  nearest current centre, its offset from it clipped to its cluster's step radius r_j (by
  default half the distance from that centre to the nearest other one, within
  [R/1000, min(R, 2R / k^(1/d))]: see `step_radii`; public, since the centres are released
  PE-means output), the per-cluster offset sums (each in its own grid units r_j / 2^20) and
  counts released together as one integer Gaussian release, the counts given FastLloyd's share
  1 / (1 + sqrt(4d)) of it, and each centre moved by its noisy mean offset.
- Budget: every release shares one sigma; a Lloyd step's sensitivity is divided by sqrt(w), so
  it is priced as w releases. w = max(1, round(share T / ((1 - share) steps))) gives the Lloyd
  steps the fraction steps w / (T + steps w) ~ `lloyd_share` of mu^2; the run is
  sqrt(T + steps w) / sigma = mu-GDP (plus its own row count when no public count is given,
  as in pe_means).

Defaults and the measurement behind them (the step radius, the share, one step or two):
bench/RESULTS.md, "pe-lloyd: PE-means, then a noisy Lloyd step".
"""

from __future__ import annotations

from typing import Unpack

import numpy as np

from privclust.clustering.choices import Algorithm
from privclust.clustering.errors import ClusteringInputError, check_below_one, check_integer
from privclust.clustering.evolution import evolve
from privclust.clustering.lloyd import (
    count_multiplier,
    default_count_share,
    largest_lloyd_sensitivity,
    lloyd_step,
    step_radius,
)
from privclust.clustering.method import Method, RunStart
from privclust.clustering.nearest import nearest_other_distances
from privclust.clustering.options import (
    DEFAULT_STEP_FRACTION,
    DEFAULT_STEP_RULE,
    EvolutionKeywords,
    Options,
    options_for,
)
from privclust.clustering.plan import PlanBasis, Releases, default_pe_iterations, planned_iterations
from privclust.clustering.result import ClusteringResult, Outcome
from privclust.clustering.runner import run_method
from privclust.clustering.vote_cells import VOTE_DTYPE

# The clipping radius of a Lloyd step: FastLloyd's own (the rule is named after the method), or
# one per cluster from the released centres (the default).
FASTLLOYD_STEP_RULE = Algorithm.FASTLLOYD.value
STEP_RULES = (FASTLLOYD_STEP_RULE, DEFAULT_STEP_RULE)
# The smallest per-cluster step radius, in units of R (two released centres may coincide).
MIN_STEP_FRACTION = 1e-3
DEFAULT_LLOYD_STEPS = 1
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
    """The Lloyd step's clipping radius: FastLloyd's min(R, 2R / k^(1/d)) ("fastlloyd"), or
    per cluster half the distance from its centre to the nearest other centre, within
    [MIN_STEP_FRACTION R, FastLloyd's radius] ("centres"). Both read only public values (the
    centres are released PE-means output), so the step's sensitivity is data-independent."""
    d = centres.shape[1]
    fixed = step_radius(2, radius, d, k, DEFAULT_STEP_FRACTION)
    if rule == FASTLLOYD_STEP_RULE or len(centres) < 2:
        return fixed
    gaps = nearest_other_distances(np.asarray(centres, dtype=np.float64))
    return np.clip(gaps / 2.0, MIN_STEP_FRACTION * radius, fixed)


def plan_lloyd_releases(
    pe_iterations: int, lloyd_steps: int | None, lloyd_share: float | None
) -> tuple[int, int, int, int]:
    """(steps, weight, releases, progress_total) of a pe-lloyd run with T PE iterations:
    T vote histograms plus `steps` Lloyd steps priced as `weight` releases each; progress is
    reported after every PE iteration and every Lloyd step."""
    steps = check_integer(
        "lloyd_steps", DEFAULT_LLOYD_STEPS if lloyd_steps is None else lloyd_steps, 1
    )
    if steps > MAX_LLOYD_STEPS:
        raise ClusteringInputError(
            "lloyd_steps", f"lloyd_steps must be at most {MAX_LLOYD_STEPS}, got {steps}"
        )
    share = check_below_one(
        "lloyd_share", DEFAULT_LLOYD_SHARE if lloyd_share is None else lloyd_share
    )
    weight = lloyd_weight(pe_iterations, steps, share)
    return steps, weight, pe_iterations + steps * weight, pe_iterations + steps


def plan(basis: PlanBasis, options: Options) -> Releases:
    """PE-means's T vote histograms, then the Lloyd steps (plan_lloyd_releases)."""
    iterations = planned_iterations(
        options, lambda: default_pe_iterations(basis.n_cols, basis.epsilon)
    )
    _, _, releases, progress_total = plan_lloyd_releases(
        iterations, options.lloyd_steps, options.lloyd_share
    )
    return Releases(iterations=iterations, releases=releases, progress_total=progress_total)


def prepare(options: Options) -> Options:
    """`step_rule` checked before the run starts."""
    if options.step_rule not in STEP_RULES:
        raise ClusteringInputError(
            "step_rule",
            f"step_rule must be one of {', '.join(STEP_RULES)}, got {options.step_rule!r}",
        )
    return options


def run(start: RunStart, options: Options) -> Outcome:
    """The PE-means loop, then the noisy Lloyd steps from its centres."""
    points, plan, radius = start.points, start.plan, start.radius
    n_cols = points.shape[1]
    steps, weight, releases, _ = plan_lloyd_releases(
        plan.iterations, options.lloyd_steps, options.lloyd_share
    )
    if releases != plan.releases:  # the plan and the run must price the same releases
        raise ArithmeticError("pe-lloyd release count does not match its plan")
    outcome = evolve(
        points,
        plan,
        radius=radius,
        rng=start.rng,
        packing_rng=options.rng,
        progress=options.progress,
    )
    multiplier = count_multiplier(n_cols, default_count_share(n_cols))
    centres = outcome.centres
    for i in range(1, steps + 1):
        centres, _ = lloyd_step(
            points,
            centres,
            step=step_radii(centres, radius, plan.k, options.step_rule),
            radius=radius,
            plan=plan,
            multiplier=multiplier,
            rng=start.rng,
            weight=weight,
        )
        if options.progress is not None:
            options.progress(plan.iterations + i, plan.progress_total)
    return Outcome(centres=centres, final_variations=outcome.final_variations)


METHOD = Method(
    name=Algorithm.PE_LLOYD,
    plan=plan,
    run=run,
    sensitivity=largest_lloyd_sensitivity,
    prepare=prepare,
    # float32 as PE-means: the Lloyd steps' clipped offsets are rounded to a grid of
    # step / 2^20, far coarser than float32's 6e-8 R, and each row is rounded once, before
    # anything else reads it (the sums' sensitivity holds whatever the rows). A float64
    # copy cost 1.28 GB more at 10,000,000 x 16.
    rows_dtype=VOTE_DTYPE,
    evolves=True,
    epsilon_iterations=default_pe_iterations,
)


class PELloydKeywords(EvolutionKeywords, total=False):
    """pe_lloyd's keywords: its Lloyd steps, their share of mu and their clipping rule."""

    lloyd_steps: int | None
    lloyd_share: float | None
    step_rule: str


def pe_lloyd(X: np.ndarray, k: int, **keywords: Unpack[PELloydKeywords]) -> ClusteringResult:
    """Differentially private k-means centres of X by PE-means followed by noisy Lloyd steps;
    mu-GDP for the requested mu.

    Arguments as for pe_means (`iterations` and `variations` are PE-means's T and L), plus
    `lloyd_steps` (default 1) and `lloyd_share`, the share of mu^2 the Lloyd steps get (default
    0.1, rounded to whole releases: see `lloyd_weight`) and `step_rule` (the clipping radius:
    see `step_radii`). `progress(t, T + lloyd_steps)` is
    called after each PE iteration and each Lloyd step.
    """
    return run_method(METHOD, X, k, options_for(PELloydKeywords, keywords))
