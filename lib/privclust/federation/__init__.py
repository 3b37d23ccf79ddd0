"""Federated releases: several owners' rows released as one secure sum of noisy shares.

- `keys`: a member's X25519 key, the secret each pair of members agrees, fingerprints.
- `masks`: each pair's ChaCha20 stream per release; masks that cancel in the sum.
- `ring`: integers modulo 2^64; a statistic's arrays as one flat vector (`Layout`).
- `shares`: who draws a release's noise and what it costs (`NoiseShares`, `release_mu`).
- `protocol`: a member's masked message and the coordinator's sum.

Needs the `federation` extra (the `cryptography` package).
"""

from privclust.federation.keys import MemberKey, fingerprint
from privclust.federation.masks import MaskScope, member_mask, pair_stream
from privclust.federation.protocol import (
    MemberSeat,
    aggregate,
    answer_release,
    masked_contribution,
    released,
)
from privclust.federation.ring import Layout, from_ring, ring_sum, to_ring
from privclust.federation.shares import MAX_MEMBERS, MIN_MEMBERS, NoiseShares, release_mu

__all__ = [
    "MAX_MEMBERS",
    "MIN_MEMBERS",
    "Layout",
    "MaskScope",
    "MemberKey",
    "MemberSeat",
    "NoiseShares",
    "aggregate",
    "answer_release",
    "fingerprint",
    "from_ring",
    "masked_contribution",
    "member_mask",
    "pair_stream",
    "release_mu",
    "released",
    "ring_sum",
    "to_ring",
]
