"""The simulated transport between cluster nodes: `PeerLinks` over an in-memory network.

Theory of operation:
1. The runtime's transport contract is TCP's, as `warren.runtime.cluster.peers` gives it:
   one link per pair of nodes, messages in order on a link, best effort (what is in
   flight when a link drops is lost), calls that fail with `PeerUnavailable` when the link
   goes or the answer is late, and link handlers that hear "down" and "up". `SimNet`
   keeps that contract and nothing more: every message gets its own delay, drawn from the
   seed, but never overtakes one sent before it on the same link; messages on different
   links overtake each other freely (that is the reordering the runtime can see).
2. Faults: a link reset drops everything in flight on it and tells both ends "down",
   then "up" again a little later (lost messages); a partition blocks links between two
   groups until healed; a crashed node's links drop. A link carries an epoch, bumped by
   each of these, so a message sent before a drop never arrives after it.
3. Items are encoded when sent and decoded when they arrive, by the frame codec `Peers`
   uses (`warren.runtime.cluster.frames`, one item per frame), so no node ever shares an
   object with another and the simulator runs the cluster's encoding.
4. `SimLinks` is one node's end: what `ClusterNode` and `RaftHost` get in place of `Peers`.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable
from typing import Final

from warren.runtime.cluster.calls import PeerMessage, RaftTraffic, Request
from warren.runtime.cluster.frames import (
    Answer,
    Ask,
    Failure,
    Item,
    Send,
    answer,
    answer_value,
    decode_frame,
    encode_frame,
    failure,
    failure_exception,
)
from warren.runtime.cluster.peers import (
    LinkHandler,
    MessageHandler,
    PeerUnavailable,
    RequestHandler,
)
from warren.testing.sim.loop import Life

# virtual seconds a message takes on a link, and now and then far longer
DELAY_S_MIN: Final = 0.0005
DELAY_S_MAX: Final = 0.005
SLOW_S_MAX: Final = 0.2
RECONNECT_S_MAX: Final = 0.5  # a reset link comes back after up to this long
_TIE_S: Final = 1e-7


def _pair(a: str, b: str) -> tuple[str, str]:
    return (a, b) if a < b else (b, a)


class SimNet:
    """Every node's links (see the module docstring)."""

    def __init__(self, loop: asyncio.AbstractEventLoop, rng: random.Random) -> None:
        self.loop = loop
        self.rng = rng
        self.slow_probability = 0.0
        self.ends: dict[str, SimLinks] = {}  # started nodes
        self.blocked: set[tuple[str, str]] = set()  # partitioned pairs
        self._epochs: dict[tuple[str, str], int] = {}
        self._last_arrival: dict[tuple[str, str], float] = {}  # per direction: FIFO
        self.on_event: Callable[[str], None] = lambda _text: None

    def up(self, a: str, b: str) -> bool:
        return a in self.ends and b in self.ends and _pair(a, b) not in self.blocked

    def transmit(self, sender: str, receiver: str, item: Item) -> None:
        if not self.up(sender, receiver):
            return
        pair = _pair(sender, receiver)
        epoch = self._epochs.get(pair, 0)
        rng = self.rng
        delay = rng.uniform(DELAY_S_MIN, DELAY_S_MAX)
        if self.slow_probability and rng.random() < self.slow_probability:
            delay = rng.uniform(DELAY_S_MAX, SLOW_S_MAX)
        # strictly after the last one on the link: the loop's timer heap does not keep the
        # order of timers due at the same time
        last = self._last_arrival.get((sender, receiver), 0.0)
        at = max(self.loop.time() + delay, last + _TIE_S)
        self._last_arrival[sender, receiver] = at
        if not (isinstance(item, Send) and type(item.message) is RaftTraffic):
            self.on_event(f"{sender}->{receiver} {_describe(item)}")
        data = encode_frame([item])
        context = self.ends[receiver].life.context  # it runs as part of the receiver's life
        self.loop.call_at(at, self._arrive, sender, receiver, pair, epoch, data, context=context)

    def _arrive(
        self, sender: str, receiver: str, pair: tuple[str, str], epoch: int, data: bytes
    ) -> None:
        if self._epochs.get(pair, 0) != epoch or not self.up(sender, receiver):
            return  # the link dropped meanwhile: lost with it
        for item in decode_frame(data):
            self.ends[receiver].receive(sender, item)

    # --- faults and life cycle ---------------------------------------------------------------

    def attach(self, end: SimLinks) -> None:
        self.ends[end.node] = end
        for other in sorted(self.ends):
            if other != end.node and self.up(end.node, other):
                self._link_up(end.node, other)

    def detach(self, node: str) -> None:
        """The node crashed or stopped: its links drop."""
        if self.ends.pop(node, None) is None:
            return
        for other in sorted(self.ends):
            self._drop(node, other, notify={other})

    def reset(self, a: str, b: str) -> None:
        """The link between `a` and `b` drops (with what is in flight) and comes back."""
        if not self.up(a, b):
            return
        self.on_event(f"link {a}-{b} reset")
        self._drop(a, b, notify={a, b})
        self.loop.call_later(self.rng.uniform(0.01, RECONNECT_S_MAX), self._reconnect, a, b)

    def _reconnect(self, a: str, b: str) -> None:
        if self.up(a, b) and not self.ends[a].connected(b):
            self._link_up(a, b)

    def partition(self, group: list[str], others: list[str]) -> None:
        for a in group:
            for b in others:
                if _pair(a, b) in self.blocked:
                    continue
                self.blocked.add(_pair(a, b))
                self._drop(a, b, notify={a, b})

    def heal(self) -> None:
        blocked, self.blocked = sorted(self.blocked), set()
        for a, b in blocked:
            if self.up(a, b):
                self._link_up(a, b)

    def _drop(self, a: str, b: str, notify: set[str]) -> None:
        pair = _pair(a, b)
        self._epochs[pair] = self._epochs.get(pair, 0) + 1
        for node, other in ((a, b), (b, a)):
            end = self.ends.get(node)
            if node in notify and end is not None:
                end.link_changed(other, False)

    def _link_up(self, a: str, b: str) -> None:
        pair = _pair(a, b)
        self._epochs[pair] = self._epochs.get(pair, 0) + 1
        self.ends[a].link_changed(b, True)
        self.ends[b].link_changed(a, True)


class SimLinks:
    """One node's end of the `SimNet`: the `PeerLinks` its `ClusterNode` uses."""

    def __init__(self, net: SimNet, life: Life, others: list[str]) -> None:
        self.net = net
        self.life = life
        self.node = life.name
        self._others = sorted(other for other in others if other != self.node)
        self._linked: set[str] = set()
        self._message_handlers: list[MessageHandler] = []
        self._link_handlers: list[LinkHandler] = []
        self._request_handler: RequestHandler | None = None
        self._calls: dict[int, tuple[str, asyncio.Future[object], Request]] = {}
        self._call_ids = 0
        self._serving: set[asyncio.Task[None]] = set()

    # --- PeerLinks ---------------------------------------------------------------------------

    @property
    def nodes(self) -> list[str]:
        return list(self._others)

    @property
    def listen_address(self) -> tuple[str, int]:
        return self.node, 0

    def address(self, node: str) -> tuple[str, int] | None:
        return (node, 0) if node in self._others else None

    def set_address(self, node: str, host: str, port: int) -> None:
        if node != self.node and node not in self._others:
            self._others = sorted({*self._others, node})

    def forget(self, node: str) -> None:
        self._others = [other for other in self._others if other != node]

    def on_message(self, handler: MessageHandler) -> None:
        self._message_handlers.append(handler)

    def on_link(self, handler: LinkHandler) -> None:
        self._link_handlers.append(handler)

    def serve(self, handler: RequestHandler) -> None:
        self._request_handler = handler

    def connected(self, node: str) -> bool:
        return node in self._linked

    def send(self, node: str, message: PeerMessage) -> None:
        if node in self._linked:
            self.net.transmit(self.node, node, Send(message))

    async def call(self, node: str, request: Request, timeout: float = 5.0) -> object:
        if node not in self._linked:
            raise PeerUnavailable(node, "not connected")
        self._call_ids += 1
        call_id = self._call_ids
        future: asyncio.Future[object] = asyncio.get_running_loop().create_future()
        self._calls[call_id] = (node, future, request)
        self.net.transmit(self.node, node, Ask(call_id, request))
        try:
            return await asyncio.wait_for(future, timeout)
        except TimeoutError:
            raise PeerUnavailable(node, f"no answer within {timeout} s") from None
        finally:
            self._calls.pop(call_id, None)

    async def start(self) -> None:
        self.net.attach(self)

    async def close(self) -> None:
        self.net.detach(self.node)
        for task in list(self._serving):
            task.cancel()

    # --- from the network --------------------------------------------------------------------

    def link_changed(self, node: str, up: bool) -> None:
        if up:
            if node in self._linked:  # a new link replaced the old one: as `Peers` does,
                self._fail_calls(node)  # calls on it fail and handlers hear "up" again
            self._linked.add(node)
        elif node in self._linked:
            self._linked.discard(node)
            self._fail_calls(node)
        else:
            return
        for handler in list(self._link_handlers):
            # as part of this node's life, whoever brought the link up or down
            self.life.run(handler, node, up)

    def _fail_calls(self, node: str) -> None:
        for call_id, (to, future, _) in list(self._calls.items()):
            if to == node and not future.done():
                future.set_exception(PeerUnavailable(node, "link down"))
                del self._calls[call_id]

    def receive(self, sender: str, item: Item) -> None:
        if sender not in self._linked:
            return
        if isinstance(item, Ask):
            task = asyncio.ensure_future(self._answer(sender, item))
            self._serving.add(task)
            task.add_done_callback(self._serving.discard)
        elif isinstance(item, Send):
            for handler in list(self._message_handlers):
                handler(sender, item.message)
        else:
            waiting = self._calls.pop(item.call_id, None)
            if waiting is not None and not waiting[1].done():
                if isinstance(item, Failure):
                    waiting[1].set_exception(failure_exception(item))
                else:
                    waiting[1].set_result(answer_value(item, waiting[2]))

    async def _answer(self, sender: str, ask: Ask) -> None:
        assert self._request_handler is not None, "a node serves before its links start"
        try:
            reply = answer(ask.call_id, await self._request_handler(sender, ask.request))
        except Exception as error:
            self._reply(sender, failure(ask.call_id, error))
        else:
            self._reply(sender, reply)

    def _reply(self, node: str, item: Answer | Failure) -> None:
        if node in self._linked:
            self.net.transmit(self.node, node, item)


def _describe(item: Item) -> str:
    if isinstance(item, Send):
        return type(item.message).__name__
    return type(item.request).__name__ if isinstance(item, Ask) else "reply"
