"""The rings the secure sum works in: integers modulo 2^64 (numpy uint64 words), or modulo 2^32
(uint32 words) for a statistic whose noisy sum is known to fit (privclust.federation.passes,
`ring_bits`).

Every statistic privclust releases is exact int64 (vote counts, grid sums, counts per tree node;
privclust.clustering.data.rows), and so is every noise share (privclust.federation.shares). A
member adds the two, reads the result as its two's complement word and adds its mask; the
coordinator adds the members' words. Addition modulo 2^64 is what uint64 arithmetic does, and
two's complement is a ring isomorphism from Z/2^64 onto the int64 range, so the coordinator's
sum, read back as int64, is the exact sum of the statistics and the shares whenever that sum
lies in [-2^63, 2^63) (the same bound the central engine's int64 totals live under). The same
holds modulo 2^32: reducing an int64 modulo 2^32 is a ring homomorphism, so the sum read as int32
is exact whenever it lies in [-2^31, 2^31); outside, it is still a function of the exact noisy
sum (post-processing of the release), only not its value.

Only whole arrays are added (numpy wraps uint64 array arithmetic silently; its scalar arithmetic
would warn on overflow).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

__all__ = ["RING_BITS", "Layout", "from_ring", "ring_negate", "ring_sum", "to_ring", "word_dtype"]

# The word sizes a ring may have: modulo 2^64 (the default) or 2^32.
RING_BITS = (32, 64)
_WORDS: dict[int, np.dtype] = {32: np.dtype(np.uint32), 64: np.dtype(np.uint64)}
_SIGNED = {32: np.int32, 64: np.int64}


def word_dtype(bits: int) -> np.dtype:
    """The numpy dtype of one word of the ring modulo 2^bits."""
    if bits not in _WORDS:
        raise ValueError(f"a ring has words of {' or '.join(map(str, RING_BITS))} bits")
    return _WORDS[bits]


def to_ring(values: np.ndarray, bits: int = 64) -> np.ndarray:
    """Integer values as ring elements: their int64 two's complement words (reduced modulo
    2^bits), as a flat unsigned copy. Non-integer data is refused (a float statistic is not
    exact)."""
    dtype = word_dtype(bits)
    data = np.asarray(values)
    if not np.issubdtype(data.dtype, np.integer):
        raise TypeError(f"the secure sum adds exact integers, got {data.dtype}")
    words = np.ascontiguousarray(data, dtype=np.int64).reshape(-1).copy().view(np.uint64)
    # uint64 -> uint32 keeps the low 32 bits: the residue modulo 2^32.
    return words if bits == 64 else words.astype(dtype)


def from_ring(words: np.ndarray) -> np.ndarray:
    """Ring elements read back as int64 (the representative in [-2^(bits-1), 2^(bits-1)))."""
    data = np.asarray(words)
    for bits, dtype in _WORDS.items():
        if data.dtype == dtype:
            signed = np.ascontiguousarray(data).copy().view(_SIGNED[bits])
            return signed.astype(np.int64, copy=False)
    raise TypeError(f"ring elements are uint32 or uint64 words, got {data.dtype}")


def ring_negate(words: np.ndarray) -> np.ndarray:
    """-x modulo 2^bits (the words' size)."""
    return np.subtract(np.zeros_like(words), words)


def ring_sum(vectors: Iterable[np.ndarray]) -> np.ndarray:
    """The sum of flat vectors of one length and one word size (uint64: modulo 2^64; uint32:
    modulo 2^32), what the coordinator computes."""
    total: np.ndarray | None = None
    for vector in vectors:
        words = np.asarray(vector)
        if words.dtype not in _WORDS.values() or words.ndim != 1:
            raise TypeError("the secure sum adds flat uint32 or uint64 vectors")
        if total is None:
            total = words.copy()
        elif total.dtype != words.dtype:
            raise TypeError(f"vectors of {total.dtype} and {words.dtype} words")
        elif total.shape != words.shape:
            raise ValueError(f"vectors of lengths {total.shape[0]} and {words.shape[0]}")
        else:
            np.add(total, words, out=total)
    if total is None:
        raise ValueError("nothing to add")
    return total


@dataclass(frozen=True)
class Layout:
    """The shapes of a statistic's arrays (a pass returns a tuple of them), so that a tuple
    travels as one flat vector and comes back as the same tuple."""

    shapes: tuple[tuple[int, ...], ...]

    @classmethod
    def of(cls, arrays: Sequence[np.ndarray]) -> Layout:
        return cls(tuple(tuple(int(n) for n in np.shape(a)) for a in arrays))

    @property
    def size(self) -> int:
        return sum(int(np.prod(shape, dtype=np.int64)) for shape in self.shapes)

    def flatten(self, arrays: Sequence[np.ndarray]) -> np.ndarray:
        """The arrays, in order, as one flat int64 vector."""
        if Layout.of(arrays) != self:
            raise ValueError(f"arrays of shapes {Layout.of(arrays).shapes}, expected {self.shapes}")
        if not arrays:
            return np.zeros(0, dtype=np.int64)
        return np.concatenate([to_ring(a).view(np.int64) for a in arrays])

    def split(self, flat: np.ndarray) -> tuple[np.ndarray, ...]:
        """A flat vector back as arrays of this layout's shapes."""
        if np.shape(flat) != (self.size,):
            raise ValueError(f"a vector of shape {np.shape(flat)}, expected ({self.size},)")
        parts, start = [], 0
        for shape in self.shapes:
            stop = start + int(np.prod(shape, dtype=np.int64))
            parts.append(np.asarray(flat[start:stop]).reshape(shape))
            start = stop
        return tuple(parts)
