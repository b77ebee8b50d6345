"""Password hashes: RabbitMQ's formats, and a slow one that Warren uses by default.

Theory of operation:
1. A stored hash says its algorithm by name, as RabbitMQ's definitions do
   (``hashing_algorithm``). RabbitMQ's are one salted digest: base64 of a 4-byte salt and
   the digest of salt ++ password (``rabbit_password_hashing_sha256``, ``_sha512``,
   ``_md5``). They are accepted, so users imported from RabbitMQ log in, but they are
   fast to guess by brute force.
2. ``warren_password_hashing_pbkdf2_sha256`` is PBKDF2-HMAC-SHA256 with a 16-byte salt and
   `PBKDF2_ITERATIONS` rounds: base64 of salt ++ rounds (4 bytes, big-endian) ++ the
   32-byte key, so the rounds can grow later without breaking stored hashes. New
   passwords are hashed with the node's `password_hashing_module` (this one unless
   configured otherwise; set ``rabbit_password_hashing_sha256`` for definitions a
   RabbitMQ must import).
3. A slow hash must not stall the event loop: `Verifier` remembers, per user, a keyed
   digest (HMAC under a per-process random key) of the last password that verified
   against the user's current hash, so a repeated login costs a microsecond; anything else
   is checked by `verify` on a worker thread by the caller. Changing the hash forgets it.
   Comparisons are constant-time.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
import struct
from typing import Final

SHA256: Final = "rabbit_password_hashing_sha256"
SHA512: Final = "rabbit_password_hashing_sha512"
MD5: Final = "rabbit_password_hashing_md5"
PBKDF2_SHA256: Final = "warren_password_hashing_pbkdf2_sha256"
DEFAULT_ALGORITHM: Final = PBKDF2_SHA256
PBKDF2_ITERATIONS: Final = 100_000
_RABBIT_DIGESTS: Final = {SHA256: "sha256", SHA512: "sha512", MD5: "md5"}
_RABBIT_SALT_BYTES: Final = 4
_PBKDF2_SALT_BYTES: Final = 16
_ROUNDS: Final = struct.Struct(">I")
ALGORITHMS: Final = (PBKDF2_SHA256, SHA256, SHA512, MD5)


def hash_password(password: str, algorithm: str = DEFAULT_ALGORITHM) -> str:
    """A new salted hash of `password` (ValueError for an unknown algorithm)."""
    secret = password.encode("utf-8")
    if algorithm == PBKDF2_SHA256:
        salt = secrets.token_bytes(_PBKDF2_SALT_BYTES)
        return _pbkdf2(secret, salt, PBKDF2_ITERATIONS)
    digest = _RABBIT_DIGESTS.get(algorithm)
    if digest is None:
        raise ValueError(f"unknown hashing algorithm {algorithm!r}")
    return _rabbit(secret, secrets.token_bytes(_RABBIT_SALT_BYTES), digest)


def verify(password: str, password_hash: str, algorithm: str) -> bool:
    """Whether `password` matches the stored hash (False for anything malformed)."""
    try:
        raw = base64.b64decode(password_hash, validate=True)
    except ValueError:
        return False
    secret = password.encode("utf-8")
    if algorithm == PBKDF2_SHA256:
        head = _PBKDF2_SALT_BYTES + _ROUNDS.size
        if len(raw) != head + hashlib.sha256().digest_size:
            return False
        (rounds,) = _ROUNDS.unpack_from(raw, _PBKDF2_SALT_BYTES)
        expected = _pbkdf2(secret, raw[:_PBKDF2_SALT_BYTES], rounds)
    else:
        digest = _RABBIT_DIGESTS.get(algorithm)
        if digest is None or len(raw) != _RABBIT_SALT_BYTES + hashlib.new(digest).digest_size:
            return False
        expected = _rabbit(secret, raw[:_RABBIT_SALT_BYTES], digest)
    return hmac.compare_digest(expected, password_hash)


def _rabbit(secret: bytes, salt: bytes, digest: str) -> str:
    return base64.b64encode(salt + hashlib.new(digest, salt + secret).digest()).decode("ascii")


def _pbkdf2(secret: bytes, salt: bytes, rounds: int) -> str:
    key = hashlib.pbkdf2_hmac("sha256", secret, salt, rounds)
    return base64.b64encode(salt + _ROUNDS.pack(rounds) + key).decode("ascii")


class Verifier:
    """The fast path of rule 3: passwords that verified before, by keyed digest."""

    __slots__ = ("_key", "_known")

    def __init__(self) -> None:
        self._key = secrets.token_bytes(32)
        self._known: dict[str, tuple[str, bytes]] = {}  # user -> (its hash, keyed digest)

    def _digest(self, name: str, password: str) -> bytes:
        return hmac.new(self._key, f"{name}\0{password}".encode(), "sha256").digest()

    def known(self, name: str, password: str, password_hash: str) -> bool:
        """Whether this password verified against this very hash before."""
        entry = self._known.get(name)
        return (
            entry is not None
            and entry[0] == password_hash
            and hmac.compare_digest(entry[1], self._digest(name, password))
        )

    def remember(self, name: str, password: str, password_hash: str) -> None:
        self._known[name] = (password_hash, self._digest(name, password))
