"""Empirical privacy audit of the library's noisy releases: canary distinguishing tests.

Each audit runs one release of the clustering library `n` times on a dataset D and `n` times on
its add/remove neighbour D' = D + one canary row, and counts how often each of a few events,
declared below before any sampling, occurs on each side. An event is declared together with the
side it favours; with p1 its probability on that side and p0 on the other, an (eps, delta)-DP
release must satisfy p1 <= exp(eps) * p0 + delta, so

    eps_lb = ln((p1_lower - delta) / p0_upper)

is a lower bound on the epsilon the release can have at `delta` whenever p1_lower <= p1 and
p0_upper >= p0. Both are one-sided Clopper-Pearson bounds, each at level ALPHA / (2 m) for the
m events of an audit (Bonferroni over the events and the two bounds), so for a release that
keeps its promise every eps_lb of an audit is at most its epsilon with probability at least
1 - ALPHA. A test fails when the largest eps_lb of its audit exceeds the epsilon the library
claims for the release at DELTA (privclust.privacy.gdp.epsilon_from_mu_delta of the release's mu):
a release that is as private as claimed fails its test with probability at most ALPHA = 1% over
the choice of seed (99% family-wise confidence, stricter than 95%). The seeds are fixed, so a
given tree passes or fails every time.

The audited releases, all calibrated so that the library charges them about epsilon 1 at
delta 1e-6:

(a) one noisy vote histogram (the integer release of a vote vector; the canary votes for a bin
    that no row of D votes for);
(b) a vote histogram as a job publishes it downstream: (N~, postprocess_votes(release, max(N~, 1)))
    with N~ = the noisy row count, charged sqrt(mu_c^2 + mu_hist^2);
(c) HDPE-means' final step: release_means on the exact per-cluster sums and counts, the canary a
    row of norm R alone in its cluster.

The events and why they are there are documented on each audit below. Sampling is vectorised: the
library's release functions are called on batch-shaped inputs (n copies of the data at once,
which they treat element-wise or row-wise), and the post-processing of (b) runs on all rows at
once in `postprocess_rows`, whose output is checked against the library's `postprocess_votes`
row by row on the first rows of every audit. Each audit draws TEST_SAMPLES = 2 * 10^6 releases
per side (the file runs in about 15 s on one core) from numpy's PCG64 with fixed seeds, not from
the service's ChaCha20: the audits test what the release functions make of a generator's normal
samples, not the generator.

Target: by default the current library. With PRIVCLUST_AUDIT_TARGET=old the same audits run
against the code before the noise fix (float Gaussian releases, post-processing with the exact
row count, the float `noisy_means(sums, counts, *, radius, sigma, rng)`), through the adapter
`old_code_target`; the importable `app` must then be that old tree. bench/audit.py runs the same
audits with 10^7 samples per side.
"""

from __future__ import annotations

import dataclasses
import importlib
import math
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np
import pytest
from scipy.stats import beta

from privclust.privacy.gdp import (
    compose,
    epsilon_from_mu_delta,
    mu_from_epsilon_delta,
    noise_multiplier,
)

AUDIT_TARGET_ENV = "PRIVCLUST_AUDIT_TARGET"

# The claimed guarantee every audited release is calibrated to (epsilon ~1 at this delta).
DELTA = 1e-6
TARGET_EPSILON = 1.0
# Family-wise error of one audit: P(some eps_lb of the audit exceeds the true epsilon) <= ALPHA.
ALPHA = 0.01
TEST_SAMPLES = 2_000_000  # per side, in the unit tests
CHUNK_ROWS = 250_000  # releases drawn per batch call (bounds memory)
CHECK_ROWS = 2_000  # rows per side whose batch post-processing is checked against the library

WITH_CANARY = "D'"
WITHOUT_CANARY = "D"

# (a) and (b): a vote histogram over 12 candidates; D has N = 100 rows, and the canary row votes
# for candidate 3, which no row of D votes for.
VOTES = np.array([50, 30, 20, 0, 0, 0, 0, 0, 0, 0, 0, 0], dtype=np.int64)
CANARY_BIN = 3
# (b): the noisy row count costs this fraction of the total mu, as in the service.
COUNT_MU_SHARE = 0.1
# (c): one column, radius 1, two clusters: cluster 0 holds D's three rows, cluster 1 is empty in
# D and holds only the canary row (norm R) in D'. One column keeps the noisy centre inside the
# ball often enough to be seen unscaled (a centre outside it is rescaled onto the sphere).
HDPE_RADIUS = 1.0
HDPE_ROWS = np.array([[0.5], [0.25], [-0.75]])
HDPE_CANARY = np.array([[HDPE_RADIUS]])
HDPE_K = 2
HDPE_CANARY_CLUSTER = 1
# (c) low-bits event: |centre| < 2^-LOW_EXPONENT * R and on the lattice 2^-53 * R.
LOW_EXPONENT = 8


# --------------------------------------------------------------------------------------------
# Targets: the library functions an audit calls


@dataclass(frozen=True)
class Labelled:
    """What HDPE's final step averages: rows labelled with k clusters, the ball's radius, and the
    sigma of the noise on their sums and counts."""

    points: np.ndarray
    labels: np.ndarray
    k: int
    radius: float
    sigma: float


@dataclass(frozen=True)
class Target:
    """The release functions of one version of the library, in batch form.

    release_votes(votes, sigma, rng): the noisy histogram of every row of `votes` (sensitivity 1).
    release_counts(counts, mu, rng): a noisy row count N~ for every entry of `counts`.
    postprocess(noisy, public_count): the library's post-processing of one noisy histogram.
    public_counts(n_exact, n_noisy): the row count the post-processing reads, per release.
    hdpe_centres(labelled, copies, rng): `copies` independent runs of
        HDPE's final noisy averaging on these labelled rows, shape (copies, k, d).
    """

    name: str
    release_votes: Callable[[np.ndarray, float, np.random.Generator], np.ndarray]
    release_counts: Callable[[np.ndarray, float, np.random.Generator], np.ndarray]
    postprocess: Callable[[np.ndarray, int], np.ndarray]
    public_counts: Callable[[int, np.ndarray], np.ndarray]
    hdpe_centres: Callable[[Labelled, int, np.random.Generator], np.ndarray]


def current_code_target() -> Target:
    """The current library: integer releases, post-processing with max(N~, 1)."""
    from privclust.clustering import plan_run
    from privclust.clustering.evolution.histogram import postprocess_votes
    from privclust.clustering.mechanisms.grid import cluster_grid_sums, release_means
    from privclust.privacy import noise

    def release_votes(votes: np.ndarray, sigma: float, rng: np.random.Generator) -> np.ndarray:
        return noise.integer_release(votes, sensitivity=1.0, sigma=sigma, rng=rng)

    def release_counts(counts: np.ndarray, mu: float, rng: np.random.Generator) -> np.ndarray:
        # noise.release_count(n, mu, rng) is this very call on the one-element array [n]
        # (checked by test_the_batch_count_release_is_release_count).
        return noise.integer_release(counts, sensitivity=1.0, sigma=1.0 / mu, rng=rng)

    def public_counts(n_exact: int, n_noisy: np.ndarray) -> np.ndarray:
        return np.maximum(n_noisy, 1)

    def hdpe_centres(rows: Labelled, copies: int, rng: np.random.Generator) -> np.ndarray:
        k, radius, d = rows.k, rows.radius, rows.points.shape[1]
        sums, counts = cluster_grid_sums(rows.points, rows.labels, k, radius)
        plan = plan_run(k, d, k, algorithm="hdpe-means", mu=1.0, projection_dim=1)
        plan = dataclasses.replace(plan, sigma=rows.sigma)
        assert plan.relation == "add-remove"
        # release_means draws i.i.d. noise per entry and works row by row, so `copies` stacked
        # copies of the k clusters are `copies` independent runs of it.
        centres, _ = release_means(
            np.tile(sums, (copies, 1)), np.tile(counts, copies), plan, radius, rng
        )
        return centres.reshape(copies, k, d)

    return Target(
        "new", release_votes, release_counts, postprocess_votes, public_counts, hdpe_centres
    )


def old_code_target() -> Target:
    """Adapter for the code before the noise fix (commit 8d08953), mapping the current names to
    its behaviour: the float `gaussian_release` instead of `integer_release`, post-processing
    with the exact row count instead of N~, and its float `noisy_means(sums, counts, *, radius,
    sigma, rng)` on float sums. That code released no noisy count; the adapter draws N~ the way
    the fix does, so both outputs have the same form (the old post-processing ignores it)."""
    from privclust.clustering.evolution.histogram import postprocess_votes

    # Modules of the old tree only (the current one has privclust.privacy.noise, and HDPE-means
    # in privclust.clustering.methods.hdpe).
    old_hdpe = importlib.import_module("privclust.clustering.hdpe")
    cluster_sums, noisy_means = old_hdpe.cluster_sums, old_hdpe.noisy_means
    gaussian_release = importlib.import_module("privclust.clustering.noise").gaussian_release

    def release_votes(votes: np.ndarray, sigma: float, rng: np.random.Generator) -> np.ndarray:
        return gaussian_release(votes, sensitivity=1.0, sigma=sigma, rng=rng)

    def release_counts(counts: np.ndarray, mu: float, rng: np.random.Generator) -> np.ndarray:
        noise_draw = np.rint(rng.normal(0.0, 1.0 / mu, size=counts.shape)).astype(np.int64)
        return counts.astype(np.int64) + noise_draw

    def public_counts(n_exact: int, n_noisy: np.ndarray) -> np.ndarray:
        return np.full(n_noisy.shape, n_exact, dtype=np.int64)

    def hdpe_centres(rows: Labelled, copies: int, rng: np.random.Generator) -> np.ndarray:
        sums, counts = cluster_sums(rows.points, rows.labels, rows.k)
        centres = noisy_means(
            np.tile(sums, (copies, 1)),
            np.tile(counts, copies),
            radius=rows.radius,
            sigma=rows.sigma,
            rng=rng,
        )
        return centres.reshape(copies, rows.k, rows.points.shape[1])

    return Target(
        "old", release_votes, release_counts, postprocess_votes, public_counts, hdpe_centres
    )


def load_target(name: str) -> Target:
    if name == "new":
        return current_code_target()
    if name == "old":
        return old_code_target()
    raise ValueError(f"{AUDIT_TARGET_ENV} must be 'new' or 'old', got {name!r}")


# --------------------------------------------------------------------------------------------
# Batch post-processing


def postprocess_rows(noisy: np.ndarray, public_counts: np.ndarray) -> np.ndarray:
    """`postprocess_votes` applied to every row of `noisy` with its own public count.

    Step for step the library's algorithm, along axis 1: a stable argsort of -noisy, the
    sequential cumulative sum of the sorted row (the same additions in the same order, so the
    same floats for float input), the first position where it reaches the count, keep that
    prefix (or every bin when it is never reached), zero the rest and every non-positive bin.
    `check_postprocessing` compares it with the library on sampled rows.
    """
    order = np.argsort(-noisy, axis=1, kind="stable")
    cumulative = np.cumsum(np.take_along_axis(noisy, order, axis=1), axis=1)
    reached = cumulative >= public_counts[:, None]
    first = np.where(reached.any(axis=1), np.argmax(reached, axis=1), noisy.shape[1] - 1)
    rank = np.empty_like(order)
    np.put_along_axis(rank, order, np.arange(noisy.shape[1])[None, :], axis=1)
    keep = rank <= first[:, None]
    return np.where(keep & (noisy > 0), noisy, 0)


def check_postprocessing(
    target: Target, noisy: np.ndarray, public_counts: np.ndarray, processed: np.ndarray
) -> None:
    """Fail the audit unless `processed` equals the library's post-processing on these rows."""
    for row, count, got in zip(noisy, public_counts, processed, strict=True):
        expected = target.postprocess(row, int(count))
        if not (expected.dtype == got.dtype and np.array_equal(expected, got)):
            raise AssertionError(
                f"batch post-processing differs from the library on {row!r} with count {count}"
            )


# --------------------------------------------------------------------------------------------
# Statistics


def cp_lower(hits: int, n: int, level: float) -> float:
    """One-sided Clopper-Pearson lower bound: P(p < bound) <= level."""
    return 0.0 if hits == 0 else float(beta.ppf(level, hits, n - hits + 1))


def cp_upper(hits: int, n: int, level: float) -> float:
    """One-sided Clopper-Pearson upper bound: P(p > bound) <= level."""
    return 1.0 if hits == n else float(beta.ppf(1.0 - level, hits + 1, n - hits))


@dataclass(frozen=True)
class Event:
    name: str
    favours: str  # WITH_CANARY or WITHOUT_CANARY: the side whose probability is p1


@dataclass(frozen=True)
class EventResult:
    release: str
    event: str
    favours: str
    samples: int  # per side
    hits1: int  # on the favoured side
    hits0: int  # on the other side
    p1_lower: float
    p0_upper: float
    eps_lb: float
    claimed_eps: float

    @property
    def p1(self) -> float:
        return self.hits1 / self.samples

    @property
    def p0(self) -> float:
        return self.hits0 / self.samples

    @property
    def passed(self) -> bool:
        return self.eps_lb <= self.claimed_eps


def epsilon_lower_bound(
    hits1: int, hits0: int, samples: int, *, delta: float, level: float
) -> tuple[float, float, float]:
    """(p1_lower, p0_upper, ln((p1_lower - delta) / p0_upper)); -inf when p1_lower <= delta."""
    p1_lower = cp_lower(hits1, samples, level)
    p0_upper = cp_upper(hits0, samples, level)
    excess = p1_lower - delta
    eps_lb = math.log(excess / p0_upper) if excess > 0.0 else -math.inf
    return p1_lower, p0_upper, eps_lb


# --------------------------------------------------------------------------------------------
# Audits

# sample(with_canary, rows, rng, check) -> {event name: boolean array over `rows` releases};
# `check` asks it to compare any batch reimplementation with the library on its first rows.
Sampler = Callable[[bool, int, np.random.Generator, bool], dict[str, np.ndarray]]


@dataclass(frozen=True)
class Audit:
    release: str
    claimed_mu: float
    events: tuple[Event, ...]
    sample: Sampler
    seed: int


def on_lattice(values: np.ndarray, exponent: int) -> np.ndarray:
    """Whether each float is an integer multiple of 2^-exponent (exact for finite floats)."""
    scaled = np.ldexp(np.asarray(values, dtype=np.float64), exponent)
    return scaled == np.floor(scaled)


def vote_release_audit(target: Target) -> Audit:
    """(a) One noisy vote histogram; the canary's bin holds 0 votes in D and 1 in D'.

    Events on the released value y of the canary's bin:
    - "y off the 2^-53 lattice" (favours D): the rounded float sum fl(1 + z) is a multiple of
      2^-53 for every float z, so a float release y = fl(1 + z) is never off that lattice, while
      y = 0 + z = z is off it whenever z has bits below 2^-53 (which needs |z| < 1/2): the old
      code's float release gave it probability 0 on D' and 6.3% on D (10^6 samples each). An
      integer release never shows it.
    - "y >= ceil(3 sigma)" (favours D'): the Gaussian tail test, the event a correct release
      is audited by.
    """
    sigma = noise_multiplier(mu_from_epsilon_delta(TARGET_EPSILON, DELTA), 1)
    threshold = math.ceil(3.0 * sigma)

    def sample(
        with_canary: bool, rows: int, rng: np.random.Generator, check: bool
    ) -> dict[str, np.ndarray]:
        votes = VOTES.copy()
        votes[CANARY_BIN] += int(with_canary)
        released = target.release_votes(np.broadcast_to(votes, (rows, votes.size)), sigma, rng)
        y = released[:, CANARY_BIN]
        return {
            "y off the 2^-53 lattice": ~on_lattice(y, 53),
            f"y >= {threshold}": y >= threshold,
        }

    return Audit(
        release="(a) vote histogram release",
        claimed_mu=1.0 / sigma,
        events=(
            Event("y off the 2^-53 lattice", WITHOUT_CANARY),
            Event(f"y >= {threshold}", WITH_CANARY),
        ),
        sample=sample,
        seed=101,
    )


def postprocessed_histogram_audit(target: Target) -> Audit:
    """(b) M(D) = (N~, postprocess_votes(release(votes(D)), max(N~, 1))), N~ = N + round(noise).

    The total mu (epsilon ~1 at DELTA) is split as the service splits a dataset's budget: the
    count gets mu_c = COUNT_MU_SHARE * mu, the histogram the rest; the claimed mu is
    sqrt(mu_c^2 + mu_hist^2).
    Events, with N = 100 the row count of D and S the nonzero bins of the processed histogram:
    - "sum(S) - min(S) >= N" (favours D'): post-processing with the exact row count n keeps the
      smallest prefix of the sorted bins whose sum reaches n, so every kept bin but the smallest
      sums to less than n (and when n is never reached, all positive bins together sum to less
      than n). With the exact count the event is impossible on D (n = N) and possible on D'
      (n = N + 1): the old code gave it probability 0 on D and 12.6% on D' (10^6 samples each).
      With N~ it is a noisy-count event like any other.
    - "canary bin kept at >= ceil(3 sigma)" (favours D'): the Gaussian tail test through the
      post-processing.
    """
    mu_total = mu_from_epsilon_delta(TARGET_EPSILON, DELTA)
    mu_count = COUNT_MU_SHARE * mu_total
    sigma = noise_multiplier(math.sqrt(mu_total**2 - mu_count**2), 1)
    threshold = math.ceil(3.0 * sigma)
    n_rows = int(VOTES.sum())
    exact_n_event = f"sum(S) - min(S) >= {n_rows}"
    tail_event = f"canary bin kept at >= {threshold}"

    def sample(
        with_canary: bool, rows: int, rng: np.random.Generator, check: bool
    ) -> dict[str, np.ndarray]:
        votes = VOTES.copy()
        votes[CANARY_BIN] += int(with_canary)
        n_side = n_rows + int(with_canary)
        n_noisy = target.release_counts(np.full(rows, n_side, dtype=np.int64), mu_count, rng)
        noisy = target.release_votes(np.broadcast_to(votes, (rows, votes.size)), sigma, rng)
        counts = target.public_counts(n_side, n_noisy)
        processed = postprocess_rows(noisy, counts)
        if check:
            check_postprocessing(
                target, noisy[:CHECK_ROWS], counts[:CHECK_ROWS], processed[:CHECK_ROWS]
            )
        # The kept bins in decreasing order and their running sum: the same floats, added in
        # the same order, as the post-processing's own cumulative sum over its kept prefix.
        kept = -np.sort(-processed, axis=1)
        running = np.cumsum(kept, axis=1)
        size = np.count_nonzero(processed, axis=1)
        all_but_smallest = np.where(size >= 2, running[np.arange(rows), np.maximum(size - 2, 0)], 0)
        return {
            exact_n_event: (size >= 1) & (all_but_smallest >= n_rows),
            tail_event: processed[:, CANARY_BIN] >= threshold,
        }

    return Audit(
        release="(b) post-processed histogram with N~",
        claimed_mu=compose([mu_count, 1.0 / sigma]),
        events=(Event(exact_n_event, WITH_CANARY), Event(tail_event, WITH_CANARY)),
        sample=sample,
        seed=202,
    )


def hdpe_final_step_audit(target: Target) -> Audit:
    """(c) HDPE-means' noisy sums and counts, seen through the centres release_means returns.

    The canary (a row of norm R) is alone in its cluster in D', which is empty in D; its centre
    c (one coordinate) is c = noisy sum / max(noisy count, 1), rescaled into the ball. The two
    releases (sum, sensitivity R; count, sensitivity 1) share sigma: claimed mu = sqrt(2)/sigma.
    Events on the canary cluster's centre c (R = 1):
    - "abs(c) < 2^-8 R on the 2^-53 R lattice" (favours D'): with float noise z on the sum,
      when the noisy count is clamped to 1 the centre is the float sum itself: fl(R + z), always
      a multiple of 2^-53 R (R = 1), on D'; z itself on D, where a value below 2^-8 is on that
      lattice only with probability ~2^-8 (as is a quotient by a noisy count above 1, on both
      sides). The old code gave it probability 2.7e-4 on D' and 3e-6 on D (10^6 samples each).
    - "c >= R/2" (favours D'): the tail test on the centre.
    """
    mu_pair = mu_from_epsilon_delta(TARGET_EPSILON, DELTA)
    sigma = noise_multiplier(mu_pair, 2)
    low_event = f"abs(c) < 2^-{LOW_EXPONENT} R on the 2^-53 R lattice"
    tail_event = "c >= R/2"

    def sample(
        with_canary: bool, rows: int, rng: np.random.Generator, check: bool
    ) -> dict[str, np.ndarray]:
        points, labels = HDPE_ROWS, np.zeros(len(HDPE_ROWS), dtype=np.int64)
        if with_canary:
            points = np.concatenate([points, HDPE_CANARY])
            labels = np.append(labels, HDPE_CANARY_CLUSTER)
        labelled = Labelled(points, labels, HDPE_K, HDPE_RADIUS, sigma)
        centres = target.hdpe_centres(labelled, rows, rng)
        c = centres[:, HDPE_CANARY_CLUSTER, 0]
        scaled = c / HDPE_RADIUS  # R = 1: exact
        return {
            low_event: (np.abs(scaled) < 2.0**-LOW_EXPONENT) & on_lattice(scaled, 53),
            tail_event: c >= HDPE_RADIUS / 2,
        }

    return Audit(
        release="(c) HDPE noisy sums/counts (centres)",
        claimed_mu=compose([1.0 / sigma, 1.0 / sigma]),
        events=(Event(low_event, WITH_CANARY), Event(tail_event, WITH_CANARY)),
        sample=sample,
        seed=303,
    )


AUDITS: tuple[Callable[[Target], Audit], ...] = (
    vote_release_audit,
    postprocessed_histogram_audit,
    hdpe_final_step_audit,
)


def _chunks(total: int, size: int) -> Iterator[int]:
    done = 0
    while done < total:
        rows = min(size, total - done)
        yield rows
        done += rows


def run_audit(
    audit: Audit, samples: int, *, chunk_rows: int = CHUNK_ROWS, seed_offset: int = 0
) -> list[EventResult]:
    """Draw `samples` releases on each side and bound epsilon for every declared event."""
    hits = {(event.name, side): 0 for event in audit.events for side in (True, False)}
    for with_canary in (True, False):
        rng = np.random.default_rng([audit.seed, seed_offset, int(with_canary)])
        for index, rows in enumerate(_chunks(samples, chunk_rows)):
            outcome = audit.sample(with_canary, rows, rng, index == 0)
            for event in audit.events:
                hits[event.name, with_canary] += int(np.count_nonzero(outcome[event.name]))
    level = ALPHA / (2 * len(audit.events))
    claimed = epsilon_from_mu_delta(audit.claimed_mu, DELTA)
    results = []
    for event in audit.events:
        favoured = event.favours == WITH_CANARY
        hits1, hits0 = hits[event.name, favoured], hits[event.name, not favoured]
        p1_lower, p0_upper, eps_lb = epsilon_lower_bound(
            hits1, hits0, samples, delta=DELTA, level=level
        )
        results.append(
            EventResult(
                release=audit.release,
                event=event.name,
                favours=event.favours,
                samples=samples,
                hits1=hits1,
                hits0=hits0,
                p1_lower=p1_lower,
                p0_upper=p0_upper,
                eps_lb=eps_lb,
                claimed_eps=claimed,
            )
        )
    return results


def format_table(results: list[EventResult], target: str) -> str:
    lines = [
        "| target | release | event (favours) | n per side | p0 | p1 | eps_lb | claimed eps "
        "| verdict |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        lines.append(
            f"| {target} | {r.release} | {r.event} ({r.favours}) | {r.samples:,} | "
            f"{r.p0:.3g} ({r.hits0}) | {r.p1:.3g} ({r.hits1}) | {r.eps_lb:.2f} | "
            f"{r.claimed_eps:.3f} | {'pass' if r.passed else 'FAIL'} |"
        )
    return "\n".join(lines)


# --------------------------------------------------------------------------------------------
# Tests

TARGET_NAME = os.environ.get(AUDIT_TARGET_ENV, "new")


@pytest.fixture(scope="module")
def target() -> Target:
    return load_target(TARGET_NAME)


@pytest.mark.slow
@pytest.mark.parametrize("make_audit", AUDITS, ids=["vote-release", "postprocessed", "hdpe"])
def test_release_keeps_its_claimed_epsilon(
    target: Target, make_audit: Callable[[Target], Audit]
) -> None:
    results = run_audit(make_audit(target), TEST_SAMPLES)
    table = format_table(results, target.name)
    print("\n" + table)
    assert all(r.passed for r in results), "eps lower bound above the claim:\n" + table


def test_batch_postprocessing_matches_the_library_on_edge_cases(target: Target) -> None:
    rng = np.random.default_rng(7)
    rows = [
        np.array([5, 5, 5, 5]),  # ties across the threshold
        np.array([-3, -1, -2, -7]),  # nothing positive
        np.array([2, 1, 0, -1]),  # never reaches the count
        np.array([9, 0, 0, 0]),  # the first bin alone reaches it
        np.array([0, 0, 0, 0]),
    ]
    noisy = np.stack(rows + [rng.integers(-6, 12, size=4) for _ in range(200)])
    if target.name == "old":
        noisy = noisy.astype(np.float64) + rng.normal(0.0, 0.25, size=noisy.shape)
    for counts in (np.full(len(noisy), 10), rng.integers(-20, 30, size=len(noisy))):
        processed = postprocess_rows(noisy, counts)
        check_postprocessing(target, noisy, counts, processed)


def test_the_batch_count_release_is_release_count(target: Target) -> None:
    if target.name != "new":
        pytest.skip("the old code has no noisy row count")
    from privclust.privacy.noise import release_count

    for seed in range(5):
        mu = 0.02 + 0.3 * seed
        single = release_count(100, mu, np.random.default_rng(seed))
        batch = target.release_counts(np.array([100]), mu, np.random.default_rng(seed))
        assert batch.tolist() == [single]


def test_clopper_pearson_bounds_and_the_epsilon_bound() -> None:
    # No hit in n: the upper bound solves (1 - p)^n = level.
    assert cp_upper(0, 1000, 0.01) == pytest.approx(1.0 - 0.01 ** (1 / 1000), rel=1e-9)
    # All n hits: the lower bound solves p^n = level.
    assert cp_lower(1000, 1000, 0.01) == pytest.approx(0.01 ** (1 / 1000), rel=1e-9)
    assert cp_lower(0, 10, 0.01) == 0.0 and cp_upper(10, 10, 0.01) == 1.0
    p1_lower, p0_upper, eps = epsilon_lower_bound(500, 0, 10_000, delta=1e-6, level=0.005)
    assert 0.04 < p1_lower < 0.05 and 0.0 < p0_upper < 1e-3
    assert eps == pytest.approx(math.log((p1_lower - 1e-6) / p0_upper))
    assert epsilon_lower_bound(0, 0, 100, delta=1e-6, level=0.005)[2] == -math.inf
