"""kombu on the py-amqp transport, and a real Celery worker, against the broker.

kombu: declare, publish with `confirm_publish` (a nack raises), consume with a manual ack,
and an RPC call. Celery: a worker subprocess (`--pool=solo`) on this broker with the `rpc://`
result backend computes `add.delay(2, 3)`. The worker imports this module to find its app,
configured through the environment.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import celery
import kombu
import pytest
from amqp.exceptions import MessageNacked

CELERY_BROKER_ENV = "WARREN_TEST_CELERY_BROKER"
CELERY_QUEUE_ENV = "WARREN_TEST_CELERY_QUEUE"
WORKER_STOP_S = 10.0


def pyamqp_url(url: str) -> str:
    return "pyamqp://" + url.split("://", 1)[1]


def drain_until(connections, until, timeout_s: float = 5.0) -> None:
    """Drain events on the kombu connections in turn until `until()`; fail after timeout."""
    deadline = time.monotonic() + timeout_s
    while not until():
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout_s} s")
        for connection in connections:
            with contextlib.suppress(TimeoutError):
                connection.drain_events(timeout=0.01)


def confirming(url: str) -> kombu.Connection:
    return kombu.Connection(pyamqp_url(url), transport_options={"confirm_publish": True})


# -- kombu ------------------------------------------------------------------------------------


def test_kombu_publish_confirm_consume_ack(amqp):
    exchange = kombu.Exchange(amqp.name("x"), "direct", durable=True)
    queue = kombu.Queue(amqp.name("work"), exchange, routing_key="work", durable=True)
    got = []

    def on_message(body, message) -> None:
        got.append((body, message.properties["message_id"], message.delivery_info["redelivered"]))
        message.ack()

    with confirming(amqp.broker.url) as connection:
        producer = connection.Producer(serializer="json")
        producer.publish(
            {"n": 1}, exchange=exchange, routing_key="work", declare=[queue], message_id="m-1"
        )
        with connection.Consumer(queue, callbacks=[on_message], accept=["json"]):
            drain_until([connection], lambda: bool(got))
    assert got == [({"n": 1}, "m-1", False)]
    assert amqp.passive_count(amqp.channel(), queue.name) == (0, 0)


def test_kombu_confirm_publish_raises_on_nack(amqp):
    arguments = {"x-max-length": 1, "x-overflow": "reject-publish"}
    queue = amqp.queue("full", arguments=arguments)
    with confirming(amqp.broker.url) as connection:
        producer = connection.Producer()
        producer.publish(b"m1", routing_key=queue, exchange="")
        with pytest.raises(MessageNacked):
            producer.publish(b"m2", routing_key=queue, exchange="")
    assert amqp.bodies(amqp.channel(), queue) == ["m1"]


def kombu_serve_doubling(connection: kombu.Connection, requests: kombu.Queue) -> kombu.Consumer:
    producer = connection.Producer(serializer="json")

    def on_request(body, message) -> None:
        props = message.properties
        producer.publish(
            {"n": 2 * body["n"]},
            exchange="",
            routing_key=props["reply_to"],
            correlation_id=props["correlation_id"],
        )
        message.ack()

    return connection.Consumer(requests, callbacks=[on_request], accept=["json"])


def test_kombu_rpc(amqp):
    requests = kombu.Queue(amqp.name("rpc"), kombu.Exchange(""), routing_key=amqp.name("rpc"))
    replies = kombu.Queue(amqp.name("reply"), exclusive=True)
    got = []
    with confirming(amqp.broker.url) as caller, confirming(amqp.broker.url) as responder:
        requests(responder.default_channel).declare()

        def on_reply(body, message) -> None:
            got.append((message.properties["correlation_id"], body))

        with (
            kombu_serve_doubling(responder, requests),
            caller.Consumer(replies, callbacks=[on_reply], no_ack=True, accept=["json"]),
        ):
            caller.Producer(serializer="json").publish(
                {"n": 21},
                exchange="",
                routing_key=requests.name,
                reply_to=replies.name,
                correlation_id="c-1",
            )
            drain_until([caller, responder], lambda: bool(got))
    assert got == [("c-1", {"n": 42})]


# -- celery -----------------------------------------------------------------------------------


def make_celery_app(broker_url: str, queue: str) -> tuple[celery.Celery, celery.Task]:
    app = celery.Celery("warren-tests", broker=broker_url, backend="rpc://", set_as_current=False)
    app.conf.update(
        task_default_queue=queue,
        event_exchange=f"{queue}.events",  # the worker's heartbeat events go here
        broker_connection_retry_on_startup=False,
        worker_enable_remote_control=False,
        worker_hijack_root_logger=False,
    )

    @app.task(name="warren_tests.add")
    def add(x: int, y: int) -> int:
        return x + y

    return app, add


# The worker subprocess imports this module and takes its app from here.
worker_app = (
    make_celery_app(os.environ[CELERY_BROKER_ENV], os.environ[CELERY_QUEUE_ENV])[0]
    if CELERY_BROKER_ENV in os.environ
    else None
)


def start_worker(broker_url: str, queue: str, log_path: Path) -> subprocess.Popen:
    module = Path(__file__).stem
    command = [sys.executable, "-m", "celery", "-A", f"{module}:worker_app", "worker"]
    command += ["--pool=solo", "--concurrency=1", "--loglevel=INFO", "-Q", queue]
    # Heartbeat events stay on: their timer wakes the worker's event loop, which otherwise
    # takes about ten seconds to notice a SIGTERM after it has run a task.
    command += ["--without-gossip", "--without-mingle"]
    env = {**os.environ, CELERY_BROKER_ENV: broker_url, CELERY_QUEUE_ENV: queue}
    env["PYTHONPATH"] = os.pathsep.join([str(Path(__file__).parent), env.get("PYTHONPATH", "")])
    with log_path.open("wb") as log:
        return subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT)


def stop_worker(worker: subprocess.Popen) -> None:
    if worker.poll() is None:
        worker.send_signal(signal.SIGTERM)  # warm shutdown
        try:
            worker.wait(timeout=WORKER_STOP_S)
        except subprocess.TimeoutExpired:
            worker.kill()
            worker.wait()


def close_celery_app(app: celery.Celery) -> None:
    """Close the connections `app.close()` leaves open: rpc:// results and the pool."""
    app.backend.result_consumer.stop()
    app.pool.force_close_all()
    app.close()


def test_celery_worker_add(amqp, tmp_path):
    broker_url, queue = pyamqp_url(amqp.broker.url), amqp.name("celery")
    amqp.track(f"{queue}.events")
    app, add = make_celery_app(broker_url, queue)
    log_path = tmp_path / "worker.log"
    worker = start_worker(broker_url, queue, log_path)
    try:
        result = add.delay(2, 3)
        assert result.get(timeout=30) == 5, log_path.read_text()
        assert result.successful()
    finally:
        stop_worker(worker)
        close_celery_app(app)
    assert worker.returncode == 0, log_path.read_text()
