"""One federated release, end to end: what a member sends and what the coordinator adds up.

A member, for one release of a job (privclust.federation.masks.MaskScope):
1. computes its exact integer statistic on its own rows (the same pass the central engine runs,
   privclust.clustering.data.rows) against the public values of the job;
2. adds its noise share (privclust.federation.shares), drawn after its own ledger has committed
   the job's charge;
3. masks the sum with its pairwise masks and sends only the masked words.

The coordinator adds the members' masked vectors modulo 2^64 (`aggregate`) and gets the exact
statistic of all the rows plus the whole noise: the same integers a central release of the
pooled rows gives with the same noise. It never sees anything else of a member.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from privclust.clustering.data.release import Gaussian
from privclust.clustering.data.rows import Rows, Statistic
from privclust.federation.keys import MemberKey
from privclust.federation.masks import MaskScope, member_mask
from privclust.federation.ring import Layout, from_ring, ring_sum, to_ring
from privclust.federation.shares import NoiseShares
from privclust.privacy.noise import job_generator

__all__ = [
    "MemberSeat",
    "aggregate",
    "answer_pass",
    "answer_release",
    "masked_contribution",
    "released",
]


def masked_contribution(
    statistic: np.ndarray,
    noise_share: np.ndarray,
    key: MemberKey,
    members: Sequence[bytes],
    scope: MaskScope,
    bits: int = 64,
) -> np.ndarray:
    """The member's flat message: (statistic + noise_share) + mask, modulo 2^bits (uint64 or
    uint32 words).

    `statistic` and `noise_share` are integer arrays of one shape; `members` is every member's
    public key in the federation (this member's included)."""
    exact = np.asarray(statistic)
    share = np.asarray(noise_share)
    if exact.shape != share.shape:
        raise ValueError(f"a statistic of shape {exact.shape} and a share of shape {share.shape}")
    words = to_ring(exact, bits)
    np.add(words, to_ring(share, bits), out=words)
    np.add(words, member_mask(key, members, scope, words.shape[0], bits), out=words)
    return words


def aggregate(messages: Sequence[np.ndarray], members: int) -> np.ndarray:
    """The coordinator's whole part: the sum of every member's message in their ring, read as
    int64 (the exact statistic plus the noise). All `members` messages are needed: without one,
    its masks do not cancel and the sum is noise."""
    if len(messages) != members:
        raise ValueError(f"{len(messages)} messages from a federation of {members} members")
    return from_ring(ring_sum(messages))


@dataclass(frozen=True)
class MemberSeat:
    """What a member knows of the federation it sits in: its own key, every member's public key
    in the federation's public order (its own included), and who draws the noise."""

    key: MemberKey
    members: tuple[bytes, ...]
    shares: NoiseShares

    def __post_init__(self) -> None:
        if len(self.members) != self.shares.members:
            raise ValueError(f"{len(self.members)} keys for {self.shares.members} members")
        if self.key.public not in self.members:
            raise ValueError("the member's own public key is not among the members'")

    @property
    def position(self) -> int:
        return self.members.index(self.key.public)


def answer_release(
    rows: Rows,
    statistic: Statistic,
    seat: MemberSeat,
    scope: MaskScope,
    *,
    sensitivity: float,
    sigma: float,
    rng: np.random.Generator | None = None,
) -> tuple[Layout, np.ndarray]:
    """A member's whole part in one release: the pass over its own rows, its noise share (drawn
    here, after the pass, from OS entropy unless a test passes `rng`), and the masked message.
    Returns the statistic's layout (public: it follows from the plan) and the message."""
    exact = rows.total(statistic)
    layout = Layout.of(exact)
    flat = layout.flatten(exact)
    share = seat.shares.share(
        seat.position, flat.shape, sensitivity=sensitivity, sigma=sigma, rng=rng
    )
    return layout, masked_contribution(flat, share, seat.key, seat.members, scope)


def answer_pass(
    rows: Rows,
    statistic: Statistic,
    noises: Sequence[Gaussian],
    seat: MemberSeat,
    scope: MaskScope,
    rng: np.random.Generator | None = None,
    bits: int = 64,
) -> tuple[Layout, np.ndarray]:
    """`answer_release` for a pass of several arrays, each with its own `Gaussian` (as
    `Rows.release` takes them): each array's share is drawn in order, from one generator
    (OS entropy unless a test passes `rng`), as the central release draws each array's noise.
    The shares are drawn after the pass; the message is in the ring modulo 2^bits."""
    exact = rows.total(statistic)
    if len(exact) != len(noises):
        raise ValueError(f"{len(exact)} arrays but {len(noises)} noises")
    layout = Layout.of(exact)
    generator = job_generator(rng)
    shares = []
    for array, g in zip(exact, noises, strict=True):
        share = seat.shares.share(
            seat.position,
            np.shape(array),
            sensitivity=g.scaled_sensitivity,
            sigma=g.sigma,
            rng=generator,
        )
        shares.append(share)
    flat, share = layout.flatten(exact), layout.flatten(shares)
    return layout, masked_contribution(flat, share, seat.key, seat.members, scope, bits)


def released(
    messages: Sequence[np.ndarray], layout: Layout, members: int
) -> tuple[np.ndarray, ...]:
    """The coordinator's release from every member's message: the noisy pooled statistic, as
    the arrays the pass returns."""
    return layout.split(aggregate(messages, members))
