"""The summaries' price: their share of a job's mu, the noise of their two releases (sizes and
loss) and the loss sum's grid, which a run's plan needs before any row is read. Releasing them
is privclust.clustering.outputs.summaries."""

from __future__ import annotations

import math

from privclust.clustering.errors import ClusteringInputError
from privclust.privacy.gdp import noise_multiplier, remaining_after

# The summaries' default share of a job's mu: summary_mu = SUMMARY_MU_FRACTION * mu (4% of the
# job in GDP terms, mu^2); the centres keep sqrt(1 - 0.2^2) = 98.0% of mu. Measured in
# bench/RESULTS.md ("private summaries", auto, 10-20 seeds): the Table I AUCs move by less than
# 5% at 0.2 on every set, while 0.3 moved sklearn_16_16's by +7.1% (SE 3.0%).
SUMMARY_MU_FRACTION = 0.2
# A sweep's jobs give their summaries a larger share: the noisy losses are the sweep's answer.
# The centres keep sqrt(1 - 0.5^2) = 86.6% of each job's mu. Measured in bench/RESULTS.md
# ("sweeps over k"): at 0.3, a sweep of sklearn_16_16 at epsilon 1 had every noisy loss within
# 20% of the exact one in 36 of 40 runs; at 0.5 in 40 of 40.
SWEEP_SUMMARY_FRACTION = 0.5
# The loss sum's part of the summaries' mu, in GDP terms (mu_loss^2 = 0.8 mu_summary^2); the
# sizes get the rest. The loss is the hard one to estimate (its sensitivity, the clip B of at
# least R^2, is far above a typical row's squared distance), while a size's noise is small next
# to N~/k.
SUMMARY_LOSS_SHARE = 0.8
# A row's clipped squared distance is put on a grid of B / 2^LOSS_GRID_BITS: a relative
# resolution of 1e-6 of the largest possible term, far below the noise, and sums stay exact
# in int64 for up to 2^43 rows.
LOSS_GRID_BITS = 20


def summary_mu(job_mu: float, fraction: float | None = None) -> float:
    """The part of a job's mu spent on its summaries (`fraction` of it; default
    SUMMARY_MU_FRACTION). The centres share remaining_after(job_mu, summary_mu)."""
    share = SUMMARY_MU_FRACTION if fraction is None else float(fraction)
    if not (math.isfinite(share) and 0.0 < share < 1.0):
        raise ClusteringInputError(
            "summary_fraction", f"summary_fraction must be in (0, 1), got {share!r}"
        )
    return share * job_mu


def summary_sigmas(mu_summary: float) -> tuple[float, float]:
    """(sizes sigma, loss sigma) of the two summary releases, composing to at most mu_summary:
    the loss gets mu_loss = sqrt(SUMMARY_LOSS_SHARE) mu_summary, the sizes what is left."""
    mu_loss = math.sqrt(SUMMARY_LOSS_SHARE) * mu_summary
    mu_sizes = remaining_after(mu_summary, mu_loss)
    return noise_multiplier(mu_sizes, 1), noise_multiplier(mu_loss, 1)


def centres_mu(job_mu: float, mu_summary: float) -> float:
    """What the centres may spend when `mu_summary` of `job_mu` goes to the summaries."""
    return remaining_after(job_mu, mu_summary)


def loss_sensitivity() -> float:
    """l2 sensitivity of the loss sum in grid units, under add/remove and replace-one alike:
    every row's term is an integer in [0, 2^LOSS_GRID_BITS]."""
    return float(2**LOSS_GRID_BITS)
