"""Encode + decode of the peer link's frames per call (`python -m bench.peer_frames`), issue #20.

What crosses a link at message rate, measured as CPU time per call for both ends: the
asking node encodes its request's frame, the other decodes it (and makes the command
live), encodes the reply's frame, and the asking node decodes the reply into its value:

- ``classic_publish``: a channel on a node without the queue publishes 128 bytes to a
  classic queue (`remote.RemoteHost.publish`): ``Send(Call(QueueCommand(Enqueue)))``,
  answered by ``Send(CallReply(True))``;
- ``quorum_forward``: a node that does not lead a quorum queue forwards its publishes'
  entries (`ClusterNode._Forwarder`): ``Ask(Propose)`` with one 180-byte entry per call,
  answered by ``Answer(Led([True, ...]))``;
- ``delivery``: a home (or quorum leader) hands a 128-byte message to a consumer on
  another node: ``Send(Delivery)``, one way.

Each scenario runs with ``--batch`` calls per frame (1: a frame per loop turn each; the
link batches what a turn sends). ``--before PATH`` runs the same scenarios on another
checkout (e.g. the main tree, whose frames were pickles) in a child process, in turns
with this one, and prints both; the median over ``--repeats`` is kept.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from warren.amqp.content import Message
from warren.cluster import queue_entries
from warren.queue import Enqueue, Entry
from warren.runtime.cluster import calls, frames
from warren.runtime.cluster.remote import copy_entry

TYPED = hasattr(frames, "answer")  # False on a tree whose frames are pickles
BATCH_MAX = 64
# distinct objects per call, as publishes are (a pickle would share repeated ones)
MESSAGES = [Message("", "q-bench", b"\x10\x00\x02", bytes([n]) * 128) for n in range(BATCH_MAX)]
ENTRIES = [bytes([1, n]) + b"e" * 178 for n in range(BATCH_MAX)]  # a 128-byte publish's
KEY = ("n2", "5eed5eed", 1)
Scenario = Callable[[int], int]  # runs `batch` calls; the request frame's bytes


def classic_publish(batch: int) -> int:
    commands: list[Any] = [Enqueue(m, 128, None, 0) for m in MESSAGES[:batch]]
    if TYPED:
        commands = [queue_entries.to_record(command) for command in commands]
    requests = [calls.QueueCommand("/", "q-bench", command) for command in commands]
    data = frames.encode_frame([frames.Send(calls.Call(n + 1, r)) for n, r in enumerate(requests)])
    replies = []
    for item in frames.decode_frame(data):
        call = item.message
        if TYPED:  # the home makes the command live (`RemoteQueues._command`)
            live = queue_entries.from_record(call.request.command)
            live.message = queue_entries.message(live.message)
            replies.append(frames.Send(calls.call_reply(call.number, True)))
        else:
            replies.append(frames.Send(calls.CallReply(call.number, True)))
    for item, request in zip(
        frames.decode_frame(frames.encode_frame(replies)), requests, strict=True
    ):
        value = calls.call_value(item.message, request) if TYPED else item.message.value
        assert value is True
    return len(data)


def quorum_forward(batch: int) -> int:
    request = calls.Propose("quorum/%2F/q-bench", tuple(ENTRIES[:batch]))
    data = frames.encode_frame([frames.Ask(1, request)])
    (ask,) = frames.decode_frame(data)
    outcomes = [True] * len(ask.request.commands)
    if TYPED:
        reply = frames.answer(ask.call_id, calls.Led([calls.to_wire(o) for o in outcomes]))
    else:
        reply = frames.Answer(ask.call_id, calls.Led(outcomes))
    (answer,) = frames.decode_frame(frames.encode_frame([reply]))
    if TYPED:
        values = [calls.from_wire(o) for o in frames.answer_value(answer, request).value]
    else:
        values = answer.value.value
    assert values == outcomes
    return len(data)


def delivery(batch: int) -> int:
    entries = [Entry(n, m, 128, None, 0) for n, m in enumerate(MESSAGES[:batch])]
    record = calls.EntryRecord.of if TYPED else copy_entry
    items = [calls.Delivery("/", "q-bench", KEY, record(entry), 0) for entry in entries]
    data = frames.encode_frame([frames.Send(d) for d in items])
    for item, entry in zip(frames.decode_frame(data), entries, strict=True):
        got = item.message.entry.entry() if TYPED else item.message.entry
        assert got.message.body == entry.message.body
    return len(data)


SCENARIOS: dict[str, Scenario] = {
    "classic_publish": classic_publish,
    "quorum_forward": quorum_forward,
    "delivery": delivery,
}


def measure(batches: list[int], calls_per_repeat: int) -> list[dict[str, Any]]:
    """One repeat of every scenario and batch size: µs of CPU per call, both ends."""
    rows = []
    for name, scenario in SCENARIOS.items():
        for batch in batches:
            frame_bytes = scenario(batch)
            rounds = max(1, calls_per_repeat // batch)
            started = time.process_time_ns()
            for _ in range(rounds):
                scenario(batch)
            elapsed = time.process_time_ns() - started
            us = elapsed / 1000 / (rounds * batch)
            rows.append({"scenario": name, "batch": batch, "us": us, "bytes": frame_bytes})
    return rows


def run_tree(tree: Path, batches: list[int], calls_per_repeat: int) -> list[dict[str, Any]]:
    """One repeat on `tree`'s `warren`, in a child process."""
    environment = {**os.environ, "PYTHONPATH": str(tree)}  # run as a file: no cwd on the path
    argv = [sys.executable, __file__, "--child", "--calls", str(calls_per_repeat)]
    argv += ["--batch", *map(str, batches)]
    output = subprocess.run(argv, env=environment, capture_output=True, text=True, check=True)
    rows: list[dict[str, Any]] = json.loads(output.stdout)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--batch", type=int, nargs="+", default=[1, 64], help=f"calls per frame, up to {BATCH_MAX}"
    )
    parser.add_argument("--calls", type=int, default=20000, help="calls per repeat")
    parser.add_argument("--repeats", type=int, default=7, help="the median is kept")
    parser.add_argument("--before", type=Path, help="another checkout, measured in turns")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    arguments = parser.parse_args()
    if arguments.child:
        print(json.dumps(measure(arguments.batch, arguments.calls)))
        return
    here = Path(__file__).resolve().parent.parent
    trees = {"after": here} | ({"before": arguments.before} if arguments.before else {})
    figures: dict[tuple[str, str, int], list[float]] = {}
    sizes: dict[tuple[str, str, int], int] = {}
    for _ in range(arguments.repeats):
        for label, tree in trees.items():
            for row in run_tree(tree, arguments.batch, arguments.calls):
                key = (label, row["scenario"], row["batch"])
                figures.setdefault(key, []).append(row["us"])
                sizes[key] = row["bytes"]
    for (label, scenario, batch), times in sorted(figures.items()):
        row = {
            "tree": label,
            "scenario": scenario,
            "batch": batch,
            "frame_bytes": sizes[label, scenario, batch],
            "us_per_call": round(statistics.median(times), 2),
        }
        print(json.dumps(row))


if __name__ == "__main__":
    main()
