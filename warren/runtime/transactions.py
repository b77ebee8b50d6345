"""Transactions of one channel (AMQP 0-9-1 class tx) and the replies that wait behind a
``tx.commit-ok``.

Theory of operation:
1. A transactional channel buffers its publishes and settlements in a `Transaction` until
   ``tx.commit``, which carries them out in the order the client sent them; a rollback
   drops the publishes and gives the settled entries back as unacknowledged.
2. A commit that wrote to the message log (persistent messages in durable queues, or
   their acks) answers ``tx.commit-ok`` only once the log is durable that far. Until then
   `CommitWait` holds the commit-ok and every reply the channel sends after it, so the
   replies keep the order of the methods; it waits as a `Waiter` of the node's
   durability and writes them, in order, as syncs make them durable.
3. This module writes nothing itself: the channel gives `CommitWait` the function that
   writes a reply, so the rules are tested without a connection.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Any

from warren.amqp import methods as m
from warren.amqp.connection import Content
from warren.runtime.queues.host import DurableStore

Reply = m.Method | bytes  # a method, or a reply's frames already encoded (basic.get-ok)


class Transaction:
    """What a transactional channel did since its last commit or rollback."""

    __slots__ = ("publishes", "settlements")

    def __init__(self) -> None:
        self.publishes: list[Content] = []
        # (command class, taken unacked entries) in the order the client sent them
        self.settlements: list[tuple[type, list[tuple[int, Any]]]] = []

    def taken(self) -> dict[int, Any]:
        """The unacked entries its settlements took, by delivery tag (a rollback gives
        them back)."""
        return {tag: entry for _command, taken in self.settlements for tag, entry in taken}


class CommitWait:
    """A ``tx.commit-ok`` that waits for the log, and the replies behind it."""

    __slots__ = ("_durability", "_log_wanted", "_replies", "_write")

    def __init__(self, durability: DurableStore, write: Callable[[Reply], None]) -> None:
        self._durability = durability
        self._write = write
        # (log sequence it waits for, 0 for a reply that waits only for those before it)
        self._replies: deque[tuple[int, Reply]] = deque()
        self._log_wanted = 0

    @property
    def waiting(self) -> bool:
        """Replies are held: the channel's next reply goes behind them."""
        return bool(self._replies)

    def commit_ok(self, log_sequence: int) -> None:
        """Answer ``tx.commit-ok`` once the log is durable up to `log_sequence`."""
        self._replies.append((log_sequence, m.TxCommitOk()))
        self._log_wanted = log_sequence
        self._durability.wait(self)

    def behind(self, reply: Reply) -> None:
        """A reply the channel sends while something is held: after it, in order."""
        self._replies.append((0, reply))

    def durable_reached(self, durable_sequence: int) -> bool:
        """Write what the log being durable up to `durable_sequence` releases (`Waiter`).
        True while a commit-ok still waits for more."""
        replies = self._replies
        while replies and replies[0][0] <= durable_sequence:
            self._write(replies.popleft()[1])
        return self._log_wanted > durable_sequence

    def close(self) -> None:
        """The channel is gone: drop what is held."""
        self._replies.clear()
        self._durability.forget(self)
