"""Broker CPU per message delivered from a long durable queue (issue #21, `readback`).

    .venv/bin/python -m bench.readback --messages 200000 --trees /tmp/before,.

For each rep, for each source tree in turn (alternating, so both see the same machine), a
Warren node of one worker started from that tree (first on PYTHONPATH: a tree built with
`make mypyc` runs compiled) on free ports:
1. a plain pika client publishes `--messages` persistent 128-byte messages, with confirms,
   into one durable queue;
2. one consumer drains it as the Spark stream reader's consumers do, without Spark:
   `warren.spark.wire`'s client, prefetch `--prefetch`, every read's deliveries acknowledged
   with one `basic.ack` `multiple`.
The broker's CPU (its process tree, from /proc) over the drain, divided by the messages,
is the figure: a durable queue keeps `queue_resident_messages_max` bodies in memory and
reads the rest back from its log as it delivers them. `--resident` runs each tree once more
with that bound above `--messages`, every body in memory: the same drain without reading
back. Prints one line per run and one JSON line.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import time
from typing import Any

import pika

from bench import stats
from bench.brokers import start_warren
from bench.spark_throughput import pika_publish
from warren.amqp.content import method_frame
from warren.amqp.methods import BasicAck, BasicConsume, BasicConsumeOk, BasicQos, BasicQosOk
from warren.spark.message import Deliveries
from warren.spark.wire import CHANNEL, Client

QUEUE = "readback"
CONFIRM_WINDOW = 5_000
# a bound on the resident bodies above any backlog this benchmark queues
RESIDENT_ALL = ["--queue-resident-messages-max", "100000000"]
RESIDENT_ALL += ["--queue-resident-bytes-max", str(1 << 40)]


def drain(url: str, count: int, prefetch: int) -> int:
    """Consume `count` messages from `QUEUE`, acknowledging each read's with `multiple`;
    the delivery tags seen (a check that nothing came twice)."""
    client = Client(url, heartbeat_s=0)
    client.delivered = Deliveries()
    client.call(BasicQos(prefetch_count=prefetch), BasicQosOk)
    client.call(BasicConsume(queue=QUEUE, consumer_tag=QUEUE), BasicConsumeOk)
    received = 0
    deadline = time.monotonic() + 600
    while received < count and time.monotonic() < deadline:
        client.receive(1.0)
        delivered = client.take_delivered()
        if delivered:
            received += len(delivered)
            last = delivered.delivery_tags[-1]
            client.send(method_frame(CHANNEL, BasicAck(last, multiple=True)))
    client.close()
    return received


def profile(pid: int, directory: str, tree: str, resident: bool) -> subprocess.Popen[bytes] | None:
    """py-spy sampling the broker (native frames too: the compiled modules) into
    `directory`, if given."""
    if not directory:
        return None
    name = f"{os.path.basename(os.path.abspath(tree))}-{'resident' if resident else 'paged'}"
    output = os.path.join(directory, f"{name}-{time.strftime('%H%M%S')}.txt")
    command = ["py-spy", "record", "--native", "--format", "raw", "--rate", "250"]
    command += ["--pid", str(pid), "--output", output]
    return subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def run(tree: str, args: argparse.Namespace, resident: bool) -> dict[str, Any]:
    broker, why = start_warren(RESIDENT_ALL if resident else [], tree=os.path.abspath(tree))
    if broker is None:
        raise SystemExit(why)
    try:
        with pika.BlockingConnection(pika.URLParameters(broker.url)) as connection:
            connection.channel().queue_declare(QUEUE, durable=True)
        publish_rate = pika_publish(broker.url, QUEUE, args.messages, CONFIRM_WINDOW)
        time.sleep(1.0)  # the node's maintenance after the publish settles first
        cpu_before, started = stats.tree_cpu_seconds(broker.pid), time.perf_counter()
        profiler = profile(broker.pid, args.profile, tree, resident)
        received = drain(broker.url, args.messages, args.prefetch)
        if profiler is not None:
            profiler.send_signal(signal.SIGINT)
            profiler.wait(60)
        elapsed = time.perf_counter() - started
        cpu = stats.tree_cpu_seconds(broker.pid) - cpu_before
    finally:
        broker.stop()
    return {
        "tree": tree,
        "build": broker.build,
        "resident": resident,
        "messages": received,
        "publish_msg_s": round(publish_rate),
        "drain_msg_s": round(received / elapsed),
        "broker_cpu_us_per_msg": round(cpu / max(received, 1) * 1e6, 2),
        "broker_core": round(cpu / elapsed, 2),
        "load": round(os.getloadavg()[0], 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.readback", description=__doc__)
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--trees", default=".", help="source trees, comma separated")
    parser.add_argument("--reps", type=int, default=1)
    parser.add_argument("--prefetch", type=int, default=20_000)
    parser.add_argument("--profile", default="", help="a directory for py-spy's samples")
    parser.add_argument("--resident", action="store_true", help="also with every body resident")
    args = parser.parse_args()
    results = []
    for _ in range(args.reps):
        for tree in args.trees.split(","):
            for resident in (False, True) if args.resident else (False,):
                result = run(tree, args, resident)
                results.append(result)
                print(
                    f"{time.strftime('%H:%M:%S')} {tree} ({result['build']}"
                    f"{', all resident' if resident else ''}): drained"
                    f" {result['messages']:,} at {result['drain_msg_s']:,} msg/s,"
                    f" broker {result['broker_cpu_us_per_msg']} us/msg"
                    f" ({result['broker_core']} of a core), load {result['load']}",
                    flush=True,
                )
    print(json.dumps({"readback": results}))


if __name__ == "__main__":
    main()
