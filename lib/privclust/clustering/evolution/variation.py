"""Levy-flight variations of selected centres (Mantegna's algorithm), the PE-means VARIATION_API."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from privclust.clustering.data.domain import project_into_ball

LEVY_BETA = 1.75
VARIATION_GAMMA = 0.01


def mantegna_sigma_u(beta: float = LEVY_BETA) -> float:
    """Standard deviation of the numerator u in Mantegna's Levy-stable sampler."""
    numerator = math.gamma(1.0 + beta) * math.sin(math.pi * beta / 2.0)
    denominator = math.gamma((1.0 + beta) / 2.0) * beta * 2.0 ** ((beta - 1.0) / 2.0)
    return float((numerator / denominator) ** (1.0 / beta))


def levy_steps(rng: np.random.Generator, n: int, d: int, beta: float = LEVY_BETA) -> np.ndarray:
    """n x d i.i.d. Levy(beta) draws: u / |v|^(1/beta), u ~ N(0, sigma_u^2), v ~ N(0, 1).

    Drawn and combined in float32 (returned as float64): a step is scaled by gamma R = 0.01 R,
    so float32's 6e-8 relative precision is far below anything the search resolves, and the
    draws take a third less time (12% of a 64-dimensional PE-means job in float64)."""
    u = rng.standard_normal(size=(n, d), dtype=np.float32)
    u *= np.float32(mantegna_sigma_u(beta))
    v = rng.standard_normal(size=(n, d), dtype=np.float32)
    np.abs(v, out=v)
    # |v| < 1e-12 has probability ~1e-12 per draw; the floor keeps steps finite (at most ~1e7 * u,
    # far outside any ball, so they are projected onto the sphere anyway) without overflow.
    np.maximum(v, np.float32(1e-12), out=v)
    np.power(v, np.float32(1.0 / beta), out=v)
    u /= v
    return u.astype(np.float64)


def levy_variations(
    centres: np.ndarray,
    variations: int,
    radius: float,
    rng: np.random.Generator,
    gamma: float = VARIATION_GAMMA,
) -> np.ndarray:
    """`variations` mutants of each centre (centred coordinates), grouped by centre, in the ball.

    Row i*variations + l is the l-th mutant of centre i: centre + gamma * R * Levy step, rescaled
    onto the sphere of radius R when it lands outside.
    """
    k, d = centres.shape
    steps = levy_steps(rng, k * variations, d)
    steps *= gamma * radius
    steps += np.repeat(centres, variations, axis=0)
    return project_into_ball(steps, radius)


@dataclass(frozen=True, eq=False)
class Variations:
    """How a population was made from public values alone: its `anchors` (the previous
    selection) followed by `per_anchor` Levy variations of each, drawn by `levy_variations` in
    the ball of `radius` from an SFC64 generator whose state before the draw was `generator`
    (its four 64-bit words, then its buffered 32-bit half: a flag and the value).

    Anyone holding these (a federation's member) draws the same population again (`population`)
    instead of receiving it whole. The state is that of the variations' own generator, which
    never draws noise (privacy.noise.variation_generator); knowing it tells nothing but the
    variations, which are published with the vote anyway."""

    anchors: np.ndarray
    per_anchor: int
    radius: float
    generator: tuple[int, ...]

    @classmethod
    def draw(
        cls, anchors: np.ndarray, per_anchor: int, radius: float, rng: np.random.Generator
    ) -> tuple[Variations, np.ndarray]:
        """The recipe and the population it gives (anchors first), drawing from `rng` (an
        SFC64 generator, advanced as `levy_variations` advances it)."""
        recipe = cls(np.array(anchors, dtype=np.float64), per_anchor, radius, sfc64_words(rng))
        variations = levy_variations(recipe.anchors, per_anchor, radius, rng)
        return recipe, np.concatenate([recipe.anchors, variations])

    def population(self) -> np.ndarray:
        """The anchors and their variations, drawn again from the recorded state."""
        rng = np.random.Generator(np.random.SFC64())
        a, b, c, counter, has_half, half = self.generator
        rng.bit_generator.state = {
            "bit_generator": "SFC64",
            "state": {"state": np.array([a, b, c, counter], dtype=np.uint64)},
            "has_uint32": has_half,
            "uinteger": half,
        }
        variations = levy_variations(self.anchors, self.per_anchor, self.radius, rng)
        return np.concatenate([self.anchors, variations])


def sfc64_words(rng: np.random.Generator) -> tuple[int, ...]:
    """An SFC64 generator's whole state as six integers (`Variations.generator`)."""
    state = rng.bit_generator.state
    if state["bit_generator"] != "SFC64":
        raise TypeError(f"the variations are drawn from SFC64, not {state['bit_generator']}")
    words = [int(w) for w in state["state"]["state"]]
    return (*words, int(state["has_uint32"]), int(state["uinteger"]))
