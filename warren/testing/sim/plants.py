"""Bugs planted in the real classes, to show the stack simulator finds them.

Theory of operation: each plant is a context manager that patches one production class
in the simulator's process for the length of a run (never a flag in production code),
the way a plausible mistake would change it:
- ``confirm-before-commit``: a queue's leader resolves a proposal as soon as the entry is
  in its own log, before a majority has it (the confirm goes out; a crash loses the
  message).
- ``retry-applied-twice``: the queue machine forgets what each sender's numbered
  commands did (`Sequenced` dedup off), so a command sent again after a leader change
  that had committed after all is applied twice (a message enqueued twice).
- ``dead-letter-dropped-on-leader-change``: a new leader does not send again the
  dead-lettered messages the queue still holds (at-least-once dead-lettering loses what
  the old leader had not delivered to the target).
- ``settle-dropped-on-timeout``: a settle (ack, reject) whose submit fails (no leader
  within ``cluster_submit_timeout``) is not sent again, so the message stays checked out
  to a consumer that acked it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from warren.cluster import queue_entries
from warren.cluster.nodes import METADATA_GROUP
from warren.queue import machine
from warren.runtime.cluster.quorum import QuorumHost
from warren.runtime.cluster.raft_host import RaftGroup
from warren.runtime.queues.deadletter import DeadLetterWorker


@contextmanager
def patched(owner: type, name: str, replacement: Callable[..., Any]) -> Iterator[None]:
    """`owner.name` replaced for the length of the block (the stack's checkers observe
    through it too)."""
    original = owner.__dict__[name]
    setattr(owner, name, replacement)
    try:
        yield
    finally:
        setattr(owner, name, original)


@contextmanager
def confirm_before_commit() -> Iterator[None]:
    original = RaftGroup._propose

    def propose(self: RaftGroup, data: bytes, future: asyncio.Future[object]) -> None:
        original(self, data, future)
        if self.group_id == METADATA_GROUP:
            return  # a queue's confirm is the bug; the metadata group keeps working
        for index, (_term, waiting) in list(self._proposals.items()):
            if waiting is future and not future.done():
                del self._proposals[index]
                # a batch's reply: every command of it accepted (`QuorumHost.apply_entry`)
                future.set_result([True] * len(queue_entries.decode(data)))

    with patched(RaftGroup, "_propose", propose):
        yield


@contextmanager
def retry_applied_twice() -> Iterator[None]:
    with patched(machine._Sender, "applied", lambda self, seq: False):
        yield


@contextmanager
def dead_letter_dropped_on_leader_change() -> Iterator[None]:
    original_role_changed = QuorumHost.role_changed
    original_send = DeadLetterWorker.send
    electing: list[bool] = []

    def role_changed(self: QuorumHost, leader: bool, leader_node: str | None) -> None:
        electing.append(True)
        try:
            original_role_changed(self, leader, leader_node)
        finally:
            electing.pop()

    def send(self: DeadLetterWorker, dead: machine.DeadLetter) -> None:
        if not electing:
            original_send(self, dead)

    with (
        patched(QuorumHost, "role_changed", role_changed),
        patched(DeadLetterWorker, "send", send),
    ):
        yield


@contextmanager
def settle_dropped_on_timeout() -> Iterator[None]:
    original = QuorumHost._sent_once

    def sent_once(self: QuorumHost, seq: int, command: Any, future: asyncio.Future[object]) -> None:
        if future.cancelled() or future.exception() is None:
            original(self, seq, command, future)

    with patched(QuorumHost, "_sent_once", sent_once):
        yield


PLANTS: dict[str, Callable[[], Any]] = {
    "confirm-before-commit": confirm_before_commit,
    "retry-applied-twice": retry_applied_twice,
    "dead-letter-dropped-on-leader-change": dead_letter_dropped_on_leader_change,
    "settle-dropped-on-timeout": settle_dropped_on_timeout,
}
