"""The wire form of a pass: each federated statistic survives the round trip as the same
statistic, anything else is refused, and the member prices a release by its own sensitivity."""

from __future__ import annotations

import base64
import copy
import json
import math
from fractions import Fraction
from typing import Any

import numpy as np
import pytest

from privclust.clustering.data.release import Gaussian
from privclust.clustering.data.rows import Part, RowCount, Statistic, WorkingCopy
from privclust.clustering.evolution.nearest import GroupLayout
from privclust.clustering.evolution.vote import VoteCounts
from privclust.clustering.mechanisms.candidates import ClusterLosses
from privclust.clustering.mechanisms.grid import grid_sensitivity
from privclust.clustering.mechanisms.lloyd import JointLloydSums, LloydSums
from privclust.federation.passes import PassError, decode, encode, layout_of
from privclust.federation.pricing import (
    decode_noises,
    encode_noises,
    release_mu_squared,
    required_sensitivities,
)

RNG = np.random.default_rng(7)
ROWS = RNG.uniform(-0.5, 0.5, size=(300, 3))


def statistics() -> list[Statistic]:
    candidates = RNG.uniform(-0.5, 0.5, size=(12, 3))
    centres = RNG.uniform(-0.3, 0.3, size=(4, 3))
    return [
        RowCount(),
        VoteCounts(candidates, None),
        VoteCounts(candidates, GroupLayout(anchors=4, per_anchor=2)),
        JointLloydSums(LloydSums(centres, 0.25), 37),
        JointLloydSums(LloydSums(centres, np.array([0.1, 0.2, 0.3, 0.4])), 5),
        ClusterLosses(centres, 0.75),
    ]


@pytest.mark.parametrize("statistic", statistics(), ids=lambda s: type(s).__name__)
def test_a_pass_decodes_to_a_statistic_with_the_same_totals(statistic: Statistic) -> None:
    wire = json.loads(json.dumps(encode(statistic)))
    again = decode(wire, 3)
    assert type(again) is type(statistic)
    rows = WorkingCopy(ROWS)
    for a, b in zip(rows.total(statistic), rows.total(again), strict=True):
        np.testing.assert_array_equal(a, b)
    assert encode(again) == wire
    # The coordinator splits the summed words by shapes it knows from public values alone.
    assert layout_of(statistic) == tuple(a.shape for a in rows.total(statistic))


def _lloyd_wire() -> dict[str, Any]:
    return encode(statistics()[3])


def _set(wire: dict[str, Any], path: tuple[str, ...], value: Any) -> dict[str, Any]:
    out = copy.deepcopy(wire)
    node = out
    for part in path[:-1]:
        node = node[part]
    node[path[-1]] = value
    return out


NAN = base64.b64encode(np.full((4, 3), np.nan).astype("<f8").tobytes()).decode()


@pytest.mark.parametrize(
    "change",
    [
        (("pass",), "pickle"),
        (("arrays", "centres", "dtype"), "|O"),
        (("arrays", "centres", "shape"), [4, 4]),
        (("arrays", "centres", "shape"), [4, -3]),
        (("arrays", "centres", "data"), "not base64!"),
        (("arrays", "centres", "data"), NAN),
        (("scalars", "multiplier"), 0),
        (("scalars", "multiplier"), True),
        (("scalars", "scalar_step"), "yes"),
        (("arrays", "extra"), {}),
    ],
    ids=str,
)
def test_a_malformed_pass_is_refused(change: tuple[tuple[str, ...], Any]) -> None:
    with pytest.raises(PassError):
        decode(_set(_lloyd_wire(), *change), 3)


def test_a_pass_for_other_columns_or_a_bad_layout_is_refused() -> None:
    with pytest.raises(PassError):
        decode(_lloyd_wire(), 4)
    votes = encode(statistics()[2])
    with pytest.raises(PassError):
        decode(_set(votes, ("scalars", "per"), 3), 3)
    with pytest.raises(PassError):
        decode({"pass": "row-count", "arrays": {}, "scalars": {"n": 1}}, 3)
    with pytest.raises(PassError):
        decode(["row-count"], 3)
    losses = encode(statistics()[-1])
    for bad in (-1.0, math.inf, "1", True):
        with pytest.raises(PassError):
            decode(_set(losses, ("scalars", "bound"), bad), 3)
    with pytest.raises(PassError):
        decode(_set(losses, ("arrays", "step"), losses["arrays"]["centres"]), 3)


def test_noises_round_trip_and_refuse_what_is_not_finite() -> None:
    noises = [Gaussian(2.0, 3.5, 4)]
    assert decode_noises(json.loads(json.dumps(encode_noises(noises))), 1) == noises
    for bad in (
        [{"sensitivity": math.inf, "sigma": 1.0, "weight": 1}],
        [{"sensitivity": 1.0, "sigma": -1.0, "weight": 1}],
        [{"sensitivity": 1.0, "sigma": 1.0, "weight": 0}],
        [{"sensitivity": 1.0, "sigma": 1.0, "weight": 1}] * 2,
    ):
        with pytest.raises(PassError):
            decode_noises(bad, 1)


def test_the_member_prices_a_release_by_its_own_sensitivity() -> None:
    lloyd = statistics()[3]
    (need,) = required_sensitivities(lloyd, 3, 1)
    assert need == math.hypot(grid_sensitivity(3), 37.0)
    assert required_sensitivities(RowCount(), 3, 4) == [4.0]
    # A row adds at most 2^20 grid units to one cluster's loss sum; m rows m times that.
    assert required_sensitivities(statistics()[-1], 3, 2) == [2.0 * 2**20]
    honest = release_mu_squared([Gaussian(need, 2.0)], [need])
    assert honest == pytest.approx(Fraction(1, 4), rel=1e-12)
    # A coordinator that states half the sensitivity buys a release 4x as expensive in mu^2.
    understated = release_mu_squared([Gaussian(need / 2, 2.0)], [need])
    assert understated == pytest.approx(4 * honest, rel=1e-12)
    # The weight divides the std by sqrt(w): priced as w releases.
    assert release_mu_squared([Gaussian(need, 2.0, 9)], [need]) == pytest.approx(
        9 * honest, rel=1e-12
    )


def test_part_of_a_partition_answers_as_the_whole() -> None:
    """A decoded pass is the function the central engine runs on a partition: the sum over
    two halves is the whole's (the members' statistics add up to the pooled one)."""
    (votes,) = [s for s in statistics() if isinstance(s, VoteCounts) and s.layout is not None]
    again = decode(encode(votes), 3)
    whole = again(Part(ROWS))[0]
    halves = again(Part(ROWS[:100]))[0] + again(Part(ROWS[100:]))[0]
    np.testing.assert_array_equal(whole, halves)
