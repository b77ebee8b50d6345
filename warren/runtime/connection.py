"""The asyncio shell of one client connection: socket bytes to and from `amqp`.

Theory of operation:
1. `data_received` feeds the sans-I/O `ServerConnection` and handles every event the
   read produced before writing anything; replies, deliveries and confirms collect in
   one output buffer that is written once (at the end of the read, or in the next loop
   iteration for writes caused by other connections). No task per message.
2. Errors: `SoftError` closes the channel, `HardError` the connection, each with RabbitMQ's
   reply code and text. Any other exception is a bug: it is logged and the connection is
   closed with 541 INTERNAL_ERROR; other connections never notice.
3. Heartbeats: from tune-ok on (as RabbitMQ's heartbeater), one timer per connection sends
   a heartbeat when nothing was written for half the interval and drops the peer when
   nothing was read for two intervals.
4. Flow: when the socket's write buffer passes its high-water mark the connection's
   channels stop receiving deliveries (their credit is zero) until it drains.
5. Resource alarms (`warren.runtime.alarms`) block a connection that publishes: it gets
   ``connection.blocked`` and is not read until the alarm clears.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from warren import __version__
from warren.amqp import methods as m
from warren.amqp.connection import (
    Content,
    Heartbeat,
    MethodReceived,
    ProtocolHeaderReceived,
    ServerConnection,
    State,
)
from warren.amqp.content import confirm_frame, method_frame
from warren.amqp.frames import HEARTBEAT_FRAME, NEED_DATA, PROTOCOL_HEADER
from warren.amqp.table import TableError, decode_table
from warren.errors import AmqpError, HardError, ReplyCode, SilentHardError
from warren.runtime.alarms import DISK, MEMORY, REASONS
from warren.runtime.channel import Channel
from warren.runtime.tls import login_name

if TYPE_CHECKING:
    from warren.runtime.broker import Broker

log = logging.getLogger("warren.connection")

CLOSE_OK_TIMEOUT_S = 3.0
CLOSING_TIMEOUT_S = 30  # RabbitMQ's ?CLOSING_TIMEOUT: how long a closed socket may linger
# A client that fails the handshake before tune-ok waits this long for its socket to close,
# and hears nothing (RabbitMQ's SILENT_CLOSE_DELAY): repeated bad logins cost it time.
HANDSHAKE_FAILURE_DELAY_S = 3.0
PASSWORD_MECHANISMS = ["PLAIN", "AMQPLAIN"]
# Events one connection may handle per event-loop turn. A publisher can hand the loop
# megabytes in one read event; without a bound the loop would spend seconds on it while
# consumers' sockets and timers wait. Past the bound the connection stops reading and
# carries on in the next turn, so TCP slows the publisher down (RabbitMQ's credit flow
# plays this part there).
EVENTS_PER_TURN_MAX = 512

CAPABILITIES = {
    "publisher_confirms": True,
    "exchange_exchange_bindings": True,
    "basic.nack": True,
    "consumer_cancel_notify": True,
    "connection.blocked": True,
    "consumer_priorities": True,
    "authentication_failure_close": True,
    "per_consumer_qos": True,
    "direct_reply_to": True,
}


class AmqpConnection(asyncio.Protocol):
    """One client connection; `taken` (another worker's, handed over) replays the state
    that worker negotiated once the socket is here (`warren.runtime.workers.handover`)."""

    def __init__(
        self, broker: Broker, taken: Callable[[AmqpConnection], None] | None = None
    ) -> None:
        config = broker.config
        self.broker = broker
        self.protocol = ServerConnection(config.frame_max, config.channel_max)
        self.loop = asyncio.get_running_loop()
        self.transport: asyncio.Transport | None = None
        self.channels: dict[int, Channel] = {}
        self.vhost: Any = None
        self.user = ""
        self.peer = ""
        # what the management API shows of the connection
        self.client_properties: dict[str, Any] = {}
        self.auth_mechanism = ""
        self.connected_at_ms = int(time.time() * 1000)
        # bytes and socket reads/writes, RabbitMQ's recv_oct, recv_cnt, send_oct, send_cnt
        self.recv_oct = self.recv_cnt = self.send_oct = self.send_cnt = 0
        self.cancel_notify = False
        self.paused = False
        self.delivered = False  # deliveries were written since the last pump
        self.exclusive_queues: list[str] = []
        self.heartbeat_s = 0
        self._out: list[bytes] = []
        self._flush_scheduled = False
        self._confirming: dict[int, Channel] = {}
        self._last_read = self._last_write = self.loop.time()
        self._timer: asyncio.TimerHandle | None = None  # handshake, close-ok or linger
        self._beat: asyncio.TimerHandle | None = None  # heartbeats, from tune-ok on
        self._closed = False
        self._throttled = False  # reading paused until the buffered events are handled
        self._peer_certificate: dict[str, Any] | None = None
        self._authenticating = False  # a password check runs on a worker thread
        self._suspended = False  # a channel waits for a replicated outcome (`suspend`)
        self._flow_held: set[Channel] = set()  # channels over quorum_commands_soft_limit
        self.published = False  # ever: a resource alarm blocks such connections
        self.blocked = False  # by a resource alarm: not read until it clears
        self._blocked_capability = False  # the client takes connection.blocked
        self._failure_close = False  # the client takes a 403 close for a failed login
        self._tuned = False  # tune-ok accepted: failures are answered with connection.close
        self._silenced = False  # a failed handshake: nothing more is read or answered
        # On a node of several workers, until the connection is bound to one: given each
        # event first, True when it handed the connection (and the event) to another
        # worker (`warren.runtime.workers.handover`).
        self.placing: Callable[[object], bool] | None = None
        self.handed = taken is not None  # the other worker admitted it (connection_max)
        self._taken = taken

    @property
    def frame_max(self) -> int:
        return self.protocol.frame_max

    # --- asyncio.Protocol ------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        peer = transport.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if peer else "?"
        self._peer_host = peer[0] if peer else ""
        tls = transport.get_extra_info("ssl_object")
        # a verified client certificate (empty without one): it allows EXTERNAL logins
        self._peer_certificate = tls.getpeercert() if tls is not None else None
        config = self.broker.config
        if not self.broker.admit(self, self.handed):
            log.warning(
                "refusing connection %s: the node has %s (connection_max)",
                self.peer,
                config.connection_max,
            )
            transport.close()
            return
        timeout_s = config.handshake_timeout / 1000
        self._timer = self.loop.call_later(timeout_s, self._handshake_timeout)
        if self._taken is not None:
            taken, self._taken = self._taken, None  # its unread bytes are read once
            taken(self)

    def data_received(self, data: bytes) -> None:
        self._last_read = self.loop.time()
        self.recv_oct += len(data)
        self.recv_cnt += 1
        self.protocol.receive_data(data)
        if not self._throttled:
            self._handle_events()

    def _handle_events(self) -> None:
        """Handle at most a turn's worth of events; if more are buffered, stop reading and
        come back next turn."""
        protocol = self.protocol
        channels = self.channels
        event: object = None
        published = False
        try:
            for _ in range(EVENTS_PER_TURN_MAX):
                event = protocol.next_event()
                if event is NEED_DATA:
                    if self._throttled:
                        self._throttled = False
                        self._resume_reading()
                    break
                if self.placing is not None and self.placing(event):
                    return  # this worker is done with it: nothing to flush or read
                try:
                    if type(event) is Content:  # nearly every event: keep this path flat
                        published = True
                        channel = channels.get(event.channel)
                        if channel is not None:
                            channel.publish(event)
                    else:
                        self._on_event(event)
                except AmqpError as error:
                    self._on_error(event, error)
                if self._closed:
                    return
                if self._authenticating or self._suspended:
                    break  # the rest waits for the password check or the outcome
            else:
                self._throttle()
        except HardError as error:
            self._fail(error)
        except Exception:
            log.exception("internal error on connection %s", self.peer)
            self.close_with(HardError(ReplyCode.INTERNAL_ERROR, "internal error"))
        if published:
            self.published = True
            if self.broker.alarms and not self.blocked:
                self._block()
        self.flush()

    def _throttle(self) -> None:
        if not self._throttled and self.transport is not None:
            self._throttled = True
            self.transport.pause_reading()
        self.loop.call_soon(self._handle_events)

    def _resume_reading(self) -> None:
        if (
            self.transport is not None
            and not self.transport.is_closing()
            and not self.blocked
            and not self._authenticating
            and not self._suspended
            and not self._flow_held
            and not self._silenced
        ):
            self.transport.resume_reading()

    # --- resource alarms (`warren.runtime.alarms`) ------------------------------------------

    def alarms_changed(self) -> None:
        if self.broker.alarms:
            if self.published and not self.blocked:
                self._block()
                self.flush()
        elif self.blocked:
            self._unblock()

    def _block(self) -> None:
        self.blocked = True
        if self._blocked_capability:
            reason = REASONS[MEMORY if MEMORY in self.broker.alarms else DISK]
            self.send_method(0, m.ConnectionBlocked(reason))
        if self.transport is not None:
            self.transport.pause_reading()

    def _unblock(self) -> None:
        self.blocked = False
        if self._blocked_capability:
            self.send_method(0, m.ConnectionUnblocked())
        if not self._throttled:
            self._resume_reading()
        self.flush()

    def connection_lost(self, exc: Exception | None) -> None:
        self._release()
        if self._timer is not None:  # a lingering close (`_linger`) is over
            self._timer.cancel()
            self._timer = None

    def pause_writing(self) -> None:
        log.debug("connection %s: write buffer full, deliveries paused", self.peer)
        self.paused = True
        for channel in self.channels.values():
            for consumer in channel.consumers.values():
                if consumer.host is not None:
                    consumer.host.limit(channel)

    def resume_writing(self) -> None:
        log.debug("connection %s: write buffer drained, deliveries resumed", self.peer)
        self.paused = False
        for channel in list(self.channels.values()):
            channel.dispatch_consumers()
        self.flush()

    # --- output ----------------------------------------------------------------------------

    def send(self, data: bytes) -> None:
        self._out.append(data)
        if not self._flush_scheduled:
            self._flush_scheduled = True
            self.loop.call_soon(self.flush)

    def send_method(self, channel: int, method: m.Method) -> None:
        self.send(method_frame(channel, method))

    def confirm_later(self, channel: Channel) -> None:
        self._confirming[channel.number] = channel
        if not self._flush_scheduled:
            self._flush_scheduled = True
            self.loop.call_soon(self.flush)

    def flush(self) -> None:
        self._flush_scheduled = False
        if self._confirming:
            for channel in self._confirming.values():
                for confirm in channel.pending_confirms():
                    self._out.append(confirm_frame(channel.number, confirm))
            self._confirming.clear()
        if self._out and self.transport is not None and not self.transport.is_closing():
            data = b"".join(self._out) if len(self._out) > 1 else self._out[0]
            self._out.clear()
            self._emit(data)
            self._last_write = self.loop.time()
            if self.delivered and not self.paused:
                self._pump()
        else:
            self._out.clear()

    def _pump(self) -> None:
        """Deliveries went out and the socket takes more: ask the queues this connection
        consumes from for the next batch (a queue hands out a bounded batch per command)."""
        self.delivered = False
        for channel in list(self.channels.values()):
            if channel.consumers:
                channel.dispatch_consumers()

    # --- events ----------------------------------------------------------------------------

    def _on_event(self, event: object) -> None:
        if type(event) is MethodReceived:
            if event.channel == 0:
                self._on_connection_method(event.method)
            else:
                self._on_channel_method(event.channel, event.method)
        elif type(event) is ProtocolHeaderReceived:
            self._on_protocol_header(event.ok)
        else:
            assert isinstance(event, Heartbeat)

    def _on_channel_method(self, number: int, method: m.Method) -> None:
        kind = type(method)
        if kind is m.ChannelOpen:
            self.channels[number] = Channel(self, number)
            self.send_method(number, m.ChannelOpenOk())
        elif kind is m.ChannelClose:
            self._drop_channel(number)
            self.send_method(number, m.ChannelCloseOk())
        elif kind is m.ChannelCloseOk:
            self._drop_channel(number)
        else:
            channel = self.channels.get(number)
            if channel is not None:  # else the server closed it and awaits close-ok
                channel.handle(method)

    def _on_error(self, event: object, error: AmqpError) -> None:
        """A channel's method failed: close the channel (soft) or the connection (hard)."""
        culprit: m.Method
        if type(event) is Content:
            number, culprit = event.channel, event.method
        else:
            assert isinstance(event, MethodReceived)
            number, culprit = event.channel, event.method
        if number:  # connection methods name themselves where RabbitMQ does
            error.at(culprit.CLASS_ID, culprit.METHOD_ID)
        channel = self.channels.get(number)
        if isinstance(error, HardError) or channel is None:
            raise error
        self._close_channel(channel, error)

    def _close_channel(self, channel: Channel, error: AmqpError) -> None:
        self.send_method(
            channel.number,
            m.ChannelClose(error.code, _short(error.text), error.class_id, error.method_id),
        )
        self.protocol.close_channel(channel.number)
        self._drop_channel(channel.number)

    def _drop_channel(self, number: int) -> None:
        channel = self.channels.pop(number, None)
        self._confirming.pop(number, None)
        if channel is not None:
            channel.close()
            self.hold_flow(channel, False)

    # --- connection class ------------------------------------------------------------------

    def _on_protocol_header(self, ok: bool) -> None:
        if not ok:
            self._write_now(PROTOCOL_HEADER)
            self._abort()
            return
        self.send_method(
            0,
            m.ConnectionStart(
                0,
                9,
                {
                    "capabilities": CAPABILITIES,
                    "cluster_name": self.broker.cluster_name,
                    "copyright": "Warren contributors",
                    "information": "Licensed under the Apache License 2.0",
                    "platform": "Python",
                    "product": "Warren",
                    "version": __version__,
                },
                " ".join(self._mechanisms()).encode(),
                b"en_US",
            ),
        )

    def _on_connection_method(self, method: m.Method) -> None:
        kind = type(method)
        if kind is m.ConnectionStartOk:
            self._start_ok(method)  # type: ignore[arg-type]
        elif kind is m.ConnectionTuneOk:
            self._tune_ok(method)  # type: ignore[arg-type]
        elif kind is m.ConnectionOpen:
            self._open(method)  # type: ignore[arg-type]
        elif kind is m.ConnectionClose:
            self._release()
            self._write_now(method_frame(0, m.ConnectionCloseOk()))
            self._linger()
        elif kind is m.ConnectionCloseOk:
            self._abort()
        elif kind is m.ConnectionUpdateSecret:
            self.send_method(0, m.ConnectionUpdateSecretOk())
        elif self.protocol.state is not State.CLOSING:
            raise HardError(ReplyCode.COMMAND_INVALID, f"unexpected method '{method.NAME}'")

    def _start_ok(self, method: m.ConnectionStartOk) -> None:
        try:
            client = decode_table(method.client_properties)
        except TableError:
            client = {}
        self.client_properties = client
        self.auth_mechanism = method.mechanism
        capabilities = client.get("capabilities")
        if isinstance(capabilities, dict):
            self.cancel_notify = bool(capabilities.get("consumer_cancel_notify"))
            self._blocked_capability = bool(capabilities.get("connection.blocked"))
            self._failure_close = bool(capabilities.get("authentication_failure_close"))
        access = self.broker.access
        mechanism = method.mechanism
        if mechanism not in self._mechanisms():
            raise HardError(
                ReplyCode.COMMAND_INVALID, f"unknown authentication mechanism '{mechanism}'"
            )
        if mechanism == "EXTERNAL":
            user = login_name(self._peer_certificate, self.broker.config.ssl_cert_login_from)
            self._login(mechanism, user, user is not None and user in access.users)
            return
        user, password = _credentials(mechanism, method.response)
        if user is None or password is None:
            raise HardError(ReplyCode.SYNTAX_ERROR, f"{mechanism} response is malformed")
        if access.authenticated(user, password) is not None:
            self._login(mechanism, user, True)
        elif not access.has_password(user):
            self._login(mechanism, user, False)
        else:  # a slow hash to check: on a worker thread, this connection waits
            self._authenticating = True
            if self.transport is not None:
                self.transport.pause_reading()
            checked = self.loop.run_in_executor(None, access.authenticate, user, password)
            checked.add_done_callback(lambda done: self._checked(mechanism, user, done))

    def _mechanisms(self) -> list[str]:
        """What connection.start offers: EXTERNAL only to a client with a certificate."""
        return [*PASSWORD_MECHANISMS, "EXTERNAL"] if self._peer_certificate else PASSWORD_MECHANISMS

    def _checked(self, mechanism: str, user: str, done: asyncio.Future[Any]) -> None:
        """The password check finished: carry on with the login, then with what was read."""
        self._authenticating = False
        if self._closed:
            return
        try:
            self._login(mechanism, user, done.result() is not None)
        except HardError as error:
            self._fail(error)
        self.flush()
        if not self._silenced:
            self._resume_reading()  # also to read the close-ok of a refused login
            self._handle_events()

    def hold_flow(self, channel: Channel, held: bool) -> None:
        """Stop reading while `channel` has too many replicated publishes in flight."""
        if held:
            if channel not in self._flow_held:
                self._flow_held.add(channel)
                if self.transport is not None:
                    self.transport.pause_reading()
        elif channel in self._flow_held:
            self._flow_held.discard(channel)
            self._resume_reading()

    def suspend(self, channel: Channel, outcome: asyncio.Future[Any], then: Any) -> None:
        """Read nothing more until `outcome` is done, then call ``then(outcome)`` as the
        channel's handler of the method that waited (a quorum queue's basic.get, purge or
        declare), so the replies keep the order of the methods."""
        self._suspended = True
        if self.transport is not None:
            self.transport.pause_reading()
        outcome.add_done_callback(lambda done: self._resume(channel, done, then))

    def _resume(self, channel: Channel, done: asyncio.Future[Any], then: Any) -> None:
        self._suspended = False
        if self._closed:
            return
        try:
            then(done)
        except HardError as error:
            self.close_with(error)
        except AmqpError as error:
            self._close_channel(channel, error)
        except Exception:
            log.exception("internal error on connection %s", self.peer)
            self.close_with(HardError(ReplyCode.INTERNAL_ERROR, "internal error"))
        self.flush()
        if not self._closed and not self._suspended:  # `then` may have to wait again
            self._resume_reading()
            self._handle_events()

    def _login(self, mechanism: str, user: str | None, authenticated: bool) -> None:
        """403 unless authenticated (and from loopback for loopback-only users); else tune."""
        if user is None or not authenticated or not self._from_allowed(user):
            raise HardError(
                ReplyCode.ACCESS_REFUSED,
                f"Login was refused using authentication mechanism {mechanism}. "
                "For details see the broker logfile.",
            )
        self.user = user
        config = self.broker.config
        self.send_method(
            0, m.ConnectionTune(config.channel_max, config.frame_max, config.heartbeat)
        )

    def _from_allowed(self, user: str) -> bool:
        """Loopback-only users (guest) may log in from loopback addresses only."""
        if user in self.broker.config.loopback_users:
            try:
                return ipaddress.ip_address(self._peer_host).is_loopback
            except ValueError:
                return False
        return True

    def _tune_ok(self, method: m.ConnectionTuneOk) -> None:
        self.protocol.tune(method.frame_max, method.channel_max)
        self.heartbeat_s = method.heartbeat
        self._tuned = True
        if self.heartbeat_s:  # RabbitMQ's heartbeater starts here, before connection.open
            self._beat = self.loop.call_later(self.heartbeat_s / 2, self._heartbeat)

    def _open(self, method: m.ConnectionOpen) -> None:
        vhost = self.broker.vhosts.get(method.virtual_host)
        if vhost is None:
            raise HardError(ReplyCode.NOT_ALLOWED, f"vhost {method.virtual_host} not found").at(
                10, 40
            )
        if self.broker.access.permission(self.user, vhost.name) is None:
            raise HardError(
                ReplyCode.NOT_ALLOWED,
                f"access to vhost '{vhost.name}' refused for user '{self.user}'",
            ).at(10, 40)
        self.vhost = vhost
        if self._timer is not None:  # the handshake is over
            self._timer.cancel()
            self._timer = None
        self.send_method(0, m.ConnectionOpenOk())

    # --- heartbeats and timeouts -----------------------------------------------------------

    def _heartbeat(self) -> None:
        now = self.loop.time()
        if now - self._last_read > 2 * self.heartbeat_s and not self.blocked:
            log.warning(
                "missed heartbeats from client %s, timeout: %ss", self.peer, self.heartbeat_s
            )
            self._abort()
            return
        if now - self._last_write >= self.heartbeat_s / 2 and self.transport is not None:
            self._emit(HEARTBEAT_FRAME)
            self._last_write = now
        self._beat = self.loop.call_later(self.heartbeat_s / 2, self._heartbeat)

    def _handshake_timeout(self) -> None:
        log.warning("closing connection %s: handshake timeout", self.peer)
        self._abort()

    # --- closing ---------------------------------------------------------------------------

    def _fail(self, error: HardError) -> None:
        """A hard error of this connection's own making. Before tune-ok RabbitMQ answers
        none but a refused login, and that only to clients with the
        `authentication_failure_close` capability; the others see the socket close later."""
        handshaking = not self._tuned and self.protocol.state is not State.CLOSED
        refused_login = error.code == ReplyCode.ACCESS_REFUSED and self._failure_close
        if not handshaking or refused_login:
            self.close_with(error)
            return
        log.info("handshake of %s failed: %s", self.peer, error.text)
        self._release()
        self._silenced = True
        if self.transport is not None:
            self.transport.pause_reading()
        self._timer = self.loop.call_later(HANDSHAKE_FAILURE_DELAY_S, self._abort)

    def close_with(self, error: AmqpError) -> None:
        """Close the connection with `connection.close`, then wait for close-ok."""
        if self.protocol.state is State.CLOSING:
            return  # one close per connection: the first error is the one reported
        if self.protocol.state in (State.AWAITING_HEADER, State.CLOSED) or isinstance(
            error, SilentHardError
        ):
            log.info("dropping connection %s: %s", self.peer, error.text)
            self._abort()
            return
        log.info("closing connection %s: %s", self.peer, error.text)
        self._release()
        self._out.clear()
        self._write_now(
            method_frame(
                0,
                m.ConnectionClose(error.code, _short(error.text), error.class_id, error.method_id),
            )
        )
        self.protocol.close()
        self._timer = self.loop.call_later(CLOSE_OK_TIMEOUT_S, self._abort)

    def shutdown(self) -> None:
        """The node is stopping: tell the client, as RabbitMQ does with 320."""
        self.close_with(
            HardError(
                ReplyCode.CONNECTION_FORCED,
                "broker forced connection closure with reason 'shutdown'",
            )
        )
        self._abort()

    def forget_exclusive(self, name: str) -> None:
        if name in self.exclusive_queues:
            self.exclusive_queues.remove(name)

    def _release(self) -> None:
        """Requeue and cancel everything the connection held; delete its exclusive queues."""
        if self._closed:
            return
        self._closed = True
        for timer in (self._timer, self._beat):
            if timer is not None:
                timer.cancel()
        self._timer = self._beat = None
        for number in list(self.channels):
            self._drop_channel(number)
        if self.vhost is not None:
            for name in self.exclusive_queues:
                self.broker.delete_queue(self.vhost, name)
        self.exclusive_queues.clear()
        self.broker.release(self)

    def _linger(self) -> None:
        """After close-ok the client closes the socket, as RabbitMQ expects: until then,
        or for at most the heartbeat interval (30 s without one), what it still sends is
        read and dropped, so that a client caught mid-write sees no reset."""
        timeout_s = self.heartbeat_s if 0 < self.heartbeat_s < CLOSING_TIMEOUT_S else None
        self._timer = self.loop.call_later(timeout_s or CLOSING_TIMEOUT_S, self._abort)

    def _write_now(self, data: bytes) -> None:
        if self.transport is not None and not self.transport.is_closing():
            if self._out:
                self._emit(b"".join(self._out))
                self._out.clear()
            self._emit(data)

    def _emit(self, data: bytes) -> None:
        assert self.transport is not None
        self.transport.write(data)
        self.send_oct += len(data)
        self.send_cnt += 1

    def _abort(self) -> None:
        self._release()
        if self.transport is not None:
            self.transport.close()


def _short(text: str) -> str:
    """Reply texts are shortstrs: at most 255 bytes, as RabbitMQ truncates them. A name
    that came in basic.publish may hold bytes that are not UTF-8 (decoded with
    surrogateescape): the text quotes them as they came, as RabbitMQ's does."""
    raw = text.encode("utf-8", "surrogateescape")
    if len(raw) <= 255:
        return text
    return raw[:252].decode("utf-8", "ignore") + "..."


def _credentials(mechanism: str, response: bytes) -> tuple[str | None, str | None]:
    if mechanism == "PLAIN":
        parts = response.split(b"\x00")
        if len(parts) != 3:
            return None, None
        return parts[1].decode("utf-8", "replace"), parts[2].decode("utf-8", "replace")
    if mechanism == "AMQPLAIN":
        try:
            table = decode_table(len(response).to_bytes(4, "big") + response)
        except TableError:
            return None, None
        login, password = table.get("LOGIN"), table.get("PASSWORD")
        if isinstance(login, str) and isinstance(password, str):
            return login, password
    return None, None
