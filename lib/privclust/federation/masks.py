"""Pairwise masks that cancel in the sum: one keystream per pair of members and per release.

For every release of a federated job (a pass of a job, and one release in it), each pair of
members {a, b} expands its X25519 secret into a ChaCha20 keystream of one 64-bit word per value
of the release: the stream's key is HKDF-SHA256 of the secret, bound to both public keys and to
the release's `MaskScope` (federation, job, pass, release), so no two releases, jobs or
federations ever share a stream. The member whose public key sorts first adds the stream, the
other subtracts it, modulo 2^64. Over all members, each pair's stream is added once and
subtracted once: the masks sum to zero and the coordinator's sum is the exact sum of what the
members masked.

What one masked vector hides: for a member with at least one honest peer, its mask contains a
stream that the coordinator cannot compute, uniform over the ring (ChaCha20 is a PRF), so the
masked vector is uniform whatever the member's values are. Any set of parties that does not
hold every secret of an honest member sees the honest members' vectors only through their sum
(the argument of Bonawitz et al., CCS 2017, without dropouts: a member that fails fails the job).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from privclust.federation.keys import MemberKey, check_public_key
from privclust.federation.ring import ring_negate, word_dtype

__all__ = ["MaskScope", "member_mask", "pair_stream"]

_LABEL = b"privclust federation mask v1"
# A stream of 32-bit words has a key of its own (this label added): a release masks in one ring.
_LABEL_32 = b" ring 2^32"
# ChaCha20's 32-bit block counter: 2^32 blocks of 64 bytes, i.e. 2^35 words per stream.
MAX_WORDS = 1 << 35


def _field(value: bytes) -> bytes:
    return len(value).to_bytes(4, "big") + value


@dataclass(frozen=True)
class MaskScope:
    """The one release a stream masks: the federation, the job, the pass and the release in it
    (all public). Each field goes into the key derivation, length-prefixed, so two scopes never
    give the same stream."""

    federation: str
    job: str
    pass_index: int
    release: int

    def __post_init__(self) -> None:
        if self.pass_index < 0 or self.release < 0:
            raise ValueError("a pass and a release are numbered from 0")

    def info(self) -> bytes:
        return b"".join(
            _field(part)
            for part in (
                self.federation.encode(),
                self.job.encode(),
                self.pass_index.to_bytes(8, "big"),
                self.release.to_bytes(8, "big"),
            )
        )


def pair_stream(
    secret: bytes, publics: tuple[bytes, bytes], scope: MaskScope, words: int, bits: int = 64
) -> np.ndarray:
    """The pair's keystream for `scope`: `words` uniform words of `bits` bits (uint64 or
    uint32; both members of the pair compute the same one; `publics` in either order)."""
    dtype = word_dtype(bits)
    if not 0 <= words <= MAX_WORDS:
        raise ValueError(f"a stream holds at most {MAX_WORDS} words")
    low, high = sorted(publics)
    label = _LABEL if bits == 64 else _LABEL + _LABEL_32
    key = HKDF(
        algorithm=hashes.SHA256(),
        length=32,
        salt=None,
        info=label + _field(low) + _field(high) + scope.info(),
    ).derive(secret)
    # The key is used for this one stream only, so the nonce can be fixed (counter starts at 0).
    encryptor = Cipher(algorithms.ChaCha20(key, bytes(16)), mode=None).encryptor()
    stream = encryptor.update(bytes(words * dtype.itemsize))
    return np.frombuffer(stream, dtype=dtype.newbyteorder("<")).astype(dtype)


def member_mask(
    key: MemberKey, members: Sequence[bytes], scope: MaskScope, words: int, bits: int = 64
) -> np.ndarray:
    """This member's mask for `scope`: the sum of its pair streams (modulo 2^bits), each with
    the sign its place in the pair gives. `members` is every member's public key, this one's
    included."""
    publics = list(members)
    for public in publics:
        check_public_key(public)
    if len(set(publics)) != len(publics):
        raise ValueError("two members have the same public key")
    if key.public not in publics:
        raise ValueError("the member's own public key is not among the members'")
    mask = np.zeros(words, dtype=word_dtype(bits))
    for peer in publics:
        if peer == key.public:
            continue
        stream = pair_stream(key.shared_secret(peer), (key.public, peer), scope, words, bits)
        np.add(mask, stream if key.public < peer else ring_negate(stream), out=mask)
    return mask
