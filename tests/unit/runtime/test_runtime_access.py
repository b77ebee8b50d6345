"""Users' password hashes: the slow default, RabbitMQ's formats, and the fast path for a
password that verified before."""

from __future__ import annotations

import base64
import hashlib

import pytest

from warren.runtime import passwords
from warren.runtime.access import Access, User
from warren.runtime.passwords import MD5, PBKDF2_SHA256, SHA256, SHA512, hash_password, verify

# guest/guest as RabbitMQ 3.10.8 exported it (tests/integration/data)
RABBITMQ_GUEST = "vtFAkN0cCCgL+2nsmuqePxqL6sH7Re4AtEvOhJJ/2G5fTyC/"


def test_rabbitmq_hashes_are_base64_of_salt_and_digest_of_salt_and_password() -> None:
    raw = base64.b64decode(RABBITMQ_GUEST)
    assert raw[4:] == hashlib.sha256(raw[:4] + b"guest").digest()
    assert verify("guest", RABBITMQ_GUEST, SHA256)
    assert not verify("Guest", RABBITMQ_GUEST, SHA256)
    assert not verify("guest", "not base64!", SHA256)
    assert not verify("guest", "", SHA256)
    for algorithm in (SHA256, SHA512, MD5):
        hashed = hash_password("sécret", algorithm)
        assert verify("sécret", hashed, algorithm) and not verify("secret", hashed, algorithm)


def test_the_default_is_a_salted_pbkdf2_that_says_its_rounds() -> None:
    first, second = hash_password("x"), hash_password("x")
    assert first != second  # salted
    raw = base64.b64decode(first)
    assert int.from_bytes(raw[16:20], "big") == passwords.PBKDF2_ITERATIONS
    assert raw[20:] == hashlib.pbkdf2_hmac("sha256", b"x", raw[:16], passwords.PBKDF2_ITERATIONS)
    assert verify("x", first, PBKDF2_SHA256) and not verify("y", first, PBKDF2_SHA256)
    assert not verify("x", first, SHA256)  # the algorithm must match the hash
    with pytest.raises(ValueError, match="unknown hashing algorithm"):
        hash_password("x", "rot13")


def test_a_password_that_verified_once_is_known_until_the_hash_changes() -> None:
    access = Access.with_default("guest", "guest")
    assert access.users["guest"].hashing_algorithm == PBKDF2_SHA256
    assert access.authenticated("guest", "guest") is None  # not checked yet
    user = access.authenticate("guest", "guest")
    assert user is not None and user.tags == ("administrator",)
    assert access.authenticated("guest", "guest") is user
    assert access.authenticated("guest", "nope") is None
    access.users["guest"] = User("guest", hash_password("new", SHA256), (), SHA256)
    assert access.authenticated("guest", "guest") is None  # the old password is forgotten
    assert access.authenticate("guest", "guest") is None
    assert access.authenticate("guest", "new") is not None


def test_default_user_and_permissions() -> None:
    access = Access.with_default("guest", "guest", SHA256)
    assert access.permission("guest", "/") is not None
    assert access.authenticate("guest", "nope") is None
    access.users["nohash"] = User("nohash", "")
    assert not access.has_password("nohash") and access.authenticate("nohash", "") is None
    access.forget_user("guest")
    assert access.permission("guest", "/") is None
