"""pe-lloyd: PE-means to find the basins, then FastLloyd-style noisy Lloyd steps from its centres.

PE-means selects centres among candidates, so its loss stays somewhat above the k-means optimum
even when the budget is large (its centres are Levy variations scored by noisy votes, never
exact means). A Lloyd step from centres already in the right basins needs little budget: the
noise on a cluster's mean shrinks with the cluster's size. So the run spends most of the job's
mu on PE-means and a share of it on `lloyd_steps` noisy Lloyd steps:

- PE-means exactly as `pe_means` (same T, L, population), its T vote histograms released with
  noise multiplier sigma.
- Then each Lloyd step (privclust.clustering.mechanisms.lloyd.NoisyLloyd): every row labelled
  with its nearest current centre, its offset from it clipped to its cluster's step radius r_j (by
  default half the distance from that centre to the nearest other one, within
  [R/1000, min(R, 2R / k^(1/d))]: see `lloyd_chain.step_radii`; public, since the centres are
  released PE-means output), the per-cluster offset sums (each in its own grid units r_j / 2^20) and
  counts released together as one integer Gaussian release, the counts given FastLloyd's share
  1 / (1 + sqrt(4d)) of it, and each centre moved by its noisy mean offset.
- Budget: every release shares one sigma; a Lloyd step's sensitivity is divided by sqrt(w), so
  it is priced as w releases. w = max(1, round(share T / ((1 - share) steps))) gives the Lloyd
  steps the fraction steps w / (T + steps w) ~ `lloyd_share` of mu^2; the run is
  sqrt(T + steps w) / sigma = mu-GDP (plus its own row count when no public count is given,
  as in pe_means).

Where mu N~ / k is large (privclust.clustering.mechanisms.candidates: from 3 clusters and
mu N~ / k >= 1,000, public facts), a second chain of Lloyd steps starts from a split-merge move
of the first chain's end, each chain's per-cluster loss is released once, and the chain with
the smaller noisy loss (by twice its noise) is the answer; from BASE_T_ROWS rows on PE-means' T
then stays at its base floor(4 sqrt(d)), since the second start mends the basins more
iterations would. Every release is in the plan:
T + (steps + second steps + 2) w releases.

Above PROJECT_ABOVE_DIM columns (a public fact) the search for the basins runs in a random
projection, where a vote costs p = 16 coordinates instead of d: HDPE-means' stage
(privclust.clustering.mechanisms.projection: T = 14 PE-means iterations in the projection, then each
cluster's noisy sum and count in the full space, the sums priced as `sum_weight_before_lloyd`
releases), then, before each Lloyd step, a starving centre moved beside a crowded one
(`lloyd.reseed_beside`, post-processing of the released counts: the step then splits two
clusters that the projection merged), and the Lloyd steps with 30% of mu^2 by default. The
run is sqrt(T + 1 + sum weight + steps w) / sigma = mu-GDP.

Defaults and the measurement behind them (the step radius, the share, one step or two):
bench/RESULTS.md, "pe-lloyd: PE-means, then a noisy Lloyd step"; the projected path: "auto at
every dimension".
"""

from __future__ import annotations

import math
from typing import Unpack

import numpy as np

from privclust.clustering.choices import Algorithm
from privclust.clustering.errors import ClusteringInputError
from privclust.clustering.evolution.vote_cells import VOTE_DTYPE
from privclust.clustering.mechanisms.candidates import (
    loss_clip,
    losses_part,
    released_losses,
    second_is_better,
    second_start_steps,
    split_merge,
)
from privclust.clustering.mechanisms.lloyd import (
    default_lloyd_steps,
    iterations_cap,
    lloyd_steps_part,
)
from privclust.clustering.mechanisms.search import search
from privclust.clustering.methods.lloyd_chain import STEP_RULES, LloydChain, plan_lloyd_releases
from privclust.clustering.methods.pe_lloyd_projected import plan_projected, run_projected
from privclust.clustering.run.method import Method, RunStart
from privclust.clustering.run.options import (
    EvolutionKeywords,
    Options,
    options_for,
)
from privclust.clustering.run.plan import (
    PlanBasis,
    Releases,
    default_pe_iterations,
    planned_iterations,
    vote_histograms,
)
from privclust.clustering.run.result import ClusteringResult, Outcome
from privclust.clustering.run.runner import run_method
from privclust.clustering.run.schedule import Planned

# Above VARIATIONS_CAP_ABOVE_DIM columns the default L per selected centre is at most
# MAX_DEFAULT_VARIATIONS (it binds at k = 4 on 20,000 rows, and at any k on a million): each
# variation costs every row a score of d + 1 products in every iteration, and with the cap the
# Table I sets at d = 16 and 64 kept or lowered their loss AUCs and 1,000,000 x 16 its loss
# (bench/RESULTS.md, "auto at every dimension"). At d <= 6 the scores are cheap and L stays
# N~/(5k).
MAX_DEFAULT_VARIATIONS = 256
VARIATIONS_CAP_ABOVE_DIM = 6
# Above this many columns PE-means searches in a random projection (the module's docstring):
# the projection's own dimension. On held-out sets at d = 24 and 96 and on the d = 64 Table I
# sets that path had a lower (or, on one, equal) loss AUC than PE-means in the full space, at
# a fraction of its cost (bench/RESULTS.md, "auto at every dimension").
PROJECT_ABOVE_DIM = 16
# With a second start, PE-means' T stays at its base from this many public rows on: on flights
# (327,346 rows) T = 16 and a second start took 3.9-4.3x KMeans(n_init=10)'s time at epsilon
# 10, T = 8 1.5-2.3x, both 1.002-1.007x its loss; on diamonds (53,940 rows) T = 20 gave
# 1.006-1.007x at epsilon 3 and 10 against 1.016-1.017x for T = 10 (6 runs each).
BASE_T_ROWS = 100_000


def projects(n_cols: int) -> bool:
    """Whether a run on `n_cols` columns searches in a projection (public: d alone)."""
    return n_cols > PROJECT_ABOVE_DIM


def variations_cap(n_cols: int) -> int | None:
    """The cap on the default L on `n_cols` columns: MAX_DEFAULT_VARIATIONS above
    VARIATIONS_CAP_ABOVE_DIM, none below."""
    return MAX_DEFAULT_VARIATIONS if n_cols > VARIATIONS_CAP_ABOVE_DIM else None


def _capped_iterations(n_cols: int, n_rows: int, epsilon: float | None, second: bool) -> int:
    """PE-means' default T, capped (`iterations_cap`); with a second start on BASE_T_ROWS rows
    or more, at its base floor(4 sqrt(d)): there each iteration is a long pass and the second
    chain's cheap steps mend what more iterations would (the runs behind it: bench/RESULTS.md,
    "Runs that agree")."""
    base = second and n_rows >= BASE_T_ROWS
    cap = math.isqrt(16 * n_cols) if base else iterations_cap(n_cols)
    return min(default_pe_iterations(n_cols, epsilon), cap)


def plan(basis: PlanBasis, options: Options) -> Releases:
    """PE-means's T vote histograms, then the Lloyd steps (plan_lloyd_releases); above
    PROJECT_ABOVE_DIM columns, the projected stage's releases first (`plan_projected`)."""
    if projects(basis.n_cols):
        return plan_projected(basis, options)
    second = second_start_steps(basis.n_rows, basis.k, basis.mu, options.second_start)
    iterations = planned_iterations(
        options, lambda: _capped_iterations(basis.n_cols, basis.n_rows, basis.epsilon, second > 0)
    )
    n_steps, weight, _, progress_total = plan_lloyd_releases(
        iterations,
        options.lloyd_steps,
        options.lloyd_share,
        default_lloyd_steps(iterations, basis.n_cols, basis.n_rows, basis.k, basis.mu),
        second,
    )
    parts: tuple[Planned, ...] = (
        vote_histograms(basis, iterations),
        lloyd_steps_part(basis, basis.n_cols, n_steps, weight=weight),
    )
    if second:  # the first chain's losses, the second chain's steps, its losses
        losses = losses_part(basis, weight)
        parts += (losses, lloyd_steps_part(basis, basis.n_cols, second, weight=weight), losses)
    return Releases(
        iterations=iterations, parts=parts, progress_total=progress_total, second_start=second
    )


def prepare(options: Options) -> Options:
    """`step_rule` checked before the run starts."""
    if options.step_rule not in STEP_RULES:
        raise ClusteringInputError(
            "step_rule",
            f"step_rule must be one of {', '.join(STEP_RULES)}, got {options.step_rule!r}",
        )
    return options


def run(start: RunStart, options: Options) -> Outcome:
    """The PE-means loop, then the noisy Lloyd steps from its centres and, where the plan has
    one, a second start and the choice between the two chains (`refine`); above
    PROJECT_ABOVE_DIM columns: `run_projected`."""
    if start.plan.projection_dim is not None:
        return run_projected(start, options)
    n_cols = start.points.shape[1]
    plan = start.plan
    second = plan.second_start
    steps, weight, releases, _ = plan_lloyd_releases(
        plan.iterations,
        options.lloyd_steps,
        options.lloyd_share,
        default_lloyd_steps(plan.iterations, n_cols, plan.n_rows, plan.k, plan.mu),
        second,
    )
    if releases != plan.releases:  # the plan and the run must price the same releases
        raise ArithmeticError("pe-lloyd release count does not match its plan")
    outcome = search(start.points, start, options)
    chain = LloydChain(start, options.report, weight, options.step_rule)
    first = chain.steps(outcome.centres, steps, plan.iterations)
    if not second:
        return Outcome(first.centres, outcome.final_variations, first.moved)
    clip = loss_clip(first.centres, start.radius)
    losses = released_losses(start.points, first.centres, clip, plan, weight, start.rng)
    begin = split_merge(first.centres, first.counts, losses, start.radius, start.rng)
    other = chain.steps(begin, second, plan.iterations + steps)
    other_losses = released_losses(start.points, other.centres, clip, plan, weight, start.rng)
    best = other if second_is_better(losses, other_losses, clip, plan, weight) else first
    return Outcome(best.centres, outcome.final_variations, best.moved)


METHOD = Method(
    name=Algorithm.PE_LLOYD,
    plan=plan,
    run=run,
    prepare=prepare,
    # float32 as PE-means: the Lloyd steps' clipped offsets are rounded to a grid of
    # step / 2^20, far coarser than float32's 6e-8 R, and each row is rounded once, before
    # anything else reads it (the sums' sensitivity holds whatever the rows). A float64
    # copy cost 1.28 GB more at 10,000,000 x 16.
    rows_dtype=VOTE_DTYPE,
    evolves=True,
    variations_cap=variations_cap,
)


class PELloydKeywords(EvolutionKeywords, total=False):
    """pe_lloyd's keywords: the projection's dimension (above PROJECT_ABOVE_DIM columns), its
    Lloyd steps, their share of mu and their clipping rule."""

    projection_dim: int
    lloyd_steps: int | None
    lloyd_share: float | None
    second_start: int | None
    step_rule: str


def pe_lloyd(X: np.ndarray, k: int, **keywords: Unpack[PELloydKeywords]) -> ClusteringResult:
    """Differentially private k-means centres of X by PE-means followed by noisy Lloyd steps;
    mu-GDP for the requested mu.

    Arguments as for pe_means (`iterations` and `variations` are PE-means's T and L; T's
    default is capped: privclust.clustering.mechanisms.lloyd.iterations_cap), plus
    `lloyd_steps` (default 1, or more from the capped T on: `default_lloyd_steps`) and
    `lloyd_share`, the share of mu^2 the Lloyd steps get (default 0.1, rounded to whole
    releases: see `lloyd_chain.lloyd_weight`), `step_rule` (the clipping radius: see
    `lloyd_chain.step_radii`) and
    `second_start`, the Lloyd steps of a second, split-merge start (default 10 from 3 clusters
    and mu N~ / k >= 1,000 on, else none; 0: none: privclust.clustering.mechanisms.candidates).
    `progress(t, T + lloyd_steps + second_start)` is called after each PE iteration and each
    Lloyd step.

    Above PROJECT_ABOVE_DIM columns PE-means runs in a `projection_dim`-dimensional projection
    (default 16; T defaults to 14 there) and the clusters' noisy means lift its centres to the
    full space before the Lloyd steps (the module's docstring); `lloyd_share` then defaults to
    0.3 and `progress(t, T + 1 + lloyd_steps)` also counts the noisy means.
    """
    return run_method(METHOD, X, k, options_for(PELloydKeywords, keywords))
