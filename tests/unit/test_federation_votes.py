"""A federated vote's small wire form: its candidates travel as their recipe (anchors, variations
per anchor, the generator's state) with a digest the member checks, and its answer is summed in
32-bit words when the public count and the noise allow."""

from __future__ import annotations

import copy
import json
from typing import Any

import numpy as np
import pytest
from scipy.stats import chisquare

from privclust.clustering.data.release import Gaussian
from privclust.clustering.data.rows import WorkingCopy
from privclust.clustering.evolution.nearest import GroupLayout
from privclust.clustering.evolution.variation import Variations
from privclust.clustering.evolution.vote import VoteCounts
from privclust.clustering.mechanisms.lloyd import JointLloydSums, LloydSums
from privclust.federation.keys import MemberKey
from privclust.federation.masks import MaskScope, member_mask, pair_stream
from privclust.federation.passes import (
    CandidatesDiffer,
    PassError,
    check_ring_bits,
    decode,
    encode,
    ring_bits,
)
from privclust.federation.protocol import masked_contribution, released
from privclust.federation.ring import Layout, from_ring, to_ring
from privclust.privacy import noise

RNG = np.random.default_rng(11)
SCOPE = MaskScope("fed", "job", 3, 0)


def drawn_vote(k: int = 4, per: int = 6, d: int = 3) -> VoteCounts:
    anchors = RNG.uniform(-0.5, 0.5, size=(k, d))
    generator = noise.variation_generator(np.random.default_rng(5))
    generator.standard_normal(3, dtype=np.float32)  # leaves a buffered 32-bit half
    recipe, population = Variations.draw(anchors, per, 0.75, generator)
    return VoteCounts(population, GroupLayout(anchors=k, per_anchor=per), recipe)


def test_a_vote_travels_as_its_recipe_and_the_member_draws_the_same_candidates() -> None:
    vote = drawn_vote(per=30)
    wire = json.loads(json.dumps(encode(vote)))
    assert set(wire["arrays"]) == {"anchors"}  # never the candidates
    again = decode(wire, 3)
    assert isinstance(again, VoteCounts) and again.layout is not None
    assert (again.layout.anchors, again.layout.per_anchor) == (4, 30)
    assert again.candidates.tobytes() == vote.candidates.tobytes()
    rows = WorkingCopy(RNG.uniform(-0.5, 0.5, size=(200, 3)))
    np.testing.assert_array_equal(rows.total(vote)[0], rows.total(again)[0])
    whole = encode(vote, whole=True)
    assert set(whole["arrays"]) == {"candidates"}
    assert decode(whole, 3).candidates.tobytes() == vote.candidates.tobytes()  # type: ignore[attr-defined]
    # k x d anchors and a few scalars instead of k (L + 1) x d candidates.
    assert len(json.dumps(wire)) < len(json.dumps(whole)) / 3
    # Without the layout the recipe implies, the vote would be another statistic: sent whole.
    unlaid = VoteCounts(vote.candidates, None, vote.recipe)
    assert set(encode(unlaid)["arrays"]) == {"candidates"}


def _changed(path: tuple[str, ...], value: Any) -> dict[str, Any]:
    wire = copy.deepcopy(encode(drawn_vote()))
    node = wire
    for part in path[:-1]:
        node = node[part]
    node[path[-1]] = value
    return wire


def test_candidates_drawn_otherwise_than_the_digest_says_are_refused_as_differing() -> None:
    vote = drawn_vote()
    generator = [str(w) for w in vote.recipe.generator]  # type: ignore[union-attr]
    generator[0] = str(int(generator[0]) ^ 1)
    for wire in (
        _changed(("scalars", "generator"), generator),
        _changed(("scalars", "digest"), "0" * 64),
        _changed(("scalars", "radius"), 0.7500000000000001),
    ):
        with pytest.raises(CandidatesDiffer):
            decode(wire, 3)


@pytest.mark.parametrize(
    ("path", "value"),
    [
        (("scalars", "generator"), ["1"] * 5),
        (("scalars", "generator"), ["1", "2", "3", "4", "2", "5"]),  # the half's flag is 0 or 1
        (("scalars", "generator"), ["18446744073709551616", "0", "0", "0", "0", "0"]),
        (("scalars", "generator"), [1, 2, 3, 4, 0, 0]),
        (("scalars", "generator"), ["-1", "2", "3", "4", "0", "0"]),
        (("scalars", "radius"), float("inf")),
        (("scalars", "radius"), True),
        (("scalars", "per"), 1 << 21),
        (("scalars", "digest"), "ab"),
        (("scalars", "anchors"), 4),
        (("arrays", "candidates"), {"dtype": "<f8", "shape": [1, 3], "data": "AAAA"}),
    ],
)
def test_a_malformed_recipe_is_refused(path: tuple[str, ...], value: Any) -> None:
    with pytest.raises(PassError):
        decode(_changed(path, value), 3)


@pytest.mark.parametrize("members", [2, 5])
def test_a_release_in_32_bit_words_is_the_exact_sum_plus_the_noise(members: int) -> None:
    keys = [MemberKey.generate() for _ in range(members)]
    publics = [key.public for key in keys]
    stats = [RNG.integers(0, 1 << 20, size=300) for _ in range(members)]
    shares = [RNG.integers(-(1 << 24), 1 << 24, size=300) for _ in range(members)]
    stats[0][:3] = [0, (1 << 31) - 1 - (1 << 24) * members, 7]  # near the top of int32
    messages = [
        masked_contribution(s, z, key, publics, SCOPE, bits=32)
        for s, z, key in zip(stats, shares, keys, strict=True)
    ]
    assert all(m.dtype == np.uint32 for m in messages)
    (summed,) = released(messages, Layout(((300,),)), members)
    assert summed.dtype == np.int64
    np.testing.assert_array_equal(summed, np.sum(stats, axis=0) + np.sum(shares, axis=0))
    masks = [member_mask(key, publics, SCOPE, 300, bits=32) for key in keys]
    assert not np.any(from_ring(np.sum(masks, axis=0, dtype=np.uint32)))
    assert np.array_equal(from_ring(to_ring(np.array([-5, 1 << 40]), 32)), [-5, 0])


def test_a_32_bit_stream_has_its_own_key() -> None:
    a, b = MemberKey.generate(), MemberKey.generate()
    secret = a.shared_secret(b.public)
    wide = pair_stream(secret, (a.public, b.public), SCOPE, 64)
    narrow = pair_stream(secret, (a.public, b.public), SCOPE, 64, bits=32)
    assert narrow.dtype == np.uint32 and wide.dtype == np.uint64
    assert not np.array_equal(narrow, wide.view(np.uint32)[:64])
    assert np.array_equal(narrow, pair_stream(secret, (b.public, a.public), SCOPE, 64, bits=32))


def test_only_a_vote_whose_noisy_bins_surely_fit_is_summed_in_32_bits() -> None:
    vote, lloyd = drawn_vote(), JointLloydSums(LloydSums(np.zeros((2, 3)), 0.5), 3)
    small = [Gaussian(1.0, 50.0)]
    assert ring_bits(vote, small, 1_000_000, 1) == 32
    assert ring_bits(vote, small, 1 << 30, 1) == 64  # the public count alone is too near
    assert ring_bits(vote, [Gaussian(1.0, 2e7)], 1000, 1) == 64  # 64 std of 2e7 > 2^30 - 1000
    assert ring_bits(vote, [Gaussian(1.0, 1e6)], 1000, 1) == 32
    assert ring_bits(vote, [Gaussian(1.0, 1e6)], 1000, 300) == 64  # sqrt(300) holders' noise
    assert ring_bits(vote, small, None, 1) == 64  # no public count: the count release itself
    assert ring_bits(lloyd, small, 1000, 1) == 64
    assert check_ring_bits("vote-counts", 32) == 32 and check_ring_bits("lloyd-sums", 64) == 64
    for name, bits in (("lloyd-sums", 32), ("row-count", 32), ("vote-counts", 16)):
        with pytest.raises(PassError):
            check_ring_bits(name, bits)


def test_messages_in_32_bit_words_look_uniform() -> None:
    keys = [MemberKey.generate() for _ in range(3)]
    publics = [key.public for key in keys]
    # Small vote counts: unmasked, nearly every word's three high bytes would be zero.
    stats = [RNG.integers(0, 40, size=20_000) for _ in keys]
    words = np.concatenate(
        [
            masked_contribution(s, np.zeros_like(s), key, publics, SCOPE, bits=32)
            for s, key in zip(stats, keys, strict=True)
        ]
    )
    for byte in range(4):
        cells = ((words >> np.uint32(8 * byte)) & np.uint32(0xFF)).astype(np.int64)
        # p > 1e-5 for each of the 4 bytes: a chance failure in under 1 of 10,000 runs (4e-5).
        assert chisquare(np.bincount(cells, minlength=256)).pvalue > 1e-5
