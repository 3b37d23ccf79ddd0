"""A pass as it travels to a member: JSON that names the pass and carries its public arrays.

A member of a federation runs, for each release of a job, the same pass the central engine runs
on a partition (privclust.clustering.data.rows). The coordinator sends the pass as data, never
as code: a name from `PASSES` (the allowlist), its public arrays (candidates, centres; each as
base64 of little-endian bytes with its dtype and shape) and its public scalars. `decode` builds
the same statistic again on the member and refuses anything else (`PassError`): an unknown
name, a dtype other than float64, a shape that does not match the data or the member's columns,
a value that is not finite, or more values than a release may hold. Nothing a coordinator sends
is ever unpickled or evaluated.

What a release costs the member is its own to decide: privclust.federation.pricing.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from privclust.clustering.data.release import Gaussian
from privclust.clustering.data.rows import RowCount, Statistic
from privclust.clustering.evolution.nearest import GroupLayout
from privclust.clustering.evolution.variation import Variations
from privclust.clustering.evolution.vote import VoteCounts
from privclust.clustering.mechanisms.candidates import ClusterLosses
from privclust.clustering.mechanisms.lloyd import (
    MAX_COUNT_MULTIPLIER,
    JointLloydSums,
    LloydSums,
)
from privclust.privacy.noise import noise_std

__all__ = [
    "MAX_VALUES",
    "PASSES",
    "CandidatesDiffer",
    "PassError",
    "check_ring_bits",
    "decode",
    "encode",
    "layout_of",
    "ring_bits",
]

# The most values one encoded array (or one release) may hold: 2^22 float64s, 32 MiB.
MAX_VALUES = 1 << 22
MAX_CANDIDATES = 1 << 20
_DTYPE = "<f8"

ROW_COUNT = "row-count"
VOTE_COUNTS = "vote-counts"
LLOYD_SUMS = "lloyd-sums"
CLUSTER_LOSSES = "cluster-losses"
PASSES = (ROW_COUNT, VOTE_COUNTS, LLOYD_SUMS, CLUSTER_LOSSES)


class PassError(ValueError):
    """An encoded pass or noise a member refuses (the service answers 422)."""


class CandidatesDiffer(PassError):
    """A vote's candidates, drawn again from their recipe, are not the coordinator's (their
    digests differ: another numpy build or CPU rounds a draw differently); the coordinator then
    sends the candidates whole."""


def _array(values: np.ndarray) -> dict[str, Any]:
    data = np.ascontiguousarray(values, dtype=_DTYPE)
    return {
        "dtype": _DTYPE,
        "shape": list(data.shape),
        "data": base64.b64encode(data.tobytes()).decode("ascii"),
    }


def _read_array(body: Any, name: str) -> np.ndarray:
    if not isinstance(body, Mapping) or set(body) != {"dtype", "shape", "data"}:
        raise PassError(f"{name}: an array is {{dtype, shape, data}}")
    if body["dtype"] != _DTYPE:
        raise PassError(f"{name}: only {_DTYPE} arrays are accepted")
    shape = body["shape"]
    if not (
        isinstance(shape, list)
        and 1 <= len(shape) <= 2
        and all(isinstance(n, int) and not isinstance(n, bool) and n > 0 for n in shape)
    ):
        raise PassError(f"{name}: a shape is 1 or 2 positive integers")
    size = math.prod(shape)
    if size > MAX_VALUES:
        raise PassError(f"{name}: at most {MAX_VALUES} values")
    if not isinstance(body["data"], str):
        raise PassError(f"{name}: data is base64 text")
    try:
        raw = base64.b64decode(body["data"], validate=True)
    except (binascii.Error, ValueError) as exc:
        raise PassError(f"{name}: data is not base64") from exc
    if len(raw) != 8 * size:
        raise PassError(f"{name}: {len(raw)} bytes for shape {shape}")
    values = np.frombuffer(raw, dtype=_DTYPE).astype(np.float64).reshape(shape)
    if not np.all(np.isfinite(values)):
        raise PassError(f"{name}: values must be finite")
    return values


def _int(scalars: Mapping[str, Any], name: str, low: int, high: int) -> int:
    value = scalars.get(name)
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
        raise PassError(f"{name}: an integer in [{low}, {high}]")
    return value


def candidates_digest(candidates: np.ndarray) -> str:
    """SHA-256 of the candidates' little-endian float64 bytes (hex): what a member checks the
    candidates it drew again against."""
    data = np.ascontiguousarray(candidates, dtype=_DTYPE)
    shape = ",".join(str(n) for n in data.shape).encode()
    return hashlib.sha256(shape + b";" + data.tobytes()).hexdigest()


def encode(statistic: Statistic, *, whole: bool = False) -> dict[str, Any]:
    """`statistic` as JSON-ready data (refused when it is not a federated pass). A vote whose
    candidates have a recipe (`VoteCounts.recipe`) sends the recipe and the candidates' digest
    instead of the candidates, unless `whole`."""
    if isinstance(statistic, RowCount):
        return {"pass": ROW_COUNT, "arrays": {}, "scalars": {}}
    if isinstance(statistic, VoteCounts):
        layout, recipe = statistic.layout, statistic.recipe
        if recipe is not None and not whole and layout == _layout_of(recipe):
            return _recipe(statistic, recipe)
        scalars = {} if layout is None else {"anchors": layout.anchors, "per": layout.per_anchor}
        return {
            "pass": VOTE_COUNTS,
            "arrays": {"candidates": _array(statistic.candidates)},
            "scalars": scalars,
        }
    if isinstance(statistic, JointLloydSums):
        step = np.atleast_1d(np.asarray(statistic.sums.step, dtype=np.float64))
        return {
            "pass": LLOYD_SUMS,
            "arrays": {"centres": _array(statistic.sums.centres), "step": _array(step)},
            "scalars": {
                "multiplier": int(statistic.multiplier),
                "scalar_step": bool(np.ndim(statistic.sums.step) == 0),
            },
        }
    if isinstance(statistic, ClusterLosses):
        return {
            "pass": CLUSTER_LOSSES,
            "arrays": {"centres": _array(statistic.centres)},
            "scalars": {"bound": float(statistic.bound)},
        }
    raise PassError(f"{type(statistic).__name__} is not a federated pass")


def _layout_of(recipe: Variations) -> GroupLayout:
    return GroupLayout(anchors=int(recipe.anchors.shape[0]), per_anchor=recipe.per_anchor)


def _recipe(statistic: VoteCounts, recipe: Variations) -> dict[str, Any]:
    return {
        "pass": VOTE_COUNTS,
        "arrays": {"anchors": _array(recipe.anchors)},
        "scalars": {
            "per": recipe.per_anchor,
            "radius": float(recipe.radius),
            "generator": [str(w) for w in recipe.generator],
            "digest": candidates_digest(statistic.candidates),
        },
    }


def decode(body: Any, n_cols: int) -> Statistic:
    """The statistic an encoded pass names, for a member whose rows have `n_cols` columns;
    PassError when anything in it is not what a federated pass holds."""
    if not isinstance(body, Mapping) or set(body) != {"pass", "arrays", "scalars"}:
        raise PassError("a pass is {pass, arrays, scalars}")
    name, arrays, scalars = body["pass"], body["arrays"], body["scalars"]
    if name not in PASSES:
        raise PassError(f"unknown pass {name!r}; a member answers {', '.join(PASSES)}")
    if not isinstance(arrays, Mapping) or not isinstance(scalars, Mapping):
        raise PassError("arrays and scalars are objects")
    if name == ROW_COUNT:
        if arrays or scalars:
            raise PassError("a row count carries nothing")
        return RowCount()
    if name == VOTE_COUNTS:
        return _votes(arrays, scalars, n_cols)
    if name == CLUSTER_LOSSES:
        return _losses(arrays, scalars, n_cols)
    return _lloyd(arrays, scalars, n_cols)


def _points(arrays: Mapping[str, Any], name: str, n_cols: int) -> np.ndarray:
    if set(arrays) - {name, "step"}:
        raise PassError(f"unexpected arrays {sorted(set(arrays) - {name, 'step'})}")
    points = _read_array(arrays.get(name), name)
    if points.ndim != 2 or points.shape[1] != n_cols or points.shape[0] > MAX_CANDIDATES:
        raise PassError(f"{name}: a matrix of at most {MAX_CANDIDATES} rows of {n_cols} columns")
    return points


def _votes(arrays: Mapping[str, Any], scalars: Mapping[str, Any], n_cols: int) -> Statistic:
    if set(arrays) == {"anchors"}:
        return _drawn_votes(arrays, scalars, n_cols)
    if set(arrays) != {"candidates"}:
        raise PassError("a vote carries its candidates, or their anchors and recipe")
    candidates = _points(arrays, "candidates", n_cols)
    if not scalars:
        return VoteCounts(candidates, None)
    if set(scalars) != {"anchors", "per"}:
        raise PassError("a vote's layout is {anchors, per}")
    anchors = _int(scalars, "anchors", 1, candidates.shape[0])
    per = _int(scalars, "per", 0, candidates.shape[0])
    if anchors * (per + 1) != candidates.shape[0]:
        raise PassError("the layout does not match the candidates")
    return VoteCounts(candidates, GroupLayout(anchors=anchors, per_anchor=per))


# The recipe's SFC64 state: four 64-bit words, the buffered-half flag (0 or 1) and the half.
_GENERATOR_BOUNDS = ((1 << 64) - 1,) * 4 + (1, (1 << 32) - 1)


def _drawn_votes(arrays: Mapping[str, Any], scalars: Mapping[str, Any], n_cols: int) -> Statistic:
    """A vote whose candidates the member draws again from their recipe (anchors, variations
    per anchor, radius, generator state) and checks against the coordinator's digest."""
    if set(scalars) != {"per", "radius", "generator", "digest"}:
        raise PassError("a vote's recipe is {per, radius, generator, digest}")
    anchors = _points(arrays, "anchors", n_cols)
    per = _int(scalars, "per", 0, MAX_CANDIDATES)
    size = anchors.shape[0] * (per + 1)
    if size > MAX_CANDIDATES or size * n_cols > MAX_VALUES:
        raise PassError(f"at most {MAX_CANDIDATES} candidates and {MAX_VALUES} values")
    radius, generator, digest = scalars["radius"], scalars["generator"], scalars["digest"]
    if not positive_number(radius):
        raise PassError("radius: a finite number > 0")
    if not (isinstance(generator, list) and len(generator) == len(_GENERATOR_BOUNDS)):
        raise PassError(f"generator: {len(_GENERATOR_BOUNDS)} integers in decimal")
    words = []
    for word, high in zip(generator, _GENERATOR_BOUNDS, strict=True):
        if not (isinstance(word, str) and word.isascii() and word.isdigit() and len(word) <= 20):
            raise PassError("generator: integers in decimal")
        if int(word) > high:
            raise PassError(f"generator: a word above {high}")
        words.append(int(word))
    if not (isinstance(digest, str) and len(digest) == 64):
        raise PassError("digest: SHA-256 in hex")
    recipe = Variations(anchors, per, float(radius), tuple(words))
    candidates = recipe.population()
    if candidates_digest(candidates) != digest:
        raise CandidatesDiffer("the candidates drawn from the recipe differ from the digest")
    return VoteCounts(candidates, _layout_of(recipe), recipe)


def _lloyd(arrays: Mapping[str, Any], scalars: Mapping[str, Any], n_cols: int) -> Statistic:
    centres = _points(arrays, "centres", n_cols)
    step = _read_array(arrays.get("step"), "step")
    if set(scalars) != {"multiplier", "scalar_step"} or not isinstance(
        scalars["scalar_step"], bool
    ):
        raise PassError("a Lloyd pass's scalars are {multiplier, scalar_step}")
    multiplier = _int(scalars, "multiplier", 1, MAX_COUNT_MULTIPLIER)
    if not np.all(step > 0):
        raise PassError("step: every step radius is > 0")
    if scalars["scalar_step"]:
        if step.shape != (1,):
            raise PassError("step: one radius")
        return JointLloydSums(LloydSums(centres, float(step[0])), multiplier)
    if step.shape != (centres.shape[0],):
        raise PassError("step: one radius per centre")
    return JointLloydSums(LloydSums(centres, step), multiplier)


def _losses(arrays: Mapping[str, Any], scalars: Mapping[str, Any], n_cols: int) -> Statistic:
    if "step" in arrays:
        raise PassError("a loss pass carries centres only")
    centres = _points(arrays, "centres", n_cols)
    bound = scalars.get("bound")
    if (
        set(scalars) != {"bound"}
        or not isinstance(bound, int | float)
        or not positive_number(bound)
    ):
        raise PassError("a loss pass's scalars are {bound}, a finite number > 0")
    return ClusterLosses(centres, float(bound))


def layout_of(statistic: Statistic) -> tuple[tuple[int, ...], ...]:
    """The shapes of a federated pass's arrays, from its public values alone (what the
    coordinator splits the summed words into)."""
    if isinstance(statistic, RowCount):
        return ((1,),)
    if isinstance(statistic, VoteCounts):
        return ((int(statistic.candidates.shape[0]),),)
    if isinstance(statistic, JointLloydSums):
        k, d = statistic.sums.centres.shape
        return ((int(k) * int(d) + int(k),),)
    if isinstance(statistic, ClusterLosses):
        return ((int(statistic.centres.shape[0]),),)
    raise PassError(f"{type(statistic).__name__} is not a federated pass")


# A vote's noisy bins are read from 32-bit words when the public count and the noise put them
# this far inside int32's range (below).
_RING_32_BOUND = float(1 << 30)
_RING_32_STDS = 64.0


def ring_bits(
    statistic: Statistic, noises: Sequence[Gaussian], n_public: int | None, holders: int
) -> int:
    """The ring a release is summed in: modulo 2^32 for a vote histogram whose noisy bins
    surely fit int32, else modulo 2^64 (every other pass).

    A bin of the pooled vote is v + Z, 0 <= v <= N (each row votes once), Z the sum of the
    `holders` shares (std `holders`^(1/2) s, s the release's noise std). It is read exactly
    from 32-bit words while -2^31 <= v + Z < 2^31. 32 bits are chosen when the public count
    N~ (`n_public`) plus 64 standard deviations of Z stays below 2^30: a bin is then misread
    only if N exceeds N~ by 2^30 (the count's own noise below -2^30) or |Z| exceeds 64 std
    (probability below 10^-890). Even then the coordinator reads (v + Z) modulo 2^32, a
    function of the noisy release alone: post-processing, at no privacy cost, a loss of
    accuracy only. Halves what each member sends for a vote (4 bytes a bin, not 8).
    The choice depends on public values only (the pass, N~, the noise)."""
    if not isinstance(statistic, VoteCounts) or n_public is None or len(noises) != 1:
        return 64
    g = noises[0]
    std = noise_std(g.scaled_sensitivity, g.sigma) * math.sqrt(holders)
    if float(n_public) + _RING_32_STDS * std < _RING_32_BOUND:
        return 32
    return 64


def check_ring_bits(name: str, bits: Any) -> int:
    """The ring a member is asked to answer `name` in: 64 bits for any pass, 32 for a vote."""
    if bits == 64 or (bits == 32 and name == VOTE_COUNTS):
        return int(bits)
    raise PassError(f"bits: 64, or 32 for a {VOTE_COUNTS} pass")


def positive_number(value: Any) -> bool:
    """A finite int or float above 0 (never a bool)."""
    return (
        isinstance(value, int | float)
        and not isinstance(value, bool)
        and math.isfinite(value)
        and value > 0
    )
