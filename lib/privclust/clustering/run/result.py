"""The value a clustering run returns: the private centres, rounded for release, and the privacy
it spent; on a box domain, the same centres in the columns' own units as well."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import numpy as np

from privclust.clustering.choices import Relation
from privclust.clustering.data.scaling import ORIGINAL_SPACE, SCALED_SPACE, Box

# Released centres are rounded, in centred coordinates, to multiples of R / 2^RELEASE_BITS
# (a relative precision of 2.3e-10 of the radius): no released digit is finer than that.
RELEASE_BITS = 32


@dataclass(frozen=True)
class Outcome:
    """What a method's run found: its centres in centred coordinates (not yet released) and,
    for PE-means and the methods built on it, the final number of variations L; for a run that
    ends with noisy Lloyd steps, how far its last step moved the centres against that step's
    noise, and the root mean squared move of a row's centre (`last_move`:
    privclust.clustering.mechanisms.lloyd.last_move_ratio, released values only)."""

    centres: np.ndarray
    final_variations: int = 0
    last_move: tuple[float, float] | None = None


def released_centres(centred: np.ndarray, center: np.ndarray, radius: float) -> np.ndarray:
    """`centred` centres snapped to the release grid R / 2^RELEASE_BITS and moved back to the
    original coordinates around `center`, read-only.

    Snapping truncates towards the domain centre, so a centre inside the ball stays inside.
    """
    step = float(radius) * 2.0**-RELEASE_BITS
    centres = np.trunc(np.asarray(centred, dtype=np.float64) / step) * step + center
    centres.flags.writeable = False
    return centres


@dataclass(frozen=True)
class ClusteringResult:
    """Differentially private cluster centres and the exact privacy accounting of the run.

    `centers` is a read-only k x d array in the caller's original coordinates, snapped to
    multiples of R / 2^32 around the domain centre. The run is `mu`-GDP under `relation`:
    `releases` integer Gaussian mechanisms with noise multiplier `sigma` (each calibrated to its
    sensitivity: 1 for a vote histogram or count vector, R for HDPE's noisy sums, sqrt(2) and 2R
    under replace-one), plus, when `count_mu` is set, the run's own noisy row count, composing
    to sqrt(releases / sigma^2 + count_mu^2) <= mu. `n_public` is the public row count the run
    planned with (N~, or N when it is public). `iterations` counts the
    PE-means iterations (for HDPE-means the PE iterations in the projected space; its two final
    noisy releases are counted in `releases`, not here). `epsilon`/`delta` are set when the
    budget was given as (epsilon, delta). `algorithm` and `relation` are the plain values of
    an `Algorithm` and a `Relation` (privclust.clustering.choices).

    With summaries (privclust.clustering.outputs.summaries), `sizes` (noisy per-centre row counts,
    floored at 0) and `loss` (the noisy clipped k-means loss over N~, with the standard deviation of
    its noise `loss_se`) are released with `summary_mu` of the job's mu (two releases, see
    privclust.clustering.outputs.summaries.summary_sigmas); `releases` and `sigma` are then those of
    the centres, and sqrt(releases / sigma^2 + summary_mu^2 (+ count_mu^2)) <= mu.

    `last_move` (a run that ends with noisy Lloyd steps: pe-lloyd, so `auto`, and fastlloyd):
    the largest ratio of a centre's move in the last step to the noise of that step
    (Outcome.last_move), and `last_shift` the root mean squared move of a row's centre in that
    step (weighted by the noisy counts) in the space the run clusters in; post-processing of
    released values, read by the `not-converged` warning.
    """

    centers: np.ndarray
    algorithm: str
    mu: float
    sigma: float
    releases: int
    iterations: int
    epsilon: float | None = None
    delta: float | None = None
    variations: int = 0
    final_variations: int = 0
    population_size: int = 0
    projection_dim: int | None = None
    n_public: int = 0
    relation: str = Relation.ADD_REMOVE.value
    count_mu: float | None = None
    sizes: np.ndarray | None = None
    loss: float | None = None
    loss_se: float | None = None
    summary_mu: float | None = None
    last_move: float | None = None
    last_shift: float | None = None

    @property
    def loss_space(self) -> str:
        """Where `loss` is measured: "original", the domain's own units (a run on a ball; a run
        on per-column bounds says "scaled": privclust.clustering.data.scaling)."""
        return ORIGINAL_SPACE

    def privacy_spent(self) -> dict[str, Any]:
        """What the run spent and planned with, as `privclust cluster` and `PrivateKMeans`
        report it: `n_rows_dp` is the noisy row count it planned with (DP output itself), None
        when the count was public; `summary_mu` only for a run with summaries."""
        spent = {
            "mu": self.mu,
            "epsilon": self.epsilon,
            "delta": self.delta,
            "sigma": self.sigma,
            "releases": self.releases,
            "iterations": self.iterations,
            "relation": self.relation,
            "count_mu": self.count_mu,
            "n_rows_dp": None if self.relation == Relation.REPLACE_ONE else self.n_public,
        }
        if self.sizes is not None:
            spent["summary_mu"] = self.summary_mu
        return spent


@dataclass(frozen=True)
class ScaledClusteringResult(ClusteringResult):
    """A run on a box domain: `centers` in the columns' own units; `scaled_centers` the same
    centres in the scaled space, where the run clustered and where `loss` and `loss_se` are
    measured (`loss_space` "scaled"); `box` the declared bounds."""

    scaled_centers: np.ndarray | None = None
    box: Box | None = None

    @property
    def loss_space(self) -> str:
        return SCALED_SPACE


def into_box(result: ClusteringResult, box: Box | None) -> ClusteringResult:
    """A scaled-space run's centres projected into the unit box (post-processing of the
    released centres with the public bounds: a centre outside the box cannot be the mean of
    rows inside it, and the scaled ball reaches beyond the box); a ball's run unchanged."""
    if box is None:
        return result
    centres = np.clip(result.centers, 0.0, 1.0)
    centres.flags.writeable = False
    return dataclasses.replace(result, centers=centres)


def in_original_units(result: ClusteringResult, box: Box) -> ScaledClusteringResult:
    """A scaled-space result with its centres mapped back to the columns' own units."""
    fields = {f.name: getattr(result, f.name) for f in dataclasses.fields(ClusteringResult)}
    fields["centers"] = box.to_original(result.centers)
    return ScaledClusteringResult(**fields, scaled_centers=result.centers, box=box)
