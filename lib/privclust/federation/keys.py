"""A member's long-lived X25519 key and the secret it agrees with each other member.

Each member of a federation holds one private key; the coordinator relays the public keys (32
bytes each) and nothing else. Two members that hold each other's public key compute the same
shared secret (Diffie-Hellman on Curve25519, RFC 7748), which no one else, the coordinator
included, can compute. A coordinator that substituted a public key of its own could sit between
two members, so each member's owner compares the public keys' fingerprints out of band
(docs/threat-model.md).
"""

from __future__ import annotations

import hashlib

from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey

__all__ = ["PUBLIC_KEY_BYTES", "MemberKey", "fingerprint"]

PUBLIC_KEY_BYTES = 32


class MemberKey:
    """One member's X25519 private key (kept by the member, never sent anywhere)."""

    __slots__ = ("_private", "public")

    def __init__(self, private: X25519PrivateKey) -> None:
        self._private = private
        self.public: bytes = private.public_key().public_bytes_raw()

    @classmethod
    def generate(cls) -> MemberKey:
        """A new key from the operating system's entropy."""
        return cls(X25519PrivateKey.generate())

    @classmethod
    def from_private_bytes(cls, raw: bytes) -> MemberKey:
        """The key stored as its 32 raw bytes (by the member, in its own secret store)."""
        return cls(X25519PrivateKey.from_private_bytes(raw))

    def private_bytes(self) -> bytes:
        """The 32 raw bytes to store; they never leave the member."""
        return self._private.private_bytes_raw()

    def shared_secret(self, peer_public: bytes) -> bytes:
        """The 32-byte X25519 secret shared with the member whose public key is `peer_public`.

        Refuses its own public key (a member shares no mask with itself) and a low-order point
        (its secret would be all zeros, known to everyone)."""
        check_public_key(peer_public)
        if peer_public == self.public:
            raise ValueError("a member shares no secret with itself")
        try:
            return self._private.exchange(X25519PublicKey.from_public_bytes(peer_public))
        except ValueError as exc:
            raise ValueError(
                f"no secret can be agreed with key {fingerprint(peer_public)}"
            ) from exc


def check_public_key(public: bytes) -> None:
    if not isinstance(public, bytes) or len(public) != PUBLIC_KEY_BYTES:
        raise ValueError(f"an X25519 public key is {PUBLIC_KEY_BYTES} bytes")


def fingerprint(public: bytes) -> str:
    """What owners compare out of band: SHA-256 of the raw public key, its first 16 bytes in
    groups of four hex digits ("3f2a-91c0-...")."""
    check_public_key(public)
    digest = hashlib.sha256(b"privclust federation key\0" + public).hexdigest()[:32]
    return "-".join(digest[i : i + 4] for i in range(0, len(digest), 4))
