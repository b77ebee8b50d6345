"""A binding's ``properties_key`` as RabbitMQ computes it, with Erlang's ``phash2``.

Theory of operation:
1. RabbitMQ names a binding in a URL by its routing key and, when it has arguments,
   ``~`` and ``base64url(<<(erlang:phash2(Args, 1 bsl 32)):32>>)`` of the Erlang term that
   holds them (rabbit_mgmt_format:pack_binding_props/2): a list, sorted by name, of
   ``{Name, Type, Value}`` tuples, a name a binary, the type an atom (``longstr``,
   ``long``, ``bool``, ``double``, ``array`` of ``{Type, Value}``, ``table``, ``void``) as
   the HTTP API types JSON values. Clients (rabbitmqadmin, the web UI) build these URLs
   from listed bindings, so the keys must be the same.
2. `phash2` is ERTS's portable term hash (``make_hash2`` in erts/emulator/beam/utils.c,
   stable across Erlang releases): Bob Jenkins' mix over 32-bit words, each kind of term
   with its own constant, lists and tuples walked depth first. Only the kinds a binding's
   arguments hold are covered: lists, tuples, binaries, atoms, integers, floats.
3. Warren keeps binding arguments as plain values, so an integer is typed ``long`` as
   the HTTP API types it (an AMQP client may have sent it as ``signedint``: that key
   then differs from RabbitMQ's).
"""

from __future__ import annotations

import base64
import struct
from collections.abc import Mapping
from typing import Final
from urllib.parse import quote_plus

MASK: Final = 0xFFFFFFFF
GOLDEN: Final = 0x9E3779B9  # HCONST: the golden ratio
# HCONST * n mod 2^32, one per kind of term (utils.c's HCONST_n)
NIL_CONST: Final = 0x3C6EF372
ATOM_CONST: Final = 0xDAA66D2B
TUPLE_CONST: Final = 0x8FF34781
NEGATIVE_BIG_CONST: Final = 0x2E2AC13A
POSITIVE_BIG_CONST: Final = 0xCC623AF3
FLOAT_CONST: Final = 0x6A99B4AC
BINARY_CONST: Final = 0x08D12E65
NIL_TAG: Final = 2  # NIL_DEF
EMPTY_LIST_HASH: Final = 3468870702  # [] hashed on its own
SMALL_BITS: Final = 27  # integers within ±2^27 hash as one word


class Atom(str):
    """An Erlang atom (a str that hashes as an atom, not as a binary)."""


Term = list["Term"] | tuple["Term", ...] | bytes | Atom | int | float


def _mix(a: int, b: int, c: int) -> tuple[int, int, int]:
    """Bob Jenkins' MIX of three 32-bit words."""
    a = (a - b - c) & MASK ^ (c >> 13)
    b = (b - c - a) & MASK ^ ((a << 8) & MASK)
    c = (c - a - b) & MASK ^ (b >> 13)
    a = (a - b - c) & MASK ^ (c >> 12)
    b = (b - c - a) & MASK ^ ((a << 16) & MASK)
    c = (c - a - b) & MASK ^ (b >> 5)
    a = (a - b - c) & MASK ^ (c >> 3)
    b = (b - c - a) & MASK ^ ((a << 10) & MASK)
    c = (c - a - b) & MASK ^ (b >> 15)
    return a, b, c


def _words(hash_value: int, first: int, second: int, constant: int) -> int:
    """UINT32_HASH_2: two 32-bit words mixed into the hash."""
    return _mix((constant + first) & MASK, (constant + second) & MASK, hash_value)[2]


def _block_hash(data: bytes, initial: int) -> int:
    """Jenkins' lookup2 over the bytes, 12 at a time, the length mixed into the last block."""
    a = b = GOLDEN
    c = initial
    whole = len(data) - len(data) % 12
    for at in range(0, whole, 12):
        a = (a + int.from_bytes(data[at : at + 4], "little")) & MASK
        b = (b + int.from_bytes(data[at + 4 : at + 8], "little")) & MASK
        c = (c + int.from_bytes(data[at + 8 : at + 12], "little")) & MASK
        a, b, c = _mix(a, b, c)
    tail = data[whole:] + bytes(12 - len(data) + whole)
    a = (a + int.from_bytes(tail[0:4], "little")) & MASK
    b = (b + int.from_bytes(tail[4:8], "little")) & MASK
    # the first byte of c is the length's
    c = (c + len(data) + (int.from_bytes(tail[8:11], "little") << 8)) & MASK
    return _mix(a, b, c)[2]


def _atom_value(name: str) -> int:
    """The atom table's hash of a name: hashpjw over its bytes."""
    value = 0
    for byte in name.encode("latin-1"):
        value = ((value << 4) + byte) & MASK
        high = value & 0xF0000000
        if high:
            value ^= high >> 24
            value ^= high
    return value


def _leaf(term: Term, hash_value: int) -> int:
    """The hash after a term that holds no other terms."""
    if isinstance(term, Atom):
        if hash_value == 0:
            return _atom_value(term)
        return _words(hash_value, _atom_value(term), 0, ATOM_CONST)
    if isinstance(term, bytes):
        constant = (BINARY_CONST + hash_value) & MASK
        return _block_hash(term, constant) if term else constant
    if isinstance(term, float):
        bits = struct.unpack("<Q", struct.pack("<d", term or 0.0))[0]
        return _words(hash_value, bits >> 32, bits & MASK, FLOAT_CONST)
    if isinstance(term, int):
        if -(1 << SMALL_BITS) <= term < (1 << SMALL_BITS):
            if term < 0:
                hash_value = _words(hash_value, -term, 0, GOLDEN)
            return _words(hash_value, term & MASK, 0, GOLDEN)
        constant = NEGATIVE_BIG_CONST if term < 0 else POSITIVE_BIG_CONST
        return _words(hash_value, abs(term) & MASK, abs(term) >> 32, constant)
    raise TypeError(f"phash2 of {term!r} is not implemented")


def phash2(term: Term) -> int:
    """erlang:phash2(Term, 1 bsl 32) for the kinds of terms in rule 2."""
    pending: list[Term] = [term]
    hash_value = 0
    while pending:
        current = pending.pop()
        while True:
            if isinstance(current, list):
                if not current:
                    hash_value = (
                        EMPTY_LIST_HASH
                        if hash_value == 0
                        else _words(hash_value, NIL_TAG, 0, NIL_CONST)
                    )
                    break
                pending.append(current[1:])
                current = current[0]
            elif isinstance(current, tuple):
                hash_value = _words(hash_value, len(current), 0, TUPLE_CONST)
                if not current:
                    break
                pending.extend(reversed(current[1:]))
                current = current[0]
            else:
                hash_value = _leaf(current, hash_value)
                break
    return hash_value


def _typed(value: object) -> tuple[Atom, Term]:
    """A JSON-like value as the HTTP API types it (rabbit_mgmt_format:to_amqp_table)."""
    if isinstance(value, bool):
        return Atom("bool"), Atom("true" if value else "false")
    if isinstance(value, int):
        return Atom("long"), value
    if isinstance(value, float):
        return Atom("double"), value
    if isinstance(value, str):
        return Atom("longstr"), value.encode()
    if isinstance(value, bytes | bytearray):
        return Atom("longstr"), bytes(value)
    if isinstance(value, Mapping):
        return Atom("table"), arguments_term(value)
    if isinstance(value, list | tuple):
        return Atom("array"), [_typed(item) for item in value]
    return Atom("void"), Atom("undefined")


def arguments_term(arguments: Mapping[str, object]) -> list[Term]:
    """The Erlang term RabbitMQ keeps the arguments in (rule 1)."""
    names = sorted(arguments, key=lambda name: name.encode())
    return [(name.encode(), *_typed(arguments[name])) for name in names]


def quote_binding(text: str) -> str:
    """rabbit_mgmt_format:quote_binding/1: quote_plus, and ``~`` escaped too."""
    return quote_plus(text, safe="").replace("~", "%7E")


def properties_key(routing_key: str, arguments: Mapping[str, object]) -> str:
    """rabbit_mgmt_format:pack_binding_props/2."""
    if not arguments:
        return quote_binding(routing_key) if routing_key else "~"
    digest = phash2(arguments_term(arguments)).to_bytes(4, "big")
    encoded = base64.urlsafe_b64encode(digest).decode("ascii").rstrip("=")
    return quote_binding(routing_key) + "~" + quote_binding(encoded)
