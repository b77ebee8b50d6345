"""Topic matching: binding keys with ``*`` and ``#`` against routing keys.

Theory of operation:
1. Keys are split into words on ``.``. The empty key has no words at all (not one empty
   word), so binding key ``""`` matches only routing key ``""``, and ``#`` matches ``""``;
   ``"a."`` is the two words ``a`` and ``""``. In a binding key ``*`` matches exactly one
   word (an empty one too) and ``#`` zero or more; every other word matches itself.
2. Binding keys live in a trie, one edge per word, with per-node destination counts (several
   bindings may lead to one destination through one node: they differ in arguments).
   Nodes reached through a ``#`` edge are flagged, since they may also consume any word.
3. Matching runs the trie as an NFA: the state is the set of nodes reachable after the words
   so far, closed over ``#`` edges (``#`` may match nothing). Cost is words times live nodes,
   with no backtracking, so ``#.#.#`` against a long key stays linear.
4. Results per routing key are cached (`CACHE_ENTRIES_MAX` keys); any change of bindings
   clears the cache, and a full cache is cleared rather than evicted piecemeal, which keeps
   the behaviour independent of hashing and timing.
5. Order of results is the order of discovery, which is deterministic; callers sort.

Source: rabbit_exchange_type_topic.erl (split_topic_key/1, trie_match/4), RabbitMQ's
"Topic Exchange" tutorial and AMQP 0-9-1 section 3.1.3.3.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence

from warren.model.binding import Destination

CACHE_ENTRIES_MAX = 1024


def split_words(key: str) -> list[str]:
    """Words of a topic key, as RabbitMQ splits them: ``""`` has none."""
    return key.split(".") if key else []


class _Node:
    __slots__ = ("children", "destinations", "is_hash")

    def __init__(self, is_hash: bool) -> None:
        self.children: dict[str, _Node] = {}
        self.destinations: dict[Destination, int] = {}
        self.is_hash = is_hash

    def is_empty(self) -> bool:
        return not self.children and not self.destinations


class TopicTrie:
    """Binding keys of one topic exchange, matched against routing keys."""

    __slots__ = ("_cache", "_root")

    def __init__(self) -> None:
        self._root = _Node(is_hash=False)
        self._cache: dict[str, tuple[Destination, ...]] = {}

    def add(self, binding_key: str, destination: Destination) -> None:
        node = self._root
        for word in split_words(binding_key):
            child = node.children.get(word)
            if child is None:
                child = node.children[word] = _Node(is_hash=word == "#")
            node = child
        node.destinations[destination] = node.destinations.get(destination, 0) + 1
        self._cache.clear()

    def remove(self, binding_key: str, destination: Destination) -> None:
        """Forget one binding; the caller guarantees it was added."""
        path = [self._root]
        words = split_words(binding_key)
        for word in words:
            path.append(path[-1].children[word])
        node = path[-1]
        count = node.destinations[destination] - 1
        if count:
            node.destinations[destination] = count
        else:
            del node.destinations[destination]
        self._prune(path, words)
        self._cache.clear()

    @staticmethod
    def _prune(path: list[_Node], words: list[str]) -> None:
        for depth in range(len(words), 0, -1):
            if not path[depth].is_empty():
                return
            del path[depth - 1].children[words[depth - 1]]

    def match(self, routing_key: str) -> tuple[Destination, ...]:
        cached = self._cache.get(routing_key)
        if cached is not None:
            return cached
        found = tuple(self._match(split_words(routing_key)))
        if len(self._cache) >= CACHE_ENTRIES_MAX:
            self._cache.clear()
        self._cache[routing_key] = found
        return found

    def match_all(self, routing_keys: Sequence[str]) -> Iterable[Destination]:
        if len(routing_keys) == 1:
            return self.match(routing_keys[0])
        found: dict[Destination, None] = {}
        for key in routing_keys:
            found.update(dict.fromkeys(self.match(key)))
        return found

    def _match(self, words: list[str]) -> Iterator[Destination]:
        states: dict[_Node, None] = {}
        _close(self._root, states)
        for word in words:
            states = _step(states, word)
            if not states:
                return iter(())
        found: dict[Destination, None] = {}
        for node in states:
            found.update(dict.fromkeys(node.destinations))
        return iter(found)


def _close(node: _Node, states: dict[_Node, None]) -> None:
    """Add `node` and every node reachable from it through ``#`` edges alone."""
    while node not in states:
        states[node] = None
        hash_child = node.children.get("#")
        if hash_child is None:
            return
        node = hash_child


def _step(states: dict[_Node, None], word: str) -> dict[_Node, None]:
    following: dict[_Node, None] = {}
    for node in states:
        if node.is_hash:
            _close(node, following)
        for edge in (word, "*"):
            child = node.children.get(edge)
            if child is not None:
                _close(child, following)
    return following
