"""Python bytecodes a broker executes per message (`python -m bench.bytecodes TREE ...`).

The figure no machine load disturbs, and the one that shows what compiling the cores with
mypyc (`make mypyc`) takes away: compiled code executes no bytecode. For each source tree:
1. A node from that tree (first on PYTHONPATH) runs under `_COUNTER`, which counts the
   ``opcode`` trace events of every Python frame between two real-time signals (SIGRTMIN, then
   SIGRTMIN+1: the node takes SIGUSR1 for itself) and writes the counts to a file.
   Counting slows the node down a hundredfold; only the count matters.
2. Between the signals one aio-pika connection publishes `--messages` messages of 128 bytes
   to a fresh queue in batches of 1000, in the shape `--workload` names:
   - `w1`: transient messages to an exclusive queue while another connection consumes them
     with auto-ack (W1's shape), until all have arrived;
   - `confirms`: persistent messages with publisher confirms to a durable queue nobody
     consumes (what a reliable producer and the Spark writer do), each batch of 1000 awaited
     for its confirms, then the queue is deleted;
   - `w2`: W2's shape: persistent messages with confirms (batches of 1000 awaited) to a
     durable queue that another connection consumes with manual acks, prefetch 1000, one
     `basic.ack` per message, until all are acked;
   - `spark`: the Spark writer's shape, without Spark: `warren.spark.writer.publish_batches`
     frames record batches of 1000 persistent messages into one buffer each (many publishes
     per socket write, no message ids) and settles confirms in runs, into a durable queue
     nobody consumes, which is deleted at the end;
   - `quorum`: `confirms` into a quorum queue, the node a one-node cluster (as
     `bench.compiled` starts it) so that the queue takes the Raft path;
   - `drop-head`: transient messages to a queue of `x-max-length` 1000 with `drop-head`
     overflow that nobody consumes (W7's shape): past the first 1000 every publish drops
     the head.
   - `w7`: the same queue, fed as `bench.loadgen` feeds it in W7 (`bench.wire`): no
     publisher confirms, no properties, 500 publishes per write. aio-pika's publishes
     above also carry confirms and properties with a message id, which W7 pays not.
   The queue's declare and delete are inside the window, a constant that 10,000 messages
   make negligible. Only the main thread is counted: the log's fsync thread runs no
   per-message Python.
3. `--functions N` also prints the N functions that executed the most bytecodes per message
   (name, file and line of each, so two trees line up), to see where a change took work away.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

import aio_pika
import pyarrow as pa

from bench import wire
from bench.brokers import reachable
from bench.compiled import one_node_cluster
from warren.runtime.ports import unused_port
from warren.spark.options import WriteOptions
from warren.spark.writer import publish_batches

# Run as `python -c _COUNTER OUT ARGS...`: the node's `python -m warren ARGS`, counting.
_COUNTER = """
import collections, json, runpy, signal, sys
out, counts = sys.argv[1], collections.Counter()
sys.argv = ["warren", *sys.argv[2:]]
def local(frame, event, arg):
    if event == "opcode":
        counts[frame.f_code] += 1
    return local
def call(frame, event, arg):
    frame.f_trace_opcodes = True
    return local
def start(signum, frame):
    counts.clear()
    sys.settrace(call)
def stop(signum, frame):
    sys.settrace(None)
    named = collections.Counter()
    for code, n in counts.items():
        named[f"{code.co_qualname} {code.co_filename}:{code.co_firstlineno}"] += n
    with open(out, "w") as file:
        json.dump(named, file)
signal.signal(signal.SIGRTMIN, start)
signal.signal(signal.SIGRTMIN + 1, stop)
runpy.run_module("warren", run_name="__main__", alter_sys=True)
"""
START_TIMEOUT_S = 60.0
WIRE_BATCH = 500  # publishes per socket write, as `bench.loadgen --batch` by default


async def w1(url: str, messages: int) -> None:
    """Transient messages through an exclusive queue to an auto-ack consumer."""
    publisher, consumer = await aio_pika.connect(url), await aio_pika.connect(url)
    queue = await (await consumer.channel()).declare_queue(exclusive=True)
    done = asyncio.get_running_loop().create_future()
    got = 0

    async def on_message(message: aio_pika.abc.AbstractIncomingMessage) -> None:
        nonlocal got
        got += 1
        if got == messages:
            done.set_result(None)

    await queue.consume(on_message, no_ack=True)
    exchange = (await publisher.channel()).default_exchange
    for start in range(0, messages, 1000):
        batch = range(start, min(start + 1000, messages))
        await asyncio.gather(
            *(exchange.publish(aio_pika.Message(b"x" * 128), queue.name) for _ in batch)
        )
    await done
    await publisher.close()
    await consumer.close()


async def publish_persistent(
    channel: aio_pika.abc.AbstractChannel, routing_key: str, messages: int
) -> None:
    """`messages` persistent 128-byte messages to `routing_key` through the default
    exchange, in batches of 1000 each awaited whole (its confirms, on a confirming channel)."""
    persistent = aio_pika.DeliveryMode.PERSISTENT
    for start in range(0, messages, 1000):
        batch = range(start, min(start + 1000, messages))
        await asyncio.gather(
            *(
                channel.default_exchange.publish(
                    aio_pika.Message(b"x" * 128, delivery_mode=persistent), routing_key
                )
                for _ in batch
            )
        )


async def confirms(url: str, messages: int, arguments: dict[str, Any] | None = None) -> None:
    """Persistent messages with confirms into a durable queue nobody consumes."""
    connection = await aio_pika.connect(url)
    channel = await connection.channel(publisher_confirms=True)
    name = f"bytecodes-{os.getpid()}"
    queue = await channel.declare_queue(name, durable=True, arguments=arguments)
    await publish_persistent(channel, queue.name, messages)
    await queue.delete(if_unused=False, if_empty=False)
    await connection.close()


async def quorum(url: str, messages: int) -> None:
    """Persistent messages with confirms into a quorum queue nobody consumes."""
    await confirms(url, messages, {"x-queue-type": "quorum"})


async def drop_head(url: str, messages: int) -> None:
    """Transient messages into a queue of `x-max-length` 1000, `drop-head`, no consumer (W7)."""
    connection = await aio_pika.connect(url)
    channel = await connection.channel()
    arguments: dict[str, Any] = {"x-max-length": 1000, "x-overflow": "drop-head"}
    queue = await channel.declare_queue(exclusive=True, arguments=arguments)
    for start in range(0, messages, 1000):
        batch = range(start, min(start + 1000, messages))
        await asyncio.gather(
            *(
                channel.default_exchange.publish(aio_pika.Message(b"x" * 128), queue.name)
                for _ in batch
            )
        )
    await channel.declare_queue(queue.name, passive=True)  # a round trip: all handled
    await connection.close()


async def w2(url: str, messages: int) -> None:
    """Persistent messages with confirms through a durable queue to a manual-ack consumer."""
    publisher, consumer = await aio_pika.connect(url), await aio_pika.connect(url)
    consuming = await consumer.channel()
    await consuming.set_qos(prefetch_count=1000)
    queue = await consuming.declare_queue(f"bytecodes-w2-{os.getpid()}", durable=True)
    done = asyncio.get_running_loop().create_future()
    got = 0

    async def on_message(message: aio_pika.abc.AbstractIncomingMessage) -> None:
        nonlocal got
        await message.ack()
        got += 1
        if got == messages:
            done.set_result(None)

    await queue.consume(on_message)
    channel = await publisher.channel(publisher_confirms=True)
    await publish_persistent(channel, queue.name, messages)
    await done
    await queue.delete(if_unused=False, if_empty=False)
    await publisher.close()
    await consumer.close()


async def spark(url: str, messages: int) -> None:
    """The Spark writer's publisher on record batches of 1000 bodies, into a durable queue."""
    connection = await aio_pika.connect(url)
    channel = await connection.channel()
    queue = await channel.declare_queue(f"bytecodes-{os.getpid()}", durable=True)
    options = WriteOptions.parse({"uri": url, "routingKey": queue.name})
    batches = (
        pa.record_batch([pa.array([b"x" * 128] * min(1000, messages - start))], names=["body"])
        for start in range(0, messages, 1000)
    )
    await asyncio.to_thread(publish_batches, options, batches)
    await queue.delete(if_unused=False, if_empty=False)
    await connection.close()


async def w7(url: str, messages: int) -> None:
    """W7 as the load generator sends it: no confirms, no properties, 500 per write."""
    connection = await wire.connect(url, wire.Connection)
    name = f"bytecodes-w7-{os.getpid()}"
    arguments: dict[str, object] = {"x-max-length": 1000, "x-overflow": "drop-head"}
    await connection.declare_queue(name, False, arguments)
    template = wire.publish_template(name, 128, False, connection.frame_max)
    for start in range(0, messages, WIRE_BATCH):
        connection.send(template.frames * min(WIRE_BATCH, messages - start))
        await connection.drain()
    await connection.declare_queue(name, False, arguments)  # a round trip: all handled
    await connection.delete_queue(name)
    await connection.close()


WORKLOADS: dict[str, Callable[[str, int], Coroutine[Any, Any, None]]] = {
    "w1": w1,
    "confirms": confirms,
    "w2": w2,
    "spark": spark,
    "drop-head": drop_head,
    "w7": w7,
    "quorum": quorum,
}


def count(tree: str, workload: str, messages: int) -> Counter[str]:
    """Bytecodes a node from `tree` executes per function over one run of `workload`."""
    with tempfile.TemporaryDirectory(prefix="warren-bytecodes-") as workdir:
        port, management = unused_port(), unused_port()
        out = Path(workdir) / "count.json"
        command = [sys.executable, "-c", _COUNTER, str(out), "--port", str(port)]
        command += ["--management-port", str(management), "--data-dir", f"{workdir}/data"]
        if workload == "quorum":
            command += one_node_cluster()
        with (Path(workdir) / "warren.log").open("wb") as log:
            node = subprocess.Popen(
                # one process, the one counted; by the environment, which a tree from before
                # the setting ignores
                command, env={**os.environ, "PYTHONPATH": tree, "WARREN_WORKERS": "1"},
                cwd=workdir, stdout=log,
                stderr=subprocess.STDOUT,
            )  # fmt: skip
        url = f"amqp://guest:guest@127.0.0.1:{port}/%2F"
        try:
            deadline = time.monotonic() + START_TIMEOUT_S
            while reachable(url) is not None:
                if time.monotonic() > deadline or node.poll() is not None:
                    raise SystemExit(f"the node from {tree} did not start: see {workdir}")
                time.sleep(0.2)
            node.send_signal(signal.SIGRTMIN)
            asyncio.run(WORKLOADS[workload](url, messages))
            node.send_signal(signal.SIGRTMIN + 1)
            while not out.exists():
                time.sleep(0.1)
            time.sleep(0.2)  # the count is written in one short call
            return Counter(json.loads(out.read_text()))
        finally:
            node.send_signal(signal.SIGTERM)
            node.wait(30)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.bytecodes", description=__doc__)
    parser.add_argument("trees", nargs="+", help="source trees, e.g. a pure and a compiled one")
    parser.add_argument("--messages", type=int, default=10_000)
    parser.add_argument("--workload", choices=sorted(WORKLOADS), default="w1")
    parser.add_argument("--functions", type=int, default=0, metavar="N")
    args = parser.parse_args(argv)
    for tree in args.trees:
        counts = count(str(Path(tree).resolve()), args.workload, args.messages)
        total = sum(counts.values())
        print(
            f"{tree} ({args.workload}): {total:,} bytecodes, "
            f"{total / args.messages:,.1f} per message",
            flush=True,
        )
        for function, n in counts.most_common(args.functions):
            print(f"  {n / args.messages:8.1f}  {function}", flush=True)


if __name__ == "__main__":
    main()
