"""FastLloyd (Diaa, Humphries and Kerschbaum): noisy Lloyd steps with radius-constrained,
relative centroid updates, on privclust's ball domain.

Only the central model is implemented: the paper's federated protocol (masked secure
aggregation between clients and a server) is out of scope, since a privclust job sees all of a
dataset's rows; what remains is its differentially private k-means mechanism.

The run (centred coordinates, every row of norm <= R):

- Initial centres: a sphere packing of k points in the ball (public randomness, no data).
- T iterations. In iteration t every row is labelled with its nearest current centre mu_j, and
  contributes v = clip(x - mu_j, r_t): its offset from that centre, shortened to the step radius
  r_t when longer. Per cluster the offsets are summed exactly on the grid r_t / 2^20 (int64)
  and the rows counted; the sums and the counts are released together as ONE integer Gaussian
  release (see `joint_release`), and the centre moves to mu_j + noisy sum / noisy count, the
  move shortened to r_t and the result projected into the ball (post-processing).
- Step radii (the paper's "diagonal, then fraction" schedule with the ball's radius in place of
  the box's half diagonal): r_1 = R, and r_t = min(R, alpha R / k^(1/d)) for t >= 2, with
  alpha = `step_fraction` (default 2, the paper's). Offsets of norm <= r_t make the sum's l2
  sensitivity r_t (<= R) under add/remove neighbours, however large the cluster.
- Budget split between sums and counts: the paper gives the counts a share
  1 / (1 + sqrt(4d)) of each iteration's budget (in squared-mu terms) and the sums the rest.
  Here that split is a sensitivity scaling inside one release: the counts are multiplied by an
  integer M and appended to the sums, so a row moves the joint vector by at most
  sqrt(S^2 + M^2) (S = the sum's sensitivity in grid units) and one noise multiplier sigma
  covers both; M = S * sqrt(share / (1 - share)) gives the counts exactly the requested share
  (up to rounding M to an integer). Every release of the run shares sigma = sqrt(T) / mu.
- T (the paper's rule, Su et al.'s error bound with its step radius): the largest T whose
  expected centroid error stays below 0.004, 0.016 N~^2 mu^2 / (k^3 eta^2 (1 + sqrt(4d))^2)
  with eta = r_2 / R, truncated to [2, 7]. Only public values enter: N~, d, k, mu.
- Beyond the paper (post-processing, `reseed_ratio`, on by default): between steps a centre
  whose noisy count is at least 4 times smaller than the largest one's is moved next to that
  crowded centre, so the next step splits it (`reseed_starving`). Lloyd's algorithm from a
  data-independent start otherwise stays in local optima where one centre holds two clusters.

The published code works on the box [-1, 1]^d; on privclust that is the ball of its half
diagonal, radius sqrt(d) (declared per-column bounds become that ball), and a row's offsets and
the noise then scale with sqrt(d) R instead of R. bench/RESULTS.md ("FastLloyd") measures both.
"""

from __future__ import annotations

import math

import numpy as np
from scipy import sparse

from privclust.clustering.errors import ClusteringInputError
from privclust.clustering.hdpe import GRID_BITS, grid_sensitivity
from privclust.clustering.nearest import nearest_candidates
from privclust.clustering.params import (
    RunPlan,
    check_positive,
    start_run,
)
from privclust.clustering.pe import Progress, initial_population
from privclust.clustering.result import ClusteringResult
from privclust.clustering.variation import project_into_ball
from privclust.privacy import noise

DEFAULT_STEP_FRACTION = 2.0
# A centre whose noisy count is this many times smaller than another's is moved to split that
# one (`reseed_starving`); measured in bench/RESULTS.md ("FastLloyd").
DEFAULT_RESEED_RATIO = 4.0
MIN_ITERATIONS = 2
MAX_ITERATIONS = 7
# Su et al.'s bound on the total squared centroid error of one iteration, as the paper uses it.
ERROR_BOUND = 0.004
# Wide enough for any sensible tuning, narrow enough that every step radius and grid factor
# stays a normal float for every admissible radius and k.
STEP_FRACTION_RANGE = (1e-6, 1e6)
# The count multiplier M stays within [1, 2^31]; see `relative_grid_sums` for why no sum of the
# joint vector can overflow int64.
MAX_COUNT_MULTIPLIER = 2**31
_BLOCK_ELEMENTS = 1 << 20


def check_step_fraction(value: object) -> float:
    """`step_fraction` as a float in STEP_FRACTION_RANGE, or ClusteringInputError."""
    alpha = check_positive("step_fraction", value)
    low, high = STEP_FRACTION_RANGE
    if not low <= alpha <= high:
        raise ClusteringInputError(
            "step_fraction", f"step_fraction must be in [{low:g}, {high:g}], got {alpha!r}"
        )
    return alpha


def check_reseed_ratio(value: object) -> float:
    """`reseed_ratio` as a finite float > 1, or ClusteringInputError."""
    ratio = check_positive("reseed_ratio", value)
    if not ratio > 1.0:
        raise ClusteringInputError("reseed_ratio", f"reseed_ratio must exceed 1, got {ratio!r}")
    return ratio


def check_count_share(value: object) -> float:
    """`count_share` as a float strictly between 0 and 1, or ClusteringInputError."""
    share = check_positive("count_share", value)
    if not share < 1.0:
        raise ClusteringInputError("count_share", f"count_share must be below 1, got {share!r}")
    return share


def default_count_share(n_cols: int) -> float:
    """The paper's share of each iteration's budget for the counts: 1 / (1 + sqrt(4d))."""
    return 1.0 / (1.0 + math.sqrt(4.0 * n_cols))


def step_radius(t: int, radius: float, n_cols: int, k: int, step_fraction: float) -> float:
    """r_t: R in the first iteration, then min(R, alpha R / k^(1/d))."""
    if t <= 1:
        return radius
    return min(radius, step_fraction * radius * math.exp(-math.log(k) / n_cols))


def default_iterations(n_rows: int, n_cols: int, k: int, mu: float, step_fraction: float) -> int:
    """The paper's T: floor(0.016 N~^2 mu^2 / (k^3 eta^2 (1 + sqrt(4d))^2)) within [2, 7], with
    eta = r_2 / R, the step radius in units of the domain's radius."""
    eta = step_radius(2, 1.0, n_cols, k, step_fraction)
    # In logarithms: mu may be as large as the largest float, and mu^2 would overflow.
    log_bound = (
        math.log(4.0 * ERROR_BOUND)
        + 2.0 * (math.log(n_rows) + math.log(mu))
        - 3.0 * math.log(k)
        - 2.0 * math.log(eta)
        - 2.0 * math.log1p(math.sqrt(4.0 * n_cols))
    )
    if log_bound >= math.log(MAX_ITERATIONS):
        return MAX_ITERATIONS
    return max(math.floor(math.exp(log_bound)), MIN_ITERATIONS)


def count_multiplier(n_cols: int, count_share: float) -> int:
    """M, the integer the counts are scaled by so that they receive `count_share` of each
    release: M^2 / (S^2 + M^2) = share with S = grid_sensitivity(d)."""
    ideal = grid_sensitivity(n_cols) * math.sqrt(count_share / (1.0 - count_share))
    return int(min(max(round(ideal), 1), MAX_COUNT_MULTIPLIER))


def joint_sensitivity(plan: RunPlan, n_cols: int, multiplier: int) -> float:
    """l2 sensitivity of [grid sums of the offsets (k x d), M * counts (k)] in grid units.

    Add/remove: one row moves one cluster's sum by <= S and its count by 1, so
    sqrt(S^2 + M^2). Replace-one: within one cluster the sum moves by <= 2S and the counts not
    at all; across two clusters each sum by <= S and two counts by 1: sqrt(2 (S^2 + M^2)).
    """
    s = grid_sensitivity(n_cols)
    joint = math.hypot(s, float(multiplier))
    if plan.relation == "replace-one":
        return max(2.0 * s, math.sqrt(2.0) * joint)
    return joint


def relative_grid_sums(
    points: np.ndarray, centres: np.ndarray, labels: np.ndarray, step: float | np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Per-cluster exact sums (k x d int64, grid units of step / 2^GRID_BITS) of the rows'
    offsets from their centre, each clipped to norm `step`, and the per-cluster counts.
    `step` is one radius, or one per cluster (each cluster's sum then in its own grid units,
    so the bound below holds in grid units for every cluster alike).

    Each offset is scaled by 2^GRID_BITS / max(||x - mu||, step), so its norm on the grid is
    at most 2^GRID_BITS (up to float rounding, covered by GRID_SLACK) before rounding, and at
    most grid_sensitivity(d) after: that is the sum's sensitivity whatever the data.

    No overflow for N <= 10^8 rows: every coordinate of a rounded offset is at most
    2^20 (1 + 1e-9) + 1/2 < 2^20 + 1 in absolute value, so a cluster's sum is below
    10^8 (2^20 + 1) < 1.05e14 < 2^47, and M * count <= 2^31 * 10^8 < 2^58; the noise added to
    either has std at most MAX_NOISE_STD = 1e13 < 2^44 (a draw beyond 2^53 is ~900 std out).
    All of this stays far below 2^63 (int64), and below 2^53, so the float conversion of a
    released sum is exact too.
    """
    k, d = centres.shape
    sums = np.zeros((k, d), dtype=np.int64)
    top = 2.0**GRID_BITS
    rows = max(1, _BLOCK_ELEMENTS // d)
    for start in range(0, len(points), rows):
        part = labels[start : start + rows]
        offsets = points[start : start + rows] - centres[part]
        norms = np.sqrt(np.einsum("ij,ij->i", offsets, offsets))
        radii = step if np.ndim(step) == 0 else np.asarray(step)[part]
        offsets *= (top / np.maximum(norms, radii))[:, None]
        units = np.rint(offsets).astype(np.int64)
        onehot = sparse.csr_matrix(
            (np.ones(part.size, dtype=np.int64), (part, np.arange(part.size))),
            shape=(k, part.size),
        )
        sums += onehot @ units
    counts = np.bincount(labels, minlength=k).astype(np.int64)
    return sums, counts


def joint_release(
    sums: np.ndarray,
    counts: np.ndarray,
    plan: RunPlan,
    multiplier: int,
    rng: np.random.Generator,
    weight: int = 1,
) -> tuple[np.ndarray, np.ndarray]:
    """One integer Gaussian release of [sums, M * counts] with noise multiplier
    plan.sigma / sqrt(weight); returns (noisy sums in grid units, noisy counts) as floats
    (post-processing).

    The sums get noise of std sqrt(S^2 + M^2) sigma / sqrt(weight) per coordinate and the
    counts, after the division by M, that over M: the paper's split, as one
    (sqrt(weight)/sigma)-GDP release, priced as `weight` releases of the plan's sigma (FastLloyd
    uses weight 1; pe-lloyd gives its Lloyd steps a larger share this way). Every cluster is
    released, empty or not.
    """
    k, d = sums.shape
    joint = np.concatenate([sums.ravel(), counts * np.int64(multiplier)])
    noisy = noise.integer_release(
        joint,
        sensitivity=joint_sensitivity(plan, d, multiplier) / math.sqrt(weight),
        sigma=plan.sigma,
        rng=rng,
    )
    noisy_sums = noisy[: k * d].reshape(k, d).astype(np.float64)
    noisy_counts = noisy[k * d :].astype(np.float64) / multiplier
    return noisy_sums, noisy_counts


def moved_centres(
    centres: np.ndarray,
    noisy_sums: np.ndarray,
    noisy_counts: np.ndarray,
    step: float | np.ndarray,
    radius: float,
) -> np.ndarray:
    """mu + noisy offset sum / max(noisy count, 1), the move shortened to `step` (a mean of
    offsets of norm <= step moves no further) and the centre projected into the ball."""
    radii = np.broadcast_to(np.asarray(step, dtype=np.float64), noisy_counts.shape)
    moves = noisy_sums * (radii * 2.0**-GRID_BITS / np.maximum(noisy_counts, 1.0))[:, None]
    lengths = np.sqrt(np.einsum("ij,ij->i", moves, moves))
    moves *= (radii / np.maximum(lengths, radii))[:, None]
    return project_into_ball(centres + moves, radius)


def lloyd_step(
    points: np.ndarray,
    centres: np.ndarray,
    *,
    step: float | np.ndarray,
    radius: float,
    plan: RunPlan,
    multiplier: int,
    rng: np.random.Generator,
    weight: int = 1,
) -> tuple[np.ndarray, np.ndarray]:
    """One noisy Lloyd step from `centres` (centred coordinates): label every row with its
    nearest centre, release the clipped offset sums and the counts (`joint_release`, priced as
    `weight` releases) and move each centre by the noisy mean offset (`moved_centres`).
    Returns (new centres, noisy counts)."""
    labels = nearest_candidates(points, centres)
    sums, counts = relative_grid_sums(points, centres, labels, step)
    del labels
    noisy_sums, noisy_counts = joint_release(sums, counts, plan, multiplier, rng, weight)
    return moved_centres(centres, noisy_sums, noisy_counts, step, radius), noisy_counts


def reseed_starving(
    centres: np.ndarray,
    noisy_counts: np.ndarray,
    ratio: float,
    step: float,
    radius: float,
    rng: np.random.Generator,
) -> np.ndarray:
    """Move starving centres next to crowded ones so that the next step splits the crowd.

    Pairs the smallest noisy count with the largest, the second smallest with the second
    largest, and so on, while the larger is at least `ratio` times max(smaller, 1): the small
    cluster's centre is put at mu_big + u and the big one's at mu_big - u, with u a random
    direction of length 1e-3 r_t, so the next labelling cuts the crowded cluster in two by a
    random hyperplane through its centre. (Lloyd's algorithm cannot leave a local optimum where
    one centre holds two clusters and another holds none or half of one; an empty centre only
    drifts with noise.) It reads nothing but released counts, public centres and the job's
    generator: post-processing.
    """
    k, d = centres.shape
    order = np.argsort(noisy_counts, kind="stable")
    out = centres.copy()
    for i in range(k // 2):
        small, big = order[i], order[k - 1 - i]
        if not noisy_counts[big] >= ratio * max(float(noisy_counts[small]), 1.0):
            break
        direction = rng.standard_normal(d)
        length = float(np.linalg.norm(direction))
        # A standard normal vector of norm 0 has probability 0; the floor only avoids 0/0.
        offset = direction * (1e-3 * step / max(length, 1e-300))
        out[small] = centres[big] + offset
        out[big] = centres[big] - offset
    return project_into_ball(out, radius)


def fastlloyd(
    X: np.ndarray,
    k: int,
    *,
    radius: float,
    center: np.ndarray | None = None,
    epsilon: float | None = None,
    delta: float | None = None,
    mu: float | None = None,
    iterations: int | None = None,
    n_public: int | None = None,
    relation: str = "add-remove",
    rng: np.random.Generator | None = None,
    progress: Progress | None = None,
    step_fraction: float = DEFAULT_STEP_FRACTION,
    count_share: float | None = None,
    reseed_ratio: float | None = DEFAULT_RESEED_RATIO,
) -> ClusteringResult:
    """Differentially private k-means centres of X by FastLloyd (central model); mu-GDP.

    Rows are clipped into the ball of `radius` around `center` (the origin when None); privacy
    is (epsilon, delta) or mu, under add/remove neighbours by default, with `n_public` the
    dataset's released N~ (without it the run releases its own from a tenth of mu), or N
    public under `relation="replace-one"`, exactly as for pe_means. T defaults to the paper's
    rule (2..7, see `default_iterations`); `step_fraction` is the paper's alpha
    (r_t = min(R, alpha R / k^(1/d)) after the first step); `count_share` the share of each
    release's budget given to the counts (default 1 / (1 + sqrt(4d))); `reseed_ratio` the count
    ratio at which a starving centre is moved to split a crowded one (None: never, as in the
    paper). `progress(t, T)` is called after each iteration and anything it raises propagates.
    `rng` is for tests only: by default every random number comes from ChaCha20.
    """
    ratio = None if reseed_ratio is None else check_reseed_ratio(reseed_ratio)
    run = start_run(
        X,
        k,
        radius=radius,
        center=center,
        n_public=n_public,
        relation=relation,
        rng=rng,
        algorithm="fastlloyd",
        epsilon=epsilon,
        delta=delta,
        mu=mu,
        iterations=iterations,
        step_fraction=step_fraction,
        count_share=count_share,
    )
    points, c, plan, noise_rng = run.points, run.center, run.plan, run.rng
    del run  # `points` is the one N x d working copy: freed with it below
    radius = float(radius)
    n_cols = points.shape[1]
    alpha = check_step_fraction(step_fraction)
    share = default_count_share(n_cols) if count_share is None else check_count_share(count_share)
    multiplier = count_multiplier(n_cols, share)
    centres = initial_population(plan.k, n_cols, radius, rng)
    for t in range(1, plan.iterations + 1):
        step = step_radius(t, radius, n_cols, plan.k, alpha)
        centres, noisy_counts = lloyd_step(
            points,
            centres,
            step=step,
            radius=radius,
            plan=plan,
            multiplier=multiplier,
            rng=noise_rng,
        )
        if ratio is not None and t < plan.iterations:
            centres = reseed_starving(centres, noisy_counts, ratio, step, radius, noise_rng)
        if progress is not None:
            progress(t, plan.progress_total)
    del points
    return plan.result(centres, c, radius, 0)
