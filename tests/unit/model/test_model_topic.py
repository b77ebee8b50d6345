"""Topic matching: RabbitMQ's edge cases, and the trie against a naive recursive twin."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from warren.model.binding import Destination, DestinationKind
from warren.model.topic import CACHE_ENTRIES_MAX, TopicTrie, split_words

Q1: Destination = (DestinationKind.QUEUE, "q1")
Q2: Destination = (DestinationKind.QUEUE, "q2")


def naive_match(pattern: list[str], words: list[str]) -> bool:
    """The specification, written as plainly as possible (exponential, but obviously right)."""
    if not pattern:
        return not words
    head, rest = pattern[0], pattern[1:]
    if head == "#":
        return naive_match(rest, words) or (bool(words) and naive_match(pattern, words[1:]))
    if not words:
        return False
    return (head == "*" or head == words[0]) and naive_match(rest, words[1:])


def matches(binding_key: str, routing_key: str) -> bool:
    trie = TopicTrie()
    trie.add(binding_key, Q1)
    return Q1 in trie.match(routing_key)


@pytest.mark.parametrize(
    ("key", "words"),
    [("", []), ("a", ["a"]), ("a.b", ["a", "b"]), ("a.", ["a", ""]), (".", ["", ""])],
)
def test_split_words_like_rabbitmq(key: str, words: list[str]) -> None:
    assert split_words(key) == words


@pytest.mark.parametrize(
    ("binding_key", "routing_key", "expected"),
    [
        ("a.b", "a.b", True),
        ("a.b", "a.c", False),
        ("*", "a", True),
        ("*", "", False),  # the empty key has no words
        ("*", ".", False),  # two empty words
        ("*.*", ".", True),
        ("#", "", True),
        ("#", "a.b.c", True),
        ("", "", True),
        ("", "a", False),
        ("a.#", "a", True),
        ("a.#", "a.b.c", True),
        ("#.a", "a", True),
        ("#.a", "b.a", True),
        ("a.#.b", "a.b", True),
        ("a.#.b", "a.x.y.b", True),
        ("a.#.b", "a.x.y", False),
        ("#.#", "", True),
        ("#.#", "a.b", True),
        ("a.*.#", "a", False),
        ("a.*.#", "a.b", True),
        ("*.#.*", "a", False),
        ("*.#.*", "a.b", True),
        ("a.", "a.", True),
        ("a.", "a", False),
        ("a..b", "a..b", True),
        ("a.*.b", "a..b", True),
        ("a", "*", False),  # a routing key's '*' is a literal word
        ("*", "#", True),
        ("#", "#", True),
    ],
)
def test_edge_cases(binding_key: str, routing_key: str, expected: bool) -> None:
    assert matches(binding_key, routing_key) is expected
    assert naive_match(split_words(binding_key), split_words(routing_key)) is expected


def test_many_hashes_against_a_long_key_stay_linear() -> None:
    trie = TopicTrie()
    trie.add(".".join(["#"] * 30) + ".z", Q1)
    assert trie.match(".".join(["a"] * 120)) == ()
    assert trie.match(".".join(["a"] * 120) + ".z") == (Q1,)


def test_removal_keeps_other_bindings_and_prunes() -> None:
    trie = TopicTrie()
    trie.add("a.*", Q1)
    trie.add("a.*", Q1)  # a second binding (other arguments) to the same destination
    trie.add("a.b", Q2)
    trie.remove("a.*", Q1)
    assert set(trie.match("a.b")) == {Q1, Q2}
    trie.remove("a.*", Q1)
    assert trie.match("a.b") == (Q2,)
    assert trie.match("a.c") == ()
    trie.remove("a.b", Q2)
    assert trie.match("a.b") == ()


def test_cache_is_cleared_by_changes() -> None:
    trie = TopicTrie()
    assert trie.match("a.b") == ()
    trie.add("a.#", Q1)
    assert trie.match("a.b") == (Q1,)
    trie.remove("a.#", Q1)
    assert trie.match("a.b") == ()


def test_full_cache_is_cleared_not_wrong() -> None:
    trie = TopicTrie()
    trie.add("k.*", Q1)
    for index in range(CACHE_ENTRIES_MAX + 10):
        assert trie.match(f"k.{index}") == (Q1,)
    assert trie.match("x") == ()


def test_match_all_unions_routing_keys() -> None:
    trie = TopicTrie()
    trie.add("a", Q1)
    trie.add("b", Q2)
    assert set(trie.match_all(["a", "b", "c"])) == {Q1, Q2}
    assert list(trie.match_all(["a"])) == [Q1]


WORDS = st.sampled_from(["a", "b", "", "*", "#"])
KEY_WORDS = st.sampled_from(["a", "b", "c", ""])
PATTERNS = st.lists(WORDS, max_size=6).map(".".join)
ROUTING_KEYS = st.lists(KEY_WORDS, max_size=7).map(".".join)


@settings(max_examples=500)
@given(binding_key=PATTERNS, routing_key=ROUTING_KEYS)
def test_trie_matches_like_the_naive_twin(binding_key: str, routing_key: str) -> None:
    expected = naive_match(split_words(binding_key), split_words(routing_key))
    assert matches(binding_key, routing_key) is expected


@settings(max_examples=200)
@given(
    bindings=st.lists(st.tuples(PATTERNS, st.integers(0, 4)), max_size=12),
    removals=st.lists(st.integers(0, 11), max_size=6),
    routing_keys=st.lists(ROUTING_KEYS, min_size=1, max_size=8),
)
def test_trie_with_many_bindings_and_removals(
    bindings: list[tuple[str, int]], removals: list[int], routing_keys: list[str]
) -> None:
    trie = TopicTrie()
    live = list(bindings)
    for key, queue in bindings:
        trie.add(key, (DestinationKind.QUEUE, f"q{queue}"))
    for index in removals:
        if index < len(live):
            key, queue = live.pop(index)
            trie.remove(key, (DestinationKind.QUEUE, f"q{queue}"))
    for routing_key in routing_keys:
        expected = {
            (DestinationKind.QUEUE, f"q{queue}")
            for key, queue in live
            if naive_match(split_words(key), split_words(routing_key))
        }
        found = trie.match(routing_key)
        assert set(found) == expected
        assert len(found) == len(set(found))
