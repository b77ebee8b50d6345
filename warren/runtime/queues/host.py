"""The one interface between channels and queues: `QueueHost` and its typed outcomes.

Theory of operation:
1. A channel (or the management API, or dead-lettering) never knows which kind of host it
   talks to. Every host, classic (`warren.runtime.queues.classic`), quorum and remote
   (`warren.runtime.cluster`), implements `QueueHost`; the node's `Broker` keeps them by
   (vhost, name) and gets new ones from a `HostFactory` (the cluster layer provides one
   that makes quorum hosts).
2. What needs an answer returns an `Outcome`: `Accepted` (done now, with its value),
   `Refused` (with the AMQP error, or none for a publish the queue rejected: a nack), or
   `Pending` (a future: a quorum queue's commit, a classic queue's home on another
   node); what a queue never refuses is an `Answer` (accepted or pending). A caller tells
   them apart by type, never by looking for a future.
   A publish made for a `Publisher` (a channel, which confirms it) may also answer
   `REPLICATING`: a quorum queue took it and tells the publisher once it is committed,
   for a whole batch of its publishes at a time, with no future per publish.
3. What a host needs of the node is `Node` (the broker) and `DurableStore` (the node's
   durability): protocols here, so that this package imports neither, and the runtime
   has no import cycle through the queues.
"""

from __future__ import annotations

import asyncio
import enum
from collections.abc import Hashable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final, Generic, Protocol, TypeVar

from warren.errors import AmqpError
from warren.model import QueueRecord, VHost
from warren.model.policy import Policy
from warren.model.settings import QueueSettings
from warren.queue import (
    Checkout,
    Discard,
    Enqueue,
    Entry,
    Got,
    QueueMachine,
    Return,
    Settle,
    SettleDeadLetter,
)
from warren.runtime.stats import MessageStats

if TYPE_CHECKING:
    from warren.runtime.config import Config
    from warren.storage.journal import QueueJournal
    from warren.storage.log import Log
    from warren.storage.pages import PageStore

T = TypeVar("T")


# --- outcomes --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Accepted(Generic[T]):
    """Done now."""

    value: T


@dataclass(frozen=True, slots=True)
class Refused:
    """The queue said no: `error` closes the channel; None is a publish the queue rejected
    (overflow reject-publish, or a queue gone): the publisher gets a nack."""

    error: AmqpError | None = None


@dataclass(frozen=True, slots=True)
class Pending(Generic[T]):
    """Done once `future` is: its result is the value, its exception the refusal."""

    future: asyncio.Future[T]


@dataclass(frozen=True, slots=True)
class Replicating:
    """A publish a quorum queue took: it tells its `Publisher` once it is committed."""


Outcome = Accepted[T] | Refused | Pending[T]
Answer = Accepted[T] | Pending[T]  # what a queue never refuses (basic.get, purge, counts)
# a publish: taken now, refused (nack), taken once the future says True, or once the
# queue tells the publisher
Published = Accepted[None] | Refused | Pending[bool] | Replicating
ACCEPTED: Final[Accepted[None]] = Accepted(None)
REJECTED_PUBLISH: Final = Refused()
REPLICATING: Final = Replicating()


class Publisher(Protocol):
    """What a quorum queue tells the channel that published to it (`QueueHost.publish`)."""

    def replicated(self, host: QueueHost, upto: int, count: int, refused: list[int] | None) -> None:
        """`count` publishes to `host`, every one of them up to tag `upto` still owed, are
        done: committed, or refused (their tags in `refused`: nacked). A host answers in
        the order it took them."""


class Placement(enum.Enum):
    """Where a queue's machine runs, as seen from this node."""

    LOCAL = "local"  # a classic queue of this node
    REMOTE = "remote"  # a classic queue whose home is another node
    REPLICATED = "replicated"  # a quorum queue in a cluster, through Raft


# --- what a host needs --------------------------------------------------------------------


class Subscriber(Protocol):
    """What a queue host needs of a channel that consumes from it."""

    def credit(self) -> int | None:
        """Ack-requiring deliveries this channel can take across all queues; None: no limit."""

    @property
    def global_prefetch(self) -> int:
        """The channel-wide prefetch that `credit` counts down from (0: none)."""

    def blocked(self) -> bool:
        """Whether the channel can take no delivery at all now (its socket is full)."""

    def deliver(self, consumer_tag: str, entry: Entry, host: QueueHost) -> None: ...

    def queue_deleted(self, consumer_tag: str) -> None: ...


class ConsumerRef:
    __slots__ = ("channel", "no_ack", "tag")

    def __init__(self, channel: Subscriber, tag: str, no_ack: bool = False) -> None:
        self.channel = channel
        self.tag = tag
        self.no_ack = no_ack


class Waiter(Protocol):
    """Something that holds replies until the log is durable up to some sequence."""

    def durable_reached(self, durable_sequence: int) -> bool:
        """Release what the durable sequence allows; True while it still waits for more."""


class DurableStore(Protocol):
    """What hosts need of the node's durability (`warren.runtime.durability.Durability`)."""

    @property
    def log(self) -> Log: ...

    @property
    def journal(self) -> QueueJournal: ...

    @property
    def pages(self) -> PageStore: ...

    def wait(self, waiter: Waiter) -> None: ...

    def forget(self, waiter: Waiter) -> None: ...

    def enqueued(self, host: QueueHost, msg_id: int, command: Enqueue, now_ms: int) -> None: ...

    def delivered(self, key: str, msg_ids: Iterable[int]) -> None: ...

    def settled(self, key: str, msg_ids: Iterable[int]) -> None: ...

    def purged(self, key: str, kept_msg_ids: list[int]) -> None: ...

    def write_deferred(self) -> None: ...


class Node(Protocol):
    """What hosts need of the node (`warren.runtime.broker.Broker`)."""

    @property
    def config(self) -> Config: ...

    @property
    def vhosts(self) -> Mapping[str, VHost]: ...

    @property
    def memory_pressure(self) -> bool: ...

    @property
    def durability(self) -> DurableStore | None: ...

    def queue(self, vhost: str, name: str) -> QueueHost | None: ...

    def expire_queue(self, host: QueueHost) -> None: ...

    def policies_of(self, record: QueueRecord) -> tuple[Policy | None, Policy | None]: ...

    def settings_of(
        self, record: QueueRecord, user: Policy | None, operator: Policy | None
    ) -> QueueSettings: ...


# --- the interface -----------------------------------------------------------------------


class QueueHost(Protocol):
    """One queue as this node's channels use it, whatever kind it is."""

    record: QueueRecord
    # the machine's state as this node sees it (a remote host's stays empty: settings only)
    machine: QueueMachine
    stats: MessageStats  # message_stats of the management API, bumped by channels
    policy: Policy | None
    operator_policy: Policy | None
    ever_consumed: bool
    journal_key: str | None  # a durable queue's key in the message journal
    scratch_paged: bool  # some message went to a scratch page (`paging`)

    @property
    def broker(self) -> Node: ...

    @property
    def name(self) -> str: ...

    @property
    def placement(self) -> Placement: ...

    def publish(
        self, command: Enqueue, publisher: Publisher | None = None, tag: int = 0
    ) -> Published:
        """Take a message; a quorum queue answers `REPLICATING` when given a `publisher`
        (and tells it, naming the publish by `tag`), a `Pending` future otherwise."""

    def get(self, no_ack: bool) -> Answer[Got | None]: ...

    def purge(self) -> Answer[int]: ...

    def counts(self) -> Answer[tuple[int, int]]:
        """declare-ok's message and consumer counts."""

    def settle(self, command: Settle | Return | Discard | SettleDeadLetter) -> None: ...

    def touch(self) -> None:
        """The queue was used (x-expires counts from here)."""

    def subscribe(
        self, channel: Subscriber, tag: str, command: Checkout, limited: bool
    ) -> Outcome[None]:
        """Add a consumer; once the channel sent consume-ok it calls `started`."""

    def started(self, key: Hashable) -> None:
        """consume-ok is out: deliveries to the consumer may go."""

    def unsubscribe(self, key: Hashable, requeue: bool = False) -> None: ...

    def limit(self, channel: Subscriber) -> None:
        """The channel's credit must now be consulted (global qos, or its socket is full)."""

    def dispatch(self) -> None: ...

    def cancel_all(self) -> None:
        """The queue is going away: tell every consumer (consumer_cancel_notify)."""

    def stop(self) -> None: ...

    def refresh_policies(self) -> None: ...

    def forward_delete(self, if_unused: bool, if_empty: bool) -> asyncio.Future[int] | None:
        """A delete that another node or the metadata log carries out; the future has the
        ready count (None: this node deletes the queue now)."""


class HostFields:
    """What every host keeps besides the machine it drives (its kind's own class adds
    that): the record, the management API's counters, policies and flags. No
    ``__slots__``: the release build compiles `ClassicHost`, and a compiled class cannot
    have a Python base that has them."""

    def __init__(self, broker: Node, record: QueueRecord) -> None:
        self.broker = broker
        self.record = record
        self.ever_consumed = False
        self.journal_key: str | None = None
        self.policy: Policy | None = None
        self.operator_policy: Policy | None = None
        self.scratch_paged = False
        self.stats = MessageStats()

    @property
    def name(self) -> str:
        return self.record.name


class HostFactory(Protocol):
    """Makes the host of a queue the model just got (`Broker.add_queue`)."""

    def make(self, record: QueueRecord) -> QueueHost: ...

    def replicated_declare(self, record: QueueRecord) -> asyncio.Future[None] | None:
        """A queue declared through the metadata log: done once it exists here (None: made
        at once)."""
