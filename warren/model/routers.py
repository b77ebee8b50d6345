"""Per-exchange-type routing indexes: which destinations a message reaches from one exchange.

Theory of operation:
1. Each exchange owns one router, chosen by its type. The exchange tells the router about
   every binding it gains or loses (never a duplicate, never an unknown one); the router
   keeps whatever index makes `match` cheap and answers with destinations, not bindings.
2. Direct: a dict from routing key to destination counts, so a publish costs one lookup per
   routing key. Fanout: one dict of destination counts, returned as is. Topic: the trie of
   `warren.model.topic`. Headers: the compiled patterns, tried one by one (routing key
   ignored).
3. Counts exist because several bindings (differing only in arguments) can give the same
   destination; the destination stays until the last of them goes.
4. `match` may return the router's own dict view; callers iterate it and never keep it.
   It only looks: it never changes the router.

Source: rabbit_exchange_type_{direct,fanout,topic,headers}.erl, rabbit_router.erl.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Protocol

from warren.model.binding import Binding, Destination
from warren.model.headers import HeadersPattern
from warren.model.topic import TopicTrie

_NO_HEADERS: Mapping[str, object] = {}
_NOWHERE: tuple[Destination, ...] = ()
_NOWHERE_COUNTS: Mapping[Destination, int] = {}


class Router(Protocol):
    def add(self, binding: Binding) -> None: ...

    def remove(self, binding: Binding) -> None: ...

    def match(
        self, routing_keys: Sequence[str], headers: Mapping[str, object] | None
    ) -> Iterable[Destination]: ...


def _count_up(counts: dict[Destination, int], destination: Destination) -> None:
    counts[destination] = counts.get(destination, 0) + 1


def _count_down(counts: dict[Destination, int], destination: Destination) -> None:
    remaining = counts[destination] - 1
    if remaining:
        counts[destination] = remaining
    else:
        del counts[destination]


class DirectRouter:
    __slots__ = ("_by_key",)

    def __init__(self) -> None:
        self._by_key: dict[str, dict[Destination, int]] = {}

    def add(self, binding: Binding) -> None:
        _count_up(self._by_key.setdefault(binding.routing_key, {}), binding.target)

    def remove(self, binding: Binding) -> None:
        counts = self._by_key[binding.routing_key]
        _count_down(counts, binding.target)
        if not counts:
            del self._by_key[binding.routing_key]

    def match(
        self, routing_keys: Sequence[str], headers: Mapping[str, object] | None
    ) -> Iterable[Destination]:
        if len(routing_keys) == 1:
            return self._by_key.get(routing_keys[0], _NOWHERE)
        found: dict[Destination, int] = {}
        for key in routing_keys:
            found.update(self._by_key.get(key, _NOWHERE_COUNTS))
        return found


class FanoutRouter:
    __slots__ = ("_all",)

    def __init__(self) -> None:
        self._all: dict[Destination, int] = {}

    def add(self, binding: Binding) -> None:
        _count_up(self._all, binding.target)

    def remove(self, binding: Binding) -> None:
        _count_down(self._all, binding.target)

    def match(
        self, routing_keys: Sequence[str], headers: Mapping[str, object] | None
    ) -> Iterable[Destination]:
        return self._all


class TopicRouter:
    __slots__ = ("_trie",)

    def __init__(self) -> None:
        self._trie = TopicTrie()

    def add(self, binding: Binding) -> None:
        self._trie.add(binding.routing_key, binding.target)

    def remove(self, binding: Binding) -> None:
        self._trie.remove(binding.routing_key, binding.target)

    def match(
        self, routing_keys: Sequence[str], headers: Mapping[str, object] | None
    ) -> Iterable[Destination]:
        return self._trie.match_all(routing_keys)


class HeadersRouter:
    __slots__ = ("_patterns",)

    def __init__(self) -> None:
        self._patterns: list[tuple[Binding, HeadersPattern]] = []

    def add(self, binding: Binding) -> None:
        self._patterns.append((binding, HeadersPattern(binding.arguments)))

    def remove(self, binding: Binding) -> None:
        for index, (known, _) in enumerate(self._patterns):
            if known == binding:
                del self._patterns[index]
                return

    def match(
        self, routing_keys: Sequence[str], headers: Mapping[str, object] | None
    ) -> Iterable[Destination]:
        table = _NO_HEADERS if headers is None else headers
        return [binding.target for binding, pattern in self._patterns if pattern.matches(table)]
