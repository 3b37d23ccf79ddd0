"""The secure sum: pairwise masks cancel, the coordinator's sum is the exact statistic plus the
noise shares bit for bit, and what the coordinator receives looks uniform."""

from __future__ import annotations

import hashlib
import math

import numpy as np
import pytest
from scipy.stats import chisquare

from privclust.clustering.data.rows import Part, WorkingCopy
from privclust.clustering.mechanisms.grid import grid_sensitivity
from privclust.clustering.mechanisms.lloyd import LloydSums
from privclust.federation import (
    Layout,
    MaskScope,
    MemberKey,
    MemberSeat,
    NoiseShares,
    aggregate,
    answer_release,
    fingerprint,
    masked_contribution,
    member_mask,
    pair_stream,
    released,
    ring_sum,
    to_ring,
)
from privclust.privacy import noise

SCOPE = MaskScope(federation="fed-1", job="job-1", pass_index=0, release=0)
I64 = np.iinfo(np.int64)


def fixed_keys(count: int, label: str = "test") -> list[MemberKey]:
    """Members with fixed private keys, so that a statistical test on their masks is
    reproducible (the service draws keys from OS entropy)."""
    return [
        MemberKey.from_private_bytes(hashlib.sha256(f"{label}-{i}".encode()).digest())
        for i in range(count)
    ]


def publics(keys: list[MemberKey]) -> list[bytes]:
    return [key.public for key in keys]


@pytest.mark.parametrize("members", [2, 3, 16])
def test_masks_cancel_in_the_sum(members: int) -> None:
    keys = fixed_keys(members)
    masks = [member_mask(key, publics(keys), SCOPE, 257) for key in keys]
    assert not np.any(ring_sum(masks))
    assert all(np.count_nonzero(mask) > 250 for mask in masks)


@pytest.mark.parametrize("members", [2, 3, 16])
def test_the_sum_of_masked_vectors_is_the_exact_sum_plus_the_noise_bit_for_bit(
    members: int,
) -> None:
    keys = fixed_keys(members)
    rng = np.random.default_rng(members)
    # Extremes included: members' words wrap around the ring, their total does not.
    stats = [rng.integers(I64.min // members, I64.max // members, size=(5, 7)) for _ in keys]
    stats[0][0, 0], stats[-1][0, 0] = I64.max // members, I64.min // members
    plan = NoiseShares(members=members, colluding=members - 1)
    shares = [plan.share(i, (5, 7), sensitivity=3.0, sigma=2.0, rng=rng) for i in range(members)]
    messages = [
        masked_contribution(stat, share, key, publics(keys), SCOPE)
        for stat, share, key in zip(stats, shares, keys, strict=True)
    ]
    total = aggregate(messages, members).reshape(5, 7)
    np.testing.assert_array_equal(total, np.sum(stats, axis=0) + np.sum(shares, axis=0))
    with pytest.raises(ValueError, match="messages"):
        aggregate(messages[:-1], members)


def test_a_federated_lloyd_release_equals_the_central_one_on_the_pooled_rows() -> None:
    # Three members hold a third of the rows each; with the holder's draw fixed (the test's
    # generator stands in for its ChaCha20 one), the coordinator's sum is, bit for bit, what the
    # central release of the pooled rows gives with the same draw.
    rows = np.random.default_rng(1).uniform(-1.0, 1.0, size=(300, 4))
    centres = np.array([[0.5, 0.5, 0.0, 0.0], [-0.5, -0.5, 0.0, 0.0]])
    statistic = LloydSums(centres, 0.8)
    multiplier, sigma = 5, 3.0
    sensitivity = math.hypot(grid_sensitivity(4), multiplier)  # add/remove, as joint_sensitivity

    def joint(sums: np.ndarray, counts: np.ndarray) -> np.ndarray:
        return Layout.of([sums, counts]).flatten([sums, counts * np.int64(multiplier)])

    central = noise.integer_release(
        joint(*statistic(Part(rows))),
        sensitivity=sensitivity,
        sigma=sigma,
        rng=np.random.default_rng(7),
    )
    keys, plan = fixed_keys(3), NoiseShares(members=3)
    messages = []
    for position, (key, own) in enumerate(zip(keys, np.array_split(rows, 3), strict=True)):
        exact = joint(*statistic(Part(own)))
        share = plan.share(
            position,
            exact.shape,
            sensitivity=sensitivity,
            sigma=sigma,
            rng=np.random.default_rng(7),
        )
        message = masked_contribution(exact, share, key, publics(keys), SCOPE)
        # Nothing a member sends holds its exact statistic, its noisy one or its row count,
        # anywhere in the message (a uniform word hits one of these ~70 values by chance with
        # probability about 70 x 70 / 2^64 per member: never).
        secrets = np.concatenate(
            [to_ring(exact), to_ring(exact + share), to_ring(np.array([len(own)]))]
        )
        assert not np.isin(message, secrets).any()
        messages.append(message)
    np.testing.assert_array_equal(aggregate(messages, 3), central)


def test_members_answer_a_pass_over_their_own_rows_and_the_coordinator_gets_the_release() -> None:
    # The same, through the member's and the coordinator's entry points: a pass over each
    # member's own working copy, the coordinator's arrays equal the central release's.
    rows = np.random.default_rng(2).uniform(-1.0, 1.0, size=(240, 3))
    statistic = LloydSums(np.array([[0.3, 0.0, 0.0], [-0.3, 0.0, 0.0], [0.0, 0.5, 0.0]]), 0.6)
    keys = fixed_keys(4)
    shares = NoiseShares(members=4)
    messages, layouts = [], set()
    for key, own in zip(keys, np.array_split(rows, 4), strict=True):
        seat = MemberSeat(key=key, members=tuple(publics(keys)), shares=shares)
        layout, message = answer_release(
            WorkingCopy(own),
            statistic,
            seat,
            SCOPE,
            sensitivity=2.5,
            sigma=1.5,
            rng=np.random.default_rng(4),
        )
        layouts.add(layout)
        messages.append(message)
    (layout,) = layouts
    exact = WorkingCopy(rows).total(statistic)
    central = noise.integer_release(
        layout.flatten(exact), sensitivity=2.5, sigma=1.5, rng=np.random.default_rng(4)
    )
    for got, want in zip(released(messages, layout, 4), layout.split(central), strict=True):
        np.testing.assert_array_equal(got, want)
    with pytest.raises(ValueError, match="keys for"):
        MemberSeat(key=keys[0], members=tuple(publics(keys))[:3], shares=shares)


def uniformity_p_values(words: np.ndarray) -> tuple[float, float]:
    """Chi-squared p-values of the words' top byte and bottom byte over 256 bins."""
    top = np.bincount((words >> np.uint64(56)).astype(np.int64), minlength=256)
    bottom = np.bincount((words & np.uint64(255)).astype(np.int64), minlength=256)
    return float(chisquare(top).pvalue), float(chisquare(bottom).pvalue)


def test_what_the_coordinator_receives_passes_a_uniformity_test() -> None:
    # Every message of a 3-member release of 10^4 words, for statistics as far from uniform as
    # can be (all zeros; one constant): the coordinator's whole view. With fixed keys the test
    # is deterministic; over random keys each p-value falls under 0.01 with probability 1% if
    # the stream is uniform, so 2 x 3 of them would fail by chance at most 6% of key choices:
    # these keys were not chosen, and any change of key or scope that failed would be a finding.
    keys = fixed_keys(3, label="uniformity")
    stats = [np.zeros(10_000, dtype=np.int64), np.full(10_000, 12345), np.arange(10_000)]
    view = [
        masked_contribution(stat, np.zeros_like(stat), key, publics(keys), SCOPE)
        for stat, key in zip(stats, keys, strict=True)
    ]
    for message in view:
        assert message.dtype == np.uint64 and message.shape == (10_000,)
        assert min(uniformity_p_values(message)) > 0.01
    assert not any(
        np.any(message == to_ring(stat)) for message, stat in zip(view, stats, strict=True)
    )


def test_streams_are_shared_by_a_pair_and_differ_between_pairs_and_scopes() -> None:
    a, b, c = fixed_keys(3)
    ab = pair_stream(a.shared_secret(b.public), (a.public, b.public), SCOPE, 64)
    ba = pair_stream(b.shared_secret(a.public), (b.public, a.public), SCOPE, 64)
    np.testing.assert_array_equal(ab, ba)
    ac = pair_stream(a.shared_secret(c.public), (a.public, c.public), SCOPE, 64)
    assert not np.array_equal(ab, ac)
    for other in (
        MaskScope("fed-1", "job-2", 0, 0),
        MaskScope("fed-1", "job-1", 1, 0),
        MaskScope("fed-1", "job-1", 0, 1),
        MaskScope("fed-2", "job-1", 0, 0),
    ):
        shifted = pair_stream(a.shared_secret(b.public), (a.public, b.public), other, 64)
        assert not np.any(shifted == ab)


def test_bad_member_lists_and_keys_are_refused() -> None:
    a, b = fixed_keys(2)
    with pytest.raises(ValueError, match="own public key"):
        member_mask(a, [b.public], SCOPE, 4)
    with pytest.raises(ValueError, match="same public key"):
        member_mask(a, [a.public, b.public, b.public], SCOPE, 4)
    with pytest.raises(ValueError, match="itself"):
        a.shared_secret(a.public)
    with pytest.raises(ValueError, match="no secret"):
        a.shared_secret(bytes(32))  # a low-order point: its secret would be all zeros
    with pytest.raises(ValueError, match="32 bytes"):
        fingerprint(b"short")
    with pytest.raises(TypeError, match="exact integers"):
        masked_contribution(
            np.zeros(3), np.zeros(3, dtype=np.int64), a, [a.public, b.public], SCOPE
        )
    with pytest.raises(ValueError, match="shape"):
        masked_contribution(
            np.zeros(3, dtype=np.int64), np.zeros(4, dtype=np.int64), a, [a.public, b.public], SCOPE
        )


def test_keys_round_trip_and_fingerprints_are_stable() -> None:
    key = MemberKey.generate()
    again = MemberKey.from_private_bytes(key.private_bytes())
    assert again.public == key.public and len(key.public) == 32
    printed = fingerprint(key.public)
    assert printed == fingerprint(again.public)
    assert len(printed.split("-")) == 8 and all(len(group) == 4 for group in printed.split("-"))
    assert fingerprint(MemberKey.generate().public) != printed


def test_a_layout_carries_a_tuple_of_arrays_as_one_vector() -> None:
    arrays = (np.arange(6).reshape(2, 3), np.array([7, 8]), np.zeros((0, 4), dtype=np.int64))
    layout = Layout.of(arrays)
    flat = layout.flatten(arrays)
    assert flat.dtype == np.int64 and flat.shape == (layout.size,) == (8,)
    for back, original in zip(layout.split(flat), arrays, strict=True):
        np.testing.assert_array_equal(back, original)
    with pytest.raises(ValueError):
        layout.flatten(arrays[:2])
