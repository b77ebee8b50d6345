"""A port another program takes between the node's bind and its listen fails the start by
name, under uvloop (which the node runs on, and which says nothing: it closes the socket)
and under asyncio's own loop."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

import pytest
import uvloop

from warren.runtime.broker import Broker
from warren.runtime.config import Config
from warren.runtime.start import StartError, bind_listeners
from warren.server import start_listeners

Runner = Callable[[Coroutine[Any, Any, None]], None]


@pytest.mark.parametrize("run", [uvloop.run, asyncio.run], ids=["uvloop", "asyncio"])
def test_a_port_taken_before_the_listen_fails_the_start_by_name(
    tmp_path: Path, run: Runner
) -> None:
    config = Config(data_dir=tmp_path, port=0, management_port=0, bind=["127.0.0.1"])
    amqp, management = bind_listeners(config, None)  # bound, not listening; AMQP first
    management.sock.close()
    port = amqp.sock.getsockname()[1]
    with socket.socket() as other:  # binds beside the node's socket, and listens first
        other.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        other.bind(("127.0.0.1", port))
        other.listen()

        async def scenario() -> None:
            with pytest.raises(StartError) as raised:
                await start_listeners(Broker(config), [amqp])
            assert str(raised.value) == (
                f"AMQP cannot listen on 127.0.0.1:{port}: another program took the port as"
                " this node started; stop it, or choose another port with --port"
            )

        run(scenario())
    amqp.sock.close()
