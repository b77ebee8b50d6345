"""Python bytecodes a broker executes per W1 message (`python -m bench.bytecodes TREE ...`).

The figure no machine load disturbs, and the one that shows what compiling the cores with
mypyc (`make mypyc`) takes away: compiled code executes no bytecode. For each source tree:
1. A node from that tree (first on PYTHONPATH) runs under `_COUNTER`, which counts the
   ``opcode`` trace events of every Python frame between SIGUSR1 and SIGUSR2 and writes the
   count to a file. Counting slows the node down a hundredfold; only the count matters.
2. Between the signals one aio-pika connection publishes `--messages` transient messages of
   128 bytes to a fresh queue in batches of 1000 while another consumes them with auto-ack
   (W1's shape), until all have arrived; the queue's declare and delete are inside the
   window, a constant that 10,000 messages make negligible.
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
from pathlib import Path

import aio_pika

from bench.brokers import reachable
from warren.runtime.ports import unused_port

# Run as `python -c _COUNTER OUT ARGS...`: the node's `python -m warren ARGS`, counting.
_COUNTER = """
import json, runpy, signal, sys
out, count = sys.argv[1], [0]
sys.argv = ["warren", *sys.argv[2:]]
def local(frame, event, arg):
    if event == "opcode":
        count[0] += 1
    return local
def call(frame, event, arg):
    frame.f_trace_opcodes = True
    return local
def start(signum, frame):
    count[0] = 0
    sys.settrace(call)
def stop(signum, frame):
    sys.settrace(None)
    with open(out, "w") as file:
        json.dump(count[0], file)
signal.signal(signal.SIGUSR1, start)
signal.signal(signal.SIGUSR2, stop)
runpy.run_module("warren", run_name="__main__", alter_sys=True)
"""
START_TIMEOUT_S = 60.0


async def w1(url: str, messages: int) -> None:
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


def count(tree: str, messages: int) -> int:
    with tempfile.TemporaryDirectory(prefix="warren-bytecodes-") as workdir:
        port, management = unused_port(), unused_port()
        out = Path(workdir) / "count.json"
        command = [sys.executable, "-c", _COUNTER, str(out), "--port", str(port)]
        command += ["--management-port", str(management), "--data-dir", f"{workdir}/data"]
        with (Path(workdir) / "warren.log").open("wb") as log:
            node = subprocess.Popen(
                command, env={**os.environ, "PYTHONPATH": tree}, cwd=workdir, stdout=log,
                stderr=subprocess.STDOUT,
            )  # fmt: skip
        url = f"amqp://guest:guest@127.0.0.1:{port}/%2F"
        try:
            deadline = time.monotonic() + START_TIMEOUT_S
            while reachable(url) is not None:
                if time.monotonic() > deadline or node.poll() is not None:
                    raise SystemExit(f"the node from {tree} did not start: see {workdir}")
                time.sleep(0.2)
            node.send_signal(signal.SIGUSR1)
            asyncio.run(w1(url, messages))
            node.send_signal(signal.SIGUSR2)
            while not out.exists():
                time.sleep(0.1)
            time.sleep(0.2)  # the count is written in one short call
            return int(json.loads(out.read_text()))
        finally:
            node.send_signal(signal.SIGTERM)
            node.wait(30)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.bytecodes", description=__doc__)
    parser.add_argument("trees", nargs="+", help="source trees, e.g. a pure and a compiled one")
    parser.add_argument("--messages", type=int, default=10_000)
    args = parser.parse_args(argv)
    for tree in args.trees:
        total = count(str(Path(tree).resolve()), args.messages)
        print(f"{tree}: {total:,} bytecodes, {total / args.messages:,.1f} per message", flush=True)


if __name__ == "__main__":
    main()
